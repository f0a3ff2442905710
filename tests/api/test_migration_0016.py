"""Migration 0016 on a database that has networks: a shared one gets its wildcard access_as_shared policy and an
external one its wildcard access_as_external policy (owned by the network's project), a private one none, so that
who sees what is what it was; a downgrade drops the table. Both backends."""

from __future__ import annotations

from sqlalchemy import inspect, text

from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from tests.support import migrations


def test_shared_and_external_networks_get_their_wildcard_policies(old_store: Store) -> None:
    upgrade(old_store, "0015")
    with old_store.engine.begin() as conn:
        for nid, extra in (("shared", {"shared": True}), ("ext", {"router_external": True}), ("private", {}),
                           ("both", {"shared": True, "router_external": True})):  # fmt: skip
            migrations.network(conn, nid, {"port_security_enabled": True, "project_id": f"p-{nid}", **extra})
    upgrade(old_store)
    with old_store.engine.connect() as conn:
        got = sorted(conn.execute(text("SELECT object_type, object_id, action, target_project, project_id "
                                       "FROM rbac_policies")).all())  # fmt: skip
    assert [tuple(r) for r in got] == [
        ("network", "both", "access_as_external", "*", "p-both"),
        ("network", "both", "access_as_shared", "*", "p-both"),
        ("network", "ext", "access_as_external", "*", "p-ext"),
        ("network", "shared", "access_as_shared", "*", "p-shared"),
    ]
    migrations.downgrade(old_store, "0015")
    with old_store.engine.connect() as conn:
        assert "rbac_policies" not in inspect(conn).get_table_names()
    old_store.dispose()

"""Migration 0021 on a database with subnet pools, address scopes and QoS policies: each shared one gets its
wildcard access_as_shared policy (owned by its project), a private one none, so who sees what stays what it was
(their `shared` columns now mirror those policies); a downgrade removes them. Both backends."""

from __future__ import annotations

from sqlalchemy import text

from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from tests.support import migrations

STANDARD = "id, project_id, name, description, created_at, updated_at, revision_number"
VALUES = ":id, :project, '', '', :now, :now, 0"
ROWS = {
    "address_scopes": f"INSERT INTO address_scopes ({STANDARD}, ip_version, shared) VALUES ({VALUES}, 4, :shared)",
    "subnetpools": f"INSERT INTO subnetpools ({STANDARD}, ip_version, prefixes, min_prefixlen, max_prefixlen, "
                   f"default_prefixlen, shared, is_default, hash) VALUES ({VALUES}, 4, '[\"10.0.0.0/8\"]', 8, 32, 8, "
                   ":shared, false, :id)",
    "qos_policies": f"INSERT INTO qos_policies ({STANDARD}, shared, is_default) VALUES ({VALUES}, :shared, false)",
}  # fmt: skip


def test_shared_pools_scopes_and_qos_policies_get_their_wildcard_policies(old_store: Store) -> None:
    upgrade(old_store, "0020")
    with old_store.engine.begin() as conn:
        for table, insert in ROWS.items():
            for shared in (True, False):
                ident = f"{table[:5]}-{'shared' if shared else 'private'}"
                conn.execute(text(insert), {"id": ident, "project": f"p-{table}", "now": migrations.NOW,
                                            "shared": shared})  # fmt: skip
        migrations.network(conn, "n1", {"port_security_enabled": True, "shared": True})
        conn.execute(text("INSERT INTO rbac_policies (id, project_id, object_type, object_id, action, target_project) "
                          "VALUES ('net-star', 'p', 'network', 'n1', 'access_as_shared', '*')"))  # fmt: skip
    upgrade(old_store)
    query = "SELECT object_type, object_id, action, target_project, project_id FROM rbac_policies"
    with old_store.engine.connect() as conn:
        got = sorted(tuple(r) for r in conn.execute(text(query)))
    assert got == [
        ("address_scope", "addre-shared", "access_as_shared", "*", "p-address_scopes"),
        ("network", "n1", "access_as_shared", "*", "p"),
        ("qos_policy", "qos_p-shared", "access_as_shared", "*", "p-qos_policies"),
        ("subnetpool", "subne-shared", "access_as_shared", "*", "p-subnetpools"),
    ]
    migrations.downgrade(old_store, "0020")
    with old_store.engine.connect() as conn:
        assert [tuple(r)[:2] for r in conn.execute(text(query))] == [("network", "n1")]
    old_store.dispose()

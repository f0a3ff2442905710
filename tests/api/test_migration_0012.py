"""Migration 0012 on a database that has forwards: one without a network (a floating IP associated to nothing) was
made through Neutron's face, the others are taken as made through the forwards API; a downgrade drops the column.
Both backends."""

from __future__ import annotations

from sqlalchemy import inspect, text

from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from tests.support import migrations


def test_existing_forwards_get_the_face_that_made_them(old_store: Store) -> None:
    upgrade(old_store, "0011")
    with old_store.engine.begin() as conn:
        migrations.network(conn, "n1", {"port_security_enabled": True})
        for fid, network, address in (("f1", "'n1'", "192.0.2.10"), ("f2", "NULL", "192.0.2.11")):
            conn.execute(
                text(
                    "INSERT INTO forwards (id, network_id, floating_network_id, listen_address, description, config, "
                    f"ports, project_id, created_at, updated_at, revision_number) VALUES (:id, {network}, NULL, "
                    ":address, '', '{}', '[]', 'p', :now, :now, 0)"
                ),
                {"id": fid, "address": address, "now": migrations.NOW},
            )
    upgrade(old_store)
    with old_store.engine.connect() as conn:
        got = dict(conn.execute(text("SELECT id, origin FROM forwards ORDER BY id")).all())
        assert got == {"f1": "forward", "f2": "floatingip"}
    migrations.downgrade(old_store, "0011")
    with old_store.engine.connect() as conn:
        assert "origin" not in {c["name"] for c in inspect(conn).get_columns("forwards")}
        assert conn.execute(text("SELECT count(*) FROM forwards")).scalar() == 2
    old_store.dispose()

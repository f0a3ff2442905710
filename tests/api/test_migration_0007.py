"""Migration 0007 on a database that has data: existing networks get port security (Neutron's default), the
allowed address pairs table comes empty, a group's members get their covering index, and a downgrade takes it all
back. Both backends."""

from __future__ import annotations

from sqlalchemy import inspect, text

from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from tests.support import migrations


def test_existing_networks_get_port_security(old_store: Store) -> None:
    upgrade(old_store, "0006")
    with old_store.engine.begin() as conn:
        migrations.network(conn, "n1")
    upgrade(old_store)
    with old_store.engine.connect() as conn:
        assert conn.execute(text("SELECT port_security_enabled FROM networks WHERE id = 'n1'")).scalar() in (True, 1)
        assert conn.execute(text("SELECT count(*) FROM allowed_address_pairs")).scalar() == 0
        indexes = {i["name"]: i["column_names"] for i in inspect(conn).get_indexes("port_security_groups")}
        assert indexes["ix_port_security_groups_security_group_id_port_id"] == ["security_group_id", "port_id"]
    migrations.downgrade(old_store, "0006")
    with old_store.engine.connect() as conn:
        assert "allowed_address_pairs" not in inspect(conn).get_table_names()
        assert "port_security_enabled" not in {c["name"] for c in inspect(conn).get_columns("networks")}
        indexes = {i["name"] for i in inspect(conn).get_indexes("port_security_groups")}
        assert "ix_port_security_groups_security_group_id" in indexes
    old_store.dispose()

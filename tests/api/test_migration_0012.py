"""Migration 0012 on a database that has forwards: one without a network (a floating IP associated to nothing) was
made through Neutron's face, the others are taken as made through the forwards API; a downgrade drops the column.
Both backends."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, text

from cloudnet.store.db import Store
from cloudnet.store.migrate import alembic_config, upgrade
from tests.support.postgres import PostgresServer

NOW = "2026-01-01 00:00:00"


@pytest.fixture
def old_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if backend == "sqlite":
        return Store(f"sqlite:///{tmp_path / 'old.db'}")
    pg: PostgresServer = request.getfixturevalue("postgres")
    name = f"m0012_{uuid.uuid4().hex[:12]}"
    pg.psql(f"CREATE DATABASE {name}")
    return Store(pg.url(name))


def test_existing_forwards_get_the_face_that_made_them(old_store: Store) -> None:
    upgrade(old_store, "0011")
    with old_store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO networks (id, project_id, name, description, created_at, updated_at, revision_number, "
                "admin_state_up, shared, mtu, status, router_external, network_type, config, routes, "
                "port_security_enabled) VALUES "
                "('n1', 'p', 'old', '', :now, :now, 0, true, false, 1500, 'ACTIVE', false, 'local', '{}', '[]', true)"
            ),
            {"now": NOW},
        )
        for fid, network, address in (("f1", "'n1'", "192.0.2.10"), ("f2", "NULL", "192.0.2.11")):
            conn.execute(
                text(
                    "INSERT INTO forwards (id, network_id, floating_network_id, listen_address, description, config, "
                    f"ports, project_id, created_at, updated_at, revision_number) VALUES (:id, {network}, NULL, "
                    ":address, '', '{}', '[]', 'p', :now, :now, 0)"
                ),
                {"id": fid, "address": address, "now": NOW},
            )
    upgrade(old_store)
    with old_store.engine.connect() as conn:
        got = dict(conn.execute(text("SELECT id, origin FROM forwards ORDER BY id")).all())
        assert got == {"f1": "forward", "f2": "floatingip"}
    cfg = alembic_config(old_store)
    with old_store.engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0011")
        conn.commit()
    with old_store.engine.connect() as conn:
        assert "origin" not in {c["name"] for c in inspect(conn).get_columns("forwards")}
        assert conn.execute(text("SELECT count(*) FROM forwards")).scalar() == 2
    old_store.dispose()

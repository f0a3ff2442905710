"""Migration tests' helpers: a database of an earlier schema on the test's backend (a fresh PostgreSQL database
each), a network row as any schema since 0001 holds it, and a downgrade."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, text

from cloudnet.store.db import Store
from cloudnet.store.migrate import alembic_config
from tests.support.postgres import PostgresServer

NOW = "2026-01-01 00:00:00"


def old_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path, label: str) -> Store:
    if backend == "sqlite":
        return Store(f"sqlite:///{tmp_path / 'old.db'}")
    pg: PostgresServer = request.getfixturevalue("postgres")
    name = f"{label}_{uuid.uuid4().hex[:12]}"
    pg.psql(f"CREATE DATABASE {name}")
    return Store(pg.url(name))


def network(conn: Connection, network_id: str, extra: dict[str, object] | None = None) -> None:
    """A network row with the columns of 0001 (and `extra` ones of later schemas)."""
    values: dict[str, object] = {
        "id": network_id, "project_id": "p", "name": "old", "description": "", "created_at": NOW, "updated_at": NOW,
        "revision_number": 0, "admin_state_up": True, "shared": False, "mtu": 1500, "status": "ACTIVE",
        "router_external": False, "network_type": "local", "config": "{}", "routes": "[]", **(extra or {}),
    }  # fmt: skip
    columns = ", ".join(values)
    conn.execute(text(f"INSERT INTO networks ({columns}) VALUES ({', '.join(':' + k for k in values)})"), values)


def downgrade(store: Store, revision: str) -> None:
    cfg = alembic_config(store)
    with store.engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)
        conn.commit()

"""Create or upgrade the schema with Alembic at start-up."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text

from cloudnet.store.db import Store

MIGRATIONS = Path(__file__).parent / "migrations"
# Any fixed number: it names the PostgreSQL advisory lock that lets only one server migrate at once.
_PG_MIGRATION_LOCK = 0x636C6F75


def alembic_config(store: Store) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", store.url.replace("%", "%%"))
    return cfg


def upgrade(store: Store, revision: str = "head") -> None:
    cfg = alembic_config(store)
    with store.engine.connect() as conn:
        if not store.is_sqlite:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
            conn.commit()
        try:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
        finally:
            if not store.is_sqlite:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_MIGRATION_LOCK})
                conn.commit()

"""Alembic environment: runs on the connection handed over by cloudnet.store.migrate."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from cloudnet.store import tables_rbac  # noqa: F401  (its table is on the same MetaData)
from cloudnet.store.tables import metadata

config = context.config


def run() -> None:
    conn = config.attributes.get("connection")
    if conn is None:  # `alembic` run by hand, e.g. to autogenerate a revision
        engine = create_engine(config.get_main_option("sqlalchemy.url"))
        with engine.connect() as own:
            _migrate(own)
        return
    _migrate(conn)


def _migrate(conn) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=conn,
        target_metadata=metadata,
        render_as_batch=conn.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
    if conn.in_transaction():
        conn.commit()


run()

"""Engine, transactions and the revision log.

Every writing transaction records its changes as events; at commit the global revision counter is
bumped once by the number of events and one event row per change is written, all inside the same
transaction. The counter row is locked until commit, so revisions are gap-free and in commit order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, insert, select, update
from sqlalchemy.engine import make_url

from cloudnet.store import tables as t


def utcnow() -> datetime:
    # Neutron reports whole seconds; storing them keeps created_at == what clients saw.
    return datetime.now(UTC).replace(microsecond=0, tzinfo=None)


@dataclass(frozen=True)
class Event:
    resource: str
    resource_id: str
    operation: str  # create | update | delete
    project_id: str | None = None


@dataclass
class Tx:
    """A writing transaction: the connection plus the events it will publish at commit."""

    conn: Connection
    now: datetime = field(default_factory=utcnow)
    events: list[Event] = field(default_factory=list)

    def record(self, resource: str, resource_id: str, operation: str, project_id: str | None = None) -> None:
        self.events.append(Event(resource, resource_id, operation, project_id))


class Store:
    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        self.dialect = make_url(url).get_backend_name()
        self.is_sqlite = self.dialect == "sqlite"
        self._write_lock = threading.Lock()
        self._listeners: list[Callable[[int], None]] = []
        if self.is_sqlite:
            database = make_url(url).database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            self.engine = create_engine(
                url, echo=echo, connect_args={"check_same_thread": False, "isolation_level": None}
            )
            self._setup_sqlite(self.engine)
        else:
            # Timestamps are written as UTC: the session must read them back as UTC too.
            self.engine = create_engine(
                url, echo=echo, pool_size=10, max_overflow=20, pool_pre_ping=True,
                connect_args={"options": "-c timezone=UTC"},
            )  # fmt: skip

    @staticmethod
    def _setup_sqlite(engine: Engine) -> None:
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # The driver runs in autocommit mode so that we choose the BEGIN: writers take the write
            # lock up front (IMMEDIATE) instead of failing to upgrade a read lock halfway through.
            mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
            conn.exec_driver_sql(f"BEGIN {mode}")

    # -- transactions -----------------------------------------------------------------------------

    @contextmanager
    def read(self, snapshot: bool = False) -> Iterator[Connection]:
        """A reading transaction. `snapshot`: every statement sees the same committed state (SQLite's
        transactions always do; PostgreSQL needs REPEATABLE READ for it)."""
        with self.engine.connect() as conn:
            if snapshot and not self.is_sqlite:
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @contextmanager
    def write(self) -> Iterator[Tx]:
        """One writing transaction; commits (and publishes its events) on success, else rolls back."""
        lock = self._write_lock if self.is_sqlite else None
        if lock:
            lock.acquire()
        try:
            with self.engine.connect() as conn:
                if self.is_sqlite:
                    conn = conn.execution_options(sqlite_begin="IMMEDIATE")
                with conn.begin():
                    tx = Tx(conn)
                    yield tx
                    revision = self._publish(tx)
        finally:
            if lock:
                lock.release()
        if revision is not None:
            for listener in list(self._listeners):
                listener(revision)

    def _publish(self, tx: Tx) -> int | None:
        if not tx.events:
            return None
        n = len(tx.events)
        last = tx.conn.execute(
            update(t.revision_counter)
            .where(t.revision_counter.c.id == 1)
            .values(value=t.revision_counter.c.value + n)
            .returning(t.revision_counter.c.value)
        ).scalar_one()
        first = last - n + 1
        tx.conn.execute(
            insert(t.events),
            [
                {
                    "revision": first + i,
                    "resource": e.resource,
                    "resource_id": e.resource_id,
                    "operation": e.operation,
                    "project_id": e.project_id,
                    "created_at": tx.now,
                }
                for i, e in enumerate(tx.events)
            ],
        )
        return int(last)

    def on_commit(self, listener: Callable[[int], None]) -> None:
        """Call `listener(revision)` after each commit in this process that recorded events."""
        self._listeners.append(listener)

    def current_revision(self) -> int:
        with self.read() as conn:
            value = conn.execute(select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1))
            return int(value.scalar_one_or_none() or 0)

    def dispose(self) -> None:
        self.engine.dispose()

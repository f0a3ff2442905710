"""Engine, transactions and the revision log.

Every writing transaction records its changes as events; at commit the global revision counter is
bumped once by the number of events and one event row per change is written, all inside the same
transaction. The counter row is locked until commit, so revisions are gap-free and in commit order.
The same log keeps this process's caches current (store/changes.py): `tx.sync()` before using one.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, create_engine, event, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError

from cloudnet.store import tables as t
from cloudnet.store.changes import Changes
from cloudnet.store.events import MAX_DETAIL, Event
from cloudnet.store.prepared import BulkInsert, Prepared
from cloudnet.store.timing import timed
from cloudnet.wire import request_ids

log = logging.getLogger(__name__)
SQLITE_CACHE_KB = 65536
SQLITE_BUSY_MS = 30000
# PostgreSQL write transactions a server process runs at once (SQLite: one).
PG_WRITERS = 4
# A pooled PostgreSQL connection idle for longer than this is checked (one round trip) before it is used.
PING_AFTER_IDLE = 1.0

_BEGIN = {"DEFERRED": "BEGIN DEFERRED", "IMMEDIATE": "BEGIN IMMEDIATE"}
RC, E = t.revision_counter, t.events
_BUMP = Prepared(
    update(RC)
    .where(RC.c.id == 1)
    .values(value=RC.c.value + bindparam("n", type_=RC.c.value.type))
    .returning(RC.c.value)
)
_EVENT_COLUMNS = ("revision", "resource", "resource_id", "operation", "project_id", "created_at", "type", "request_id",
                  "detail")  # fmt: skip
_INSERT_EVENTS = BulkInsert(E, _EVENT_COLUMNS)
# PostgreSQL, one event (most transactions): counter and event row in one statement, one round trip.
_bumped = update(RC).where(RC.c.id == 1).values(value=RC.c.value + 1).returning(RC.c.value).cte("bumped")
_PUBLISH_ONE_PG = Prepared(
    insert(E)
    .from_select(
        list(_EVENT_COLUMNS),
        select(_bumped.c.value, *[bindparam(c, type_=E.c[c].type) for c in _EVENT_COLUMNS[1:]]),
    )
    .returning(E.c.revision)
)


def _event_row(e: Event, now: datetime, revision: int | None = None) -> dict[str, Any]:
    row = {"resource": e.resource, "resource_id": e.resource_id, "operation": e.operation,
           "project_id": e.project_id, "created_at": now, "type": e.typed(), "request_id": e.request_id,
           "detail": e.detail}  # fmt: skip
    if revision is not None:
        row["revision"] = revision
    return row


def utcnow() -> datetime:
    # Neutron reports whole seconds; storing them keeps created_at == what clients saw.
    return datetime.now(UTC).replace(microsecond=0, tzinfo=None)


@dataclass
class Tx:
    """A writing transaction: the connection plus the events it will publish at commit."""

    conn: Connection
    now: datetime = field(default_factory=utcnow)
    events: list[Event] = field(default_factory=list)
    store: Store | None = None
    # Whether this process's caches were brought up to date in this transaction (tx.sync()).
    synced: bool = False
    # What the services note about the transaction for their cache watchers (e.g. pool ports a claim took).
    notes: dict[str, Any] = field(default_factory=dict)
    # The revision of an event its own statement already published (counter bumped, event row written: a
    # PostgreSQL claim saves a round trip so); it is then the transaction's first event.
    prepublished: int | None = None
    _on_commit: list[Callable[[], None]] = field(default_factory=list)
    _on_rollback: list[Callable[[], None]] = field(default_factory=list)

    def record(self, resource: str, resource_id: str, operation: str, project_id: str | None = None, *,
               type: str | None = None, detail: str | None = None) -> None:  # fmt: skip
        """An event of this transaction; it carries the id of the request at work (wire/request_ids.py)."""
        self.events.append(Event(resource, resource_id, operation, project_id, type, request_ids.current.get(),
                                 None if detail is None else detail[:MAX_DETAIL]))  # fmt: skip

    def describe(self, type: str, detail: str | None = None, request_id: str | None = None) -> None:
        """Give the event recorded last a type of its own (port.active, host.down), a reason, the request id of
        what it realises (an agent's report names the request that made the port)."""
        last = self.events[-1]
        self.events[-1] = replace(last, type=type, detail=None if detail is None else detail[:MAX_DETAIL],
                                  request_id=request_id or last.request_id)  # fmt: skip

    def record_published(self, event: Event, revision: int) -> None:
        """An event whose statement bumped the counter to `revision` and wrote its row; only as the first event
        of the transaction (the counter row stays locked until commit, so later events follow it directly)."""
        if self.events or self.prepublished is not None:
            raise RuntimeError("a pre-published event must be the transaction's first")
        self.events.append(event)
        self.prepublished = revision

    def revision_before(self) -> int:
        """The revision committed before this transaction's own events: on PostgreSQL the counter's row stays locked
        until commit, so that no other writer's events come between (SQLite writers take turns anyway)."""
        counter = select(RC.c.value).where(RC.c.id == 1)
        if self.conn.dialect.name == "postgresql":
            counter = counter.with_for_update()
        return int(self.conn.execute(counter).scalar() or 0)

    def sync(self, upto: int | None = None) -> None:
        """Bring this process's caches up to the committed revision before using them (once per transaction);
        `upto`: a committed revision this transaction saw, instead of reading the counter."""
        if self.store is not None and not self.synced:
            self.store.changes.sync(self, upto)

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Run `fn` once the transaction has committed (in-memory bookkeeping only: it must not fail)."""
        self._on_commit.append(fn)

    def after_rollback(self, fn: Callable[[], None]) -> None:
        """Run `fn` if the transaction rolls back (undo in-memory bookkeeping done ahead of the commit)."""
        self._on_rollback.append(fn)


def _run_hooks(hooks: list[Callable[[], None]]) -> None:
    for fn in hooks:
        try:
            fn()
        except Exception:
            log.exception("transaction hook failed")


class Store:
    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        self.dialect = make_url(url).get_backend_name()
        self.is_sqlite = self.dialect == "sqlite"
        # SQLite: one writer at a time in this process (reentrant for `writes_held_here`, below).
        self._write_lock = threading.RLock()
        self._inline = threading.local()
        self._listeners: list[Callable[[int], None]] = []
        self.changes: Changes[Tx] = Changes()
        self._checkpointer: Checkpointer | None = None
        self._writer: Connection | None = None  # SQLite: the connection of every write transaction
        self._pg_writers = threading.BoundedSemaphore(PG_WRITERS)
        if self.is_sqlite:
            database = make_url(url).database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
                self._checkpointer = Checkpointer(database)
            self.engine = create_engine(
                url, echo=echo, connect_args={"check_same_thread": False, "isolation_level": None}
            )
            self._setup_sqlite(self.engine, background_checkpoints=self._checkpointer is not None)
        else:
            # Timestamps are written as UTC: the session must read them back as UTC too.
            self.engine = create_engine(
                url, echo=echo, pool_size=10, max_overflow=20, connect_args={"options": "-c timezone=UTC"},
            )  # fmt: skip
            self._setup_ping(self.engine)

    @staticmethod
    def _setup_sqlite(engine: Engine, *, background_checkpoints: bool) -> None:
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
            # A page cache (per connection) that holds the hot tables and indexes: the default 2 MB makes every
            # write read index pages back from the kernel once ~10,000 ports exist.
            cur.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KB}")
            if background_checkpoints:  # the Checkpointer does it, off the committing request's path
                cur.execute("PRAGMA wal_autocheckpoint=0")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # The driver runs in autocommit mode so that we choose the BEGIN: writers take the write
            # lock up front (IMMEDIATE) instead of failing to upgrade a read lock halfway through.
            mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
            conn.connection.dbapi_connection.execute(_BEGIN[mode])  # type: ignore[union-attr]

    @staticmethod
    def _setup_ping(engine: Engine) -> None:
        """Like pool_pre_ping, but only for connections idle longer than PING_AFTER_IDLE: a busy server does
        not pay a round trip per transaction, and one that was idle still never uses a dead connection."""

        @event.listens_for(engine, "checkin")
        def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
            record.info["idle_since"] = time.monotonic()

        @event.listens_for(engine, "checkout")
        def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
            idle_since = record.info.get("idle_since")
            if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE:
                return
            try:
                engine.dialect.do_ping(dbapi_conn)
            except Exception:
                raise DisconnectionError() from None  # the pool replaces the connection and retries

    # -- transactions -----------------------------------------------------------------------------

    @contextmanager
    def read(self, snapshot: bool = False) -> Iterator[Connection]:
        """A reading transaction. `snapshot`: every statement sees the same committed state (SQLite's
        transactions always do; PostgreSQL needs REPEATABLE READ for it)."""
        with timed("read"), self.engine.connect() as conn:
            if snapshot and not self.is_sqlite:
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @contextmanager
    def write(self) -> Iterator[Tx]:
        """One writing transaction; commits (and publishes its events) on success, else rolls back."""
        if self.is_sqlite:
            # One writer at a time (SQLite has one write lock), so all writes share one connection, kept open:
            # no pool checkout and return per transaction.
            with self._write_lock:
                conn = self._sqlite_writer()
                raw = conn.connection.dbapi_connection
                inline = getattr(self._inline, "held", False)
                if inline and raw is not None:  # never wait for another process's lock (see writes_held_here)
                    raw.execute("PRAGMA busy_timeout=0")
                try:
                    revision = yield from self._transaction(conn)
                except BaseException as exc:
                    # A database error (a failed BEGIN included) may leave the connection in any state: a new one.
                    if conn.invalidated or conn.in_transaction() or isinstance(exc, sqlite3.Error | DBAPIError):
                        self._drop_sqlite_writer()
                    raise
                finally:
                    if inline and raw is not None:
                        with contextlib.suppress(sqlite3.Error):  # closed with a dropped writer: nothing to undo
                            raw.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
        else:
            # A few write transactions at a time: their round trips overlap, but dozens of threads would only
            # queue for the interpreter lock while holding row locks (50 concurrent claims: 3x slower).
            with self._pg_writers, self.engine.connect() as conn:
                revision = yield from self._transaction(conn)
        if revision is not None:
            for listener in list(self._listeners):
                listener(revision)

    def _transaction(self, conn: Connection) -> Generator[Tx, None, int | None]:
        tx = Tx(conn, store=self)
        span = None
        try:
            with timed("write"), conn.begin():
                yield tx
                span = self._publish(tx)
                if span is not None:
                    self.changes.publishing(tx, span[0])
        except BaseException:
            if span is not None:
                self.changes.abandoned(span[0])
            _run_hooks(tx._on_rollback)
            raise
        # On SQLite still holding the write lock: the next writer finds the caches already current.
        revision = None
        if span is not None:
            self.changes.committed(tx, *span)
            revision = span[1]
        _run_hooks(tx._on_commit)
        if self._checkpointer is not None:
            self._checkpointer.committed(len(tx.events))
        return revision

    @contextmanager
    def writes_held_here(self) -> Iterator[bool]:
        """SQLite: take this process's write lock if it is free right now, for write transactions of this thread
        that must not wait: while held, their BEGIN fails at once (OperationalError, "database is locked")
        instead of waiting for another process's transaction. Yields whether it was taken (never on PostgreSQL).
        Lets a short request run its transaction on the event loop without ever blocking the loop."""
        if not self.is_sqlite or not self._write_lock.acquire(blocking=False):
            yield False
            return
        self._inline.held = True
        try:
            yield True
        finally:
            self._inline.held = False
            self._write_lock.release()

    def _sqlite_writer(self) -> Connection:
        if self._writer is None or self._writer.closed:
            self._writer = self.engine.connect().execution_options(sqlite_begin="IMMEDIATE")
        return self._writer

    def _drop_sqlite_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception:
                log.exception("closing the SQLite writer connection failed")

    def _publish(self, tx: Tx) -> tuple[int, int] | None:
        """Bump the revision by the number of events and write their rows; the revisions they got."""
        if not tx.events:
            return None
        if tx.prepublished is not None:
            first, rest = tx.prepublished, tx.events[1:]
            if rest:  # after it, as its bump keeps the counter row locked: first+1 ..
                last = int(_BUMP.scalar(tx.conn, {"n": len(rest)}))
                _INSERT_EVENTS.run(tx.conn, [_event_row(e, tx.now, last - len(rest) + 1 + i)
                                             for i, e in enumerate(rest)])  # fmt: skip
                return first, last
            return first, first
        n = len(tx.events)
        if n == 1 and not self.is_sqlite:
            last = _PUBLISH_ONE_PG.scalar(tx.conn, _event_row(tx.events[0], tx.now))
            return int(last), int(last)
        last = int(_BUMP.scalar(tx.conn, {"n": n}))
        first = last - n + 1
        _INSERT_EVENTS.run(tx.conn, [_event_row(e, tx.now, first + i) for i, e in enumerate(tx.events)])
        return first, last

    def on_commit(self, listener: Callable[[int], None]) -> None:
        """Call `listener(revision)` after each commit in this process that recorded events."""
        self._listeners.append(listener)

    def current_revision(self) -> int:
        with self.read() as conn:
            value = conn.execute(select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1))
            return int(value.scalar_one_or_none() or 0)

    def dispose(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        with self._write_lock:
            self._drop_sqlite_writer()
        self.engine.dispose()


class Checkpointer:
    """SQLite WAL checkpoints in a background thread instead of inside whichever commit crosses the WAL size
    limit: that commit would copy ~1000 pages into the database file and fsync it (~5-20 ms on a virtual disk,
    the p99 of every write). Checkpoints are PASSIVE (writers and readers go on meanwhile) and run once EVERY
    changes (events) were committed, or a second after the last commit, so the WAL stays about as small as with
    SQLite's own (a big WAL slows every read)."""

    EVERY = 200
    IDLE = 1.0

    def __init__(self, database: str) -> None:
        self.database = database
        self._pending = 0
        self.runs = 0  # checkpoints made
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def committed(self, changes: int = 1) -> None:
        self._pending += max(changes, 1)
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._stopping:
                    self._thread = threading.Thread(target=self._run, name="cloudnet-checkpoint", daemon=True)
                    self._thread.start()
        if self._pending >= self.EVERY:
            self._wake.set()

    def _run(self) -> None:
        conn = sqlite3.connect(self.database, check_same_thread=False, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout=30000")
            while not self._stopping:
                self._wake.wait(self.IDLE)
                self._wake.clear()
                if self._pending and not self._stopping:
                    self._pending = 0
                    try:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                        self.runs += 1
                    except sqlite3.Error as exc:
                        log.warning("WAL checkpoint of %s failed: %s", self.database, exc)
        finally:
            conn.close()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=30)

"""The server's northbound writer: a thread that keeps OVN's NB database equal to what cloudnet's database implies.

It wakes on every change this process commits (the store's change feed), and at least every `interval` seconds to
notice other server processes' changes (the revision counter) and changes made to NB behind its back (the IDL's
change counter): each pass reads the desired rows (desired.py) when the revision moved and applies them in one NB
transaction (apply.py), so changes that arrive during a pass form the next batch. When the revision log since the
last read holds only port changes, a pass reads only the rows those touch (scoped.py) and visits only those, the NB
rows changed since and the ones it wrote last time; otherwise it reads all and compares only the NB rows that may
differ (mirror.py: rows changed in NB since, or whose desired spec changed). It reads and compares every row on the
first pass, after a reconnect or a failed pass, and every FULL_EVERY seconds. The first pass after start and
after every reconnect is a full resync like any other: the diff covers every row cloudnet owns, repairs it and
reports what differed. While NB is unreachable or a pass fails, `status` says so with the reason, and passes are
retried with backoff.

One writer at a time: each writer asks NB's ovsdb-server for the OVSDB lock WRITER_LOCK (as Neutron's maintenance
worker does), and only the holder writes; the other server processes stand by (`status.reason` says so) and the
first to get the lock when the holder goes (stopped, killed: its connection drops) starts with a full resync. The
IDL also refuses to commit without the lock, so two writers never interleave passes from different snapshots.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ovsdbapp import api as ovsdbapp_api
from ovsdbapp.backend import ovs_idl
from ovsdbapp.backend.ovs_idl import connection, transaction
from sqlalchemy import select

from cloudnet import metrics
from cloudnet.northbound import desired as desired_rows
from cloudnet.northbound import scoped
from cloudnet.northbound.apply import ApplyRows, Report
from cloudnet.northbound.mirror import Mirror, NbIdl
from cloudnet.northbound.rows import element_counts
from cloudnet.northbound.staging import FENCE_WAIT, Fence, StageNewPorts, needed, wait_northd
from cloudnet.ovn.idl import follow_leader
from cloudnet.ovn.jsonparser import use_c_parser
from cloudnet.store import tables as t
from cloudnet.store.db import Store

log = logging.getLogger(__name__)
MAX_BACKOFF = 5.0
WRITER_LOCK = "cloudnet_northbound_writer"
STANDBY = f"standby: another server process holds NB's writer lock ({WRITER_LOCK})"
ROW_BUDGET = 0.002  # seconds a pass's transaction may take a row, beyond `timeout` (a first pass writes them all)
RECONNECT_POLL = 0.1  # seconds between looks at an IDL that is reconnecting
RETRY = 0.25  # seconds between the IDL's connection attempts (a few writers: each member sees 4 a second at most)
LSP_KEY = "lsp/"  # (desired.port_row's keys)
FULL_EVERY = 600.0  # seconds: a pass reads and compares every row at least this often (besides start, reconnect)


class Reconnecting(ConnectionError):
    """The IDL's session is down: it reconnects by itself (to the next remote of a cluster's list)."""


class _NbApi(ovs_idl.Backend, ovsdbapp_api.API):  # type: ignore[misc]
    """ovsdbapp's backend with the connection per instance (its own classes keep one per class, so a second
    writer in the same process, such as a test's, would silently share the first one's)."""

    def __init__(self, conn: connection.Connection) -> None:
        self._conn = conn
        super().__init__(conn, start=True, auto_index=False)

    @property
    def ovsdb_connection(self) -> connection.Connection:
        return self._conn

    def create_transaction(self, check_error: bool = False, log_errors: bool = True, timeout: float | None = None,
                           **_kwargs: Any) -> transaction.Transaction:  # fmt: skip
        """ovsdbapp's, with a timeout of its own (its backend's takes the connection's, whatever is asked)."""
        return transaction.Transaction(self, self._conn, timeout or self._conn.timeout, check_error, log_errors)

    @ovsdb_connection.setter
    def ovsdb_connection(self, value: connection.Connection) -> None:
        self._conn = value


@dataclass(frozen=True)
class Status:
    """Where the writer is: `ok` None before the first pass; `revision`: the database revision NB last matched.
    The last pass's timing (time.monotonic() seconds, for benchmarks and logs): `took` from its start to its NB
    commit, `read_took` of that reading cloudnet's database, `committed_at` when its commit returned; `read` how the
    last pass that read cloudnet's database read it: "full", or "log" (only what the revision log's events since the
    last read touch: scoped.py)."""

    ok: bool | None = None
    reason: str = ""
    revision: int = -1
    passes: int = 0
    last_report: str = ""
    refused: tuple[str, ...] = field(default=())
    took: float = 0.0
    read_took: float = 0.0
    committed_at: float = 0.0
    read: str = ""


class NorthboundSync:
    def __init__(self, store: Store, nb_url: str, gateway_chassis: Sequence[str] = (), *, interval: float = 0.5,
                 timeout: float = 10.0, look: Callable[[], None] | None = None) -> None:  # fmt: skip
        """`look`: called at each of the writer's looks (every `interval`), such as at OVN's daemons."""
        self.store, self.nb_url, self.gateway_chassis = store, nb_url, tuple(gateway_chassis)
        self.look = look
        self.interval, self.timeout = interval, timeout
        self.status = Status()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._api: _NbApi | None = None
        self._mirror = Mirror()
        self._staging = False  # (staging.needed(): set on each connect, from NB's schema)
        self._thread = threading.Thread(target=self._run, name="northbound-sync", daemon=True)
        store.changes.watch(self._changed)

    def _changed(self, _events: object, _tx: object) -> None:
        self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:  # (a writer may be stopped without having been started)
            self._thread.join(timeout=self.timeout + 5)
        if self._api is not None:
            self._api.ovsdb_connection.stop(timeout=5)
            self._api = None

    def wait_synced(self, timeout: float = 10.0) -> Status:
        """Wait until a pass has matched NB to the database's current revision (tests, start-up)."""
        with self.store.read() as conn:
            target = int(conn.execute(_revision()).scalar() or 0)
        self._wake.set()
        deadline = time.monotonic() + timeout
        with self._done:
            while not (self.status.ok and self.status.revision >= target):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"NB not synced to revision {target} in {timeout:g} s: {self.status}")
                self._done.wait(left)
        return self.status

    def _set(self, status: Status) -> None:
        with self._done:
            self.status = status
            self._done.notify_all()

    def _fail(self, reason: str) -> None:
        if self.status.ok is not False or self.status.reason != reason:
            log.warning("northbound sync failed: %s", reason)
        s = self.status
        self._set(Status(False, reason, s.revision, s.passes, s.last_report, s.refused))

    def _connect(self) -> _NbApi:
        use_c_parser()  # (big rows: parsing their updates in Python would dominate every pass)
        idl = NbIdl.from_server(self.nb_url, "OVN_Northbound")
        self._staging = needed(idl._db.version)
        idl.set_lock(WRITER_LOCK)  # (before the connection's thread runs the IDL; asked again on every reconnect)
        follow_leader(idl, RETRY)  # (NB may be a cluster: every member's remote, its new leader found at once)
        return _NbApi(connection.Connection(idl=idl, timeout=self.timeout))

    def _run(self) -> None:
        backoff = 0.0
        seen_seqno: int | None = None
        seen_session: int | None = None  # the session's seqno at the last pass (it moves on every reconnect)
        cached: scoped.Cache | None = None
        last_full = 0.0
        failed = False
        while not self._stop.is_set():
            self._wake.wait(backoff or self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            if self.look is not None:
                self.look()
            try:
                if self._api is None:
                    self._api = self._connect()
                    self._mirror = Mirror()  # (what it remembers is of the IDL it came from)
                    seen_seqno = None
                started = time.monotonic()  # (after connecting: the pass is what follows)
                idl: Any = self._api.idl
                # (the IDL keeps its state while the session is down: the session says whether it is connected)
                if idl.state != idl.IDL_S_MONITORING or not idl._session.is_connected():
                    seen_seqno = None  # a full pass once it is back
                    raise Reconnecting(f"NB database at {self.nb_url} is unreachable (reconnecting)")
                if idl._session.get_seqno() != seen_session:
                    # Reconnected since the last pass, maybe to another member of a cluster (a pass in flight then
                    # is retried there, unseen here): compare everything, as after any reconnect.
                    seen_seqno, seen_session = None, idl._session.get_seqno()
                if not idl.has_lock:
                    seen_seqno = None  # a full pass once it is ours
                    if self.status.reason != STANDBY:
                        log.info("northbound sync: %s", STANDBY)
                        s = self.status
                        self._set(Status(None, STANDBY, s.revision, s.passes, s.last_report, s.refused))
                    backoff = 0.0
                    continue
                with self.store.read() as conn:
                    revision = int(conn.execute(_revision()).scalar() or 0)
                if cached is not None and revision == cached.revision and idl.change_seqno == seen_seqno:
                    if not self.status.ok:
                        self._set(Status(True, "", revision, self.status.passes, self.status.last_report,
                                         tuple(cached.refused)))  # fmt: skip
                    backoff = 0.0
                    continue
                drift = cached is not None and revision == cached.revision
                reconnected = seen_seqno is None
                full = reconnected or failed or time.monotonic() - last_full >= FULL_EVERY
                read, hint = "", set()  # (the keys whose rows the read changed; None: any)
                # A full pass reads in full too, unless nothing changed since the last full read.
                if cached is None or revision != cached.revision or (full and cached.scoped):
                    cached, hint = self._read(cached, full)
                    read = "full" if hint is None else "log"
                read_done = time.monotonic()
                # Taken before the diff: an edit made behind our back while this pass runs moves the counter past
                # it, so the next pass looks again (our own commit's echo costs one pass that finds nothing).
                before = idl.change_seqno
                report = self._commit(list(cached.rows.values()), full, hint)
                if full:
                    last_full, failed = started, False
                committed = time.monotonic()
                metrics.NB_DURATION.observe(committed - started)
                metrics.NB_ROWS.inc(len(report.created) + len(report.updated) + len(report.deleted))
                if report or not self.status.passes:  # (NB now holds these rows: counted again when they change)
                    forwards, firewall = element_counts(cached.rows.values())
                    metrics.NB_FORWARD_ELEMENTS.set(forwards)
                    metrics.NB_FIREWALL_ELEMENTS.set(firewall)
                seen_seqno = before
                self._report(report, reconnected=reconnected, drift=drift, first=self.status.passes == 0)
                self._set(Status(True, "", cached.revision, self.status.passes + 1, report.summary(),
                                 tuple(cached.refused), took=committed - started, read_took=read_done - started,
                                 committed_at=committed, read=read or self.status.read))  # fmt: skip
                backoff = 0.0
            except Exception as exc:  # every failure is reported and retried: the server must keep serving
                self._fail(f"{type(exc).__name__}: {exc}"[:500])
                failed = True  # (what the failed pass took as changed may not have been compared)
                # (reconnecting is the IDL's to pace: look again soon, so the first pass runs once it is back)
                reconnecting = isinstance(exc, Reconnecting)
                backoff = RECONNECT_POLL if reconnecting else min(MAX_BACKOFF, max(0.2, backoff * 2))

    def _read(self, cache: scoped.Cache | None, full: bool) -> tuple[scoped.Cache, set[str] | None]:
        """The desired rows now, from what changed since `cache` if that is all it takes (not on a full pass), and
        the keys whose rows that changed (None: a full read)."""
        with self.store.read(snapshot=True) as conn:
            if cache is not None and not full:
                changed = cache.advance(conn, desired_rows.current_revision(conn))
                if changed is not None:
                    return cache, changed
            return scoped.Cache.of(*desired_rows.build_with_basis(conn, self.gateway_chassis)), None

    def _commit(self, rows: list[desired_rows.Row], full: bool, hint: set[str] | None) -> Report:
        assert self._api is not None
        timeout = self.timeout + ROW_BUDGET * len(rows)
        # New ports first (staging.py says why): on any pass that may add one (a full one: a retry, a repair too).
        if self._staging and (full or hint is None or any(key.startswith(LSP_KEY) for key in hint)):
            if full:  # (what a failed pass or someone else wrote: taken in by northd before the new ports)
                self._fence(StageNewPorts(self._api, rows, self._mirror, insert=False), timeout)
            staged = self._fence(StageNewPorts(self._api, rows, self._mirror, insert=True), timeout)
            if staged:
                log.debug("northbound: %d new port(s) staged, disabled", staged)
        with self._api.transaction(check_error=True, timeout=timeout) as txn:
            command = txn.add(ApplyRows(self._api, rows, self._mirror, full, hint))
        report = command.result if isinstance(command.result, Report) else Report()
        if self._staging and report:  # (northd takes these in before the next pass's new ports)
            self._fence(Fence(self._api), timeout)
        return report

    def _fence(self, command: StageNewPorts | Fence, timeout: float) -> int:
        """Run a staging step or a fence; wait until northd has taken it in (when it wrote anything). Its result."""
        assert self._api is not None
        with self._api.transaction(check_error=True, timeout=timeout) as txn:
            txn.add(command)
        if command.target is not None and not wait_northd(self._api, self._api.idl.global_changed, command.target):
            log.warning("northbound: ovn-northd did not take in NB changes within %g s", FENCE_WAIT)
        return int(command.result or 0)

    def _report(self, report: Report, *, reconnected: bool, drift: bool, first: bool) -> None:
        if first:
            log.info("northbound resync: %s", report.summary())
        elif report and reconnected and not drift:  # (a new NB leader, or the lock: changes since then count too)
            log.warning("northbound resync after reconnecting (what changed meanwhile, here or in NB): %s",
                        report.summary())  # fmt: skip
        elif report and (reconnected or drift):
            log.warning("northbound rows changed outside cloudnet, repaired: %s", report.summary())
        elif report:
            log.debug("northbound: %s", report.summary())


def _revision() -> Any:
    return select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1)

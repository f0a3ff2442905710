"""The revision log as the invalidation feed of per-process caches.

A cache of rows that rarely change (a network, its subnets, a project's default security group, pool hints)
is only correct if it hears of every change, whichever server process made it. Every change is an event of
the revision log, so the log is that feed:

- each write transaction of this process hands its own events to the watchers once it has committed;
- a transaction about to use a cache first calls `sync(tx)`: one read of the revision counter. If it moved
  beyond what this process has seen, for other reasons than its own commits, the events in between are read
  from the log (one range query) and handed to the watchers as foreign ones. In a single-process deployment
  the counter only moves through its own commits, so a sync is that one cheap read.

Inside a write transaction on SQLite (which holds the database's write lock) a cache synced this way is exactly
the database; on PostgreSQL it is what a read at the sync would have returned, as with any READ COMMITTED read.

Watchers are called as `watcher(events, tx)`: `events` None means "forget everything" (too many changes to
go through, or the log was reset); `tx` is the committing transaction for own events, None for foreign ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy import bindparam, select

from cloudnet.store import tables as t
from cloudnet.store.events import Event, Transaction
from cloudnet.store.prepared import Prepared

# The store's transaction type (store/db.py's Tx): what the watchers are handed with the events it committed.
TxT = TypeVar("TxT", bound=Transaction)
TxT_contra = TypeVar("TxT_contra", bound=Transaction, contravariant=True)


class _Follower(Protocol[TxT_contra]):
    def changed(self, events: Sequence[Event] | None, tx: TxT_contra | None) -> None: ...


F = TypeVar("F", bound=_Follower[Any])
# Beyond this many foreign events, forgetting everything is cheaper than reading them.
MAX_FOREIGN = 1000

_REVISION = Prepared(select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1))
E = t.events
_EVENTS = Prepared(
    select(E.c.revision, E.c.resource, E.c.resource_id, E.c.operation, E.c.project_id)
    .where(E.c.revision > bindparam("after"), E.c.revision <= bindparam("upto"))
    .order_by(E.c.revision)
)


class Changes(Generic[TxT]):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watchers: list[Callable[[Sequence[Event] | None, TxT | None], None]] = []
        self._followers: dict[Callable[[], Any], Any] = {}
        # Every change up to this revision has reached the watchers (None: nothing cached yet, nothing to tell).
        self.seen: int | None = None
        # Revision ranges this process committed above `seen` (its transactions end out of order).
        self._own: list[tuple[int, int]] = []
        # Own transactions between publishing their events and their bookkeeping after the commit: first
        # revision -> their events. A sync that meets these revisions in the log (committed, but not yet told)
        # recognises them by content and leaves them to `committed`, instead of taking them for another
        # process's changes (which would drop caches for nothing). If the transaction rolls back, another
        # writer may commit the same revisions: with other events, so they are not mistaken for ours.
        self._pending: dict[int, tuple[Event, ...]] = {}

    def watch(self, watcher: Callable[[Sequence[Event] | None, TxT | None], None]) -> None:
        with self._lock:
            self._watchers.append(watcher)

    def follower(self, factory: Callable[[], F]) -> F:
        """The store's one `factory()` object (a cache, the pool manager), made on first use and told of
        every change from then on."""
        with self._lock:
            found = self._followers.get(factory)
            if found is None:
                found = self._followers[factory] = factory()
                self._watchers.append(found.changed)
            return found  # type: ignore[no-any-return]

    def _tell(self, events: Sequence[Event] | None, tx: TxT | None) -> None:
        for watcher in list(self._watchers):
            watcher(events, tx)

    def sync(self, tx: TxT, upto: int | None = None) -> None:
        """Bring the caches up to the committed revision, or to `upto` (a committed revision the transaction saw
        in an earlier statement), once per transaction."""
        if tx.synced:
            return
        tx.synced = True
        before = self.seen  # the counter never goes back: below this, the log was reset
        current = upto if upto is not None else int(_REVISION.scalar(tx.conn) or 0)
        # After reading the counter: every own transaction at or below it is then told, or pending.
        with self._lock:
            seen, own, pending = self.seen, list(self._own), dict(self._pending)
        if before is not None and current < before:  # a restored or emptied database
            self._tell(None, None)
            self._advance(current, reset=True)
            return
        if seen is None or current <= seen:
            self._advance(current)
            return
        gaps = _gaps(seen, current, own)
        if sum(hi - lo for lo, hi in gaps) > MAX_FOREIGN:
            self._tell(None, None)
        else:
            rows = [r for lo, hi in gaps for r in _EVENTS.rows(tx.conn, {"after": lo, "upto": hi})]
            events = [Event(*r[1:]) for r in rows if not _ours(pending, r[0], Event(*r[1:]))]
            if events:
                self._tell(events, None)
        self._advance(current)

    def publishing(self, tx: TxT, first: int) -> None:
        """The transaction's events got revisions first..; it is about to commit."""
        with self._lock:
            self._pending[first] = tuple(tx.events)

    def abandoned(self, first: int) -> None:
        """A transaction that called `publishing` rolled back."""
        with self._lock:
            self._pending.pop(first, None)

    def _advance(self, current: int, *, reset: bool = False) -> None:
        with self._lock:
            if reset:
                self.seen, self._own = current, []
            elif self.seen is None or current > self.seen:
                self.seen = current
            self._own = [(lo, hi) for lo, hi in self._own if hi > self.seen]

    def committed(self, tx: TxT, first: int, last: int) -> None:
        """Own events of a transaction that committed revisions first..last: tell the watchers, advance."""
        self._tell(tx.events, tx)
        with self._lock:
            self._pending.pop(first, None)
            if self.seen is None or last <= self.seen:
                return
            if first == self.seen + 1:
                self.seen = last
                # Own transactions that committed later revisions but reported earlier are now contiguous.
                merged = True
                while merged:
                    merged = False
                    for lo, hi in self._own:
                        if lo == self.seen + 1:
                            self.seen, merged = hi, True
                self._own = [(lo, hi) for lo, hi in self._own if hi > self.seen]
            else:
                self._own.append((first, last))


def _ours(pending: dict[int, tuple[Event, ...]], revision: int, event: Event) -> bool:
    for first, events in pending.items():
        if first <= revision < first + len(events):
            return events[revision - first] == event
    return False


def _gaps(seen: int, current: int, own: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (after, upto] ranges of (seen, current] not committed by this process."""
    out: list[tuple[int, int]] = []
    pos = seen
    for lo, hi in sorted(own):
        if hi <= pos:
            continue
        if lo > pos + 1:
            out.append((pos, min(lo - 1, current)))
        pos = max(pos, hi)
        if pos >= current:
            break
    if pos < current:
        out.append((pos, current))
    return [(a, b) for a, b in out if b > a]

"""Port pools (Kuryr-Kubernetes style, ../shared/reference/networking.md §2): ready ports per (host,
project, network), bucketed by their security groups, handed out in one transaction and recycled.

Everything durable is in the database: a pool port is an ordinary port with device_owner
`compute:cloudnet-pool` while ready, the tag `cloudnet.pool=<pool id>` and a `pool_ports` row (its
`idle_since`). A claim flips device_owner with `UPDATE ... WHERE id = <port> AND device_owner = <ready>`
and checks that it changed a row (on PostgreSQL it also skips a row another transaction holds, `FOR UPDATE
SKIP LOCKED`), so no port is handed out twice, whatever the number of threads or server processes.

What lives in memory (the `Manager`) is scheduling and hints: which pools have a background refill pending,
when each was last maintained, and for each pool the ready ports this process knows of, by bucket and idle
time, so that a claim picks its port without a query (Kuryr's in-memory pool; the database still decides,
above). Hints follow the revision log (store/changes.py): a port event this process's pool code did not make
itself (another server's claim, a port update through the API) drops the hints it may affect, and the next
claim reloads them in one query. Pool rows (id, bucket, sizing) are cached the same way. A claim that does
not wait reads the revision counter in its own statement instead of before it (one round trip fewer) and
rolls back if the counter shows changes that drop what it read from memory (`_deferred`).
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, overload

from pydantic import Field
from sqlalchemy import Connection, String, bindparam, delete, func, insert, literal, select, true, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import Executable

from cloudnet.errors import CloudnetError, Forbidden, InvalidInput, ServiceUnavailable, not_found
from cloudnet.services import (
    cache,
    common,
    metadata_ports,
    networks,
    port_policy,
    port_security,
    port_specs,
    port_views,
    ports,
    quotas,
    security_groups,
)
from cloudnet.services.context import Context
from cloudnet.services.security_groups import GroupIds
from cloudnet.services.validation import Body, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.store.events import Event
from cloudnet.store.prepared import BulkInsert, Prepared

log = logging.getLogger(__name__)

PP = t.port_pools
M = t.pool_ports  # membership
P = t.ports
PSG = t.port_security_groups
A = t.ip_allocations
FREE_OWNER = networks.POOL_FREE_OWNER  # "compute:cloudnet-pool"
TAG_PREFIX = "cloudnet.pool="
SIZING = ("min", "max", "batch", "ttl", "update_interval")
RETRY_AFTER = 1  # seconds, in the 503 of a pool that cannot be filled
SYNC_ROUNDS = 5  # fill-then-claim attempts of a claim that found its pool empty


@dataclass(frozen=True)
class Defaults:
    """Server-wide sizing of every pool (ServerConfig.pool_*), each overridable per pool."""

    min: int = 5
    max: int = 0
    batch: int = 10
    ttl: int = 0
    update_interval: int = 20


@dataclass(frozen=True)
class Sizing:
    min: int
    max: int
    batch: int
    ttl: int
    update_interval: int

    @classmethod
    def of(cls, row: Any, defaults: Defaults) -> Sizing:
        m = row._mapping
        return cls(**{k: m[k] if m[k] is not None else getattr(defaults, k) for k in SIZING})


def refill_count(s: Sizing, ready: int, *, need_one: bool = False) -> int:
    """How many ports one refill creates: `max(batch, min - ready)` when below min, within `max`."""
    if ready >= s.min and not (need_one and ready == 0):
        return 0
    n = max(s.batch, s.min - ready, 1 if need_one else 0)
    if s.max > 0:
        n = min(n, s.max - ready)
    return max(n, 0)


# -- in-memory scheduling and hints ----------------------------------------------------------------

Bucket = tuple[str, ...]  # sorted security group ids
# tx.notes key: the ports whose events the pool code itself accounted for in the hints.
HANDLED = "pools.handled"


@dataclass(frozen=True)
class PoolInfo:
    """What a claim needs of a pool row."""

    id: str
    host: str
    project_id: str
    network_id: str
    security_groups: Bucket
    sizing: Sizing


class Ready:
    """The ready ports of one pool as this process knows them: per bucket, (idle_since, port id) in idle order."""

    def __init__(self) -> None:
        self.buckets: dict[Bucket, list[tuple[datetime, str]]] = {}
        self.size = 0

    def add(self, port_id: str, bucket: Bucket, idle: datetime) -> None:
        bisect.insort(self.buckets.setdefault(bucket, []), (idle, port_id))
        self.size += 1

    def pop(self, bucket: Bucket) -> tuple[str, Bucket, datetime] | None:
        """Kuryr's choice: the most recently idle port of the bucket (warm on its host), else the least recently
        idle port of any bucket (its groups are rewritten)."""
        same = self.buckets.get(bucket)
        if same:
            idle, port_id = same.pop()
        else:
            oldest = min(((lst[0], b) for b, lst in self.buckets.items() if lst), default=None)
            if oldest is None:
                return None
            (idle, port_id), bucket = oldest
            self.buckets[bucket].pop(0)
        self.size -= 1
        return port_id, bucket, idle

    def ports(self) -> Iterator[str]:
        for lst in self.buckets.values():
            for _idle, port_id in lst:
                yield port_id


@dataclass
class Manager:
    """Per-store state: defaults, background refills, per-pool locks and maintenance times, and hints."""

    defaults: Defaults = field(default_factory=Defaults)
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(4, "cloudnet-pools"))
    pending: set[str] = field(default_factory=set)
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    maintained: dict[str, float] = field(default_factory=dict)
    failed: dict[str, float] = field(default_factory=dict)
    guard: threading.Lock = field(default_factory=threading.Lock)
    # Hints (see the module doc), under hint_lock; `generation` guards fills against concurrent invalidations.
    hint_lock: threading.Lock = field(default_factory=threading.Lock)
    generation: int = 0
    pools: dict[tuple[str, str, str], PoolInfo] = field(default_factory=dict)
    ready: dict[str, Ready] = field(default_factory=dict)  # pool id -> its ready ports
    where: dict[str, str] = field(default_factory=dict)  # port id -> pool id, for the ports in `ready`
    taking: set[str] = field(default_factory=set)  # ports popped by claims whose transaction is still open
    # ServerConfig.instance_pools: instance creates make the pool of (host, project, network) on first demand.
    instance_pools: bool = False

    def lock(self, pool_id: str) -> threading.Lock:
        with self.guard:
            return self.locks.setdefault(pool_id, threading.Lock())

    # -- hints --

    def forget(self, pool_id: str | None = None) -> None:
        """Drop the hints of one pool, or all hints and pool rows."""
        with self.hint_lock:
            self.generation += 1
            if pool_id is None:
                self.pools.clear()
                self.ready.clear()
                self.where.clear()
                return
            ready = self.ready.pop(pool_id, None)
            if ready is not None:
                for port_id in ready.ports():
                    self.where.pop(port_id, None)

    def changed(self, events: Sequence[Event] | None, tx: Tx | None) -> None:
        """Watcher of the revision log (store/changes.py)."""
        if events is None:
            self.forget()
            return
        handled = tx.notes.get(HANDLED, ()) if tx is not None else ()
        for e in events:
            if e.resource in ("network", "security_group"):  # pools deleted, buckets rewritten
                self.forget()
                return
            if e.resource != "port" or e.resource_id in handled:
                continue
            if tx is None:  # another process changed a port: maybe claimed, released or refilled one of ours
                self.forget()
                return
            pool_id = self.where.get(e.resource_id)
            if pool_id is not None:  # one of our ready ports was changed outside the pool code
                self.forget(pool_id)

    def taken(self, port_id: str, back: tuple[str, Bucket, datetime] | None = None) -> None:
        """The claim that popped the port ended; `back`: it rolled back, the port is ready again."""
        with self.hint_lock:
            self.taking.discard(port_id)
        if back is not None:
            self.add_ready(back[0], [(port_id, back[1], back[2])])

    def add_ready(self, pool_id: str, items: list[tuple[str, Bucket, datetime]]) -> None:
        """Ports that became ready in a committed transaction of this process (refill, release)."""
        with self.hint_lock:
            ready = self.ready.get(pool_id)
            if ready is None:
                return  # not loaded: the next claim reads them all from the database
            for port_id, bucket, idle in items:
                if port_id not in self.where:
                    ready.add(port_id, bucket, idle)
                    self.where[port_id] = pool_id


def manager(store: Store) -> Manager:
    return store.changes.follower(Manager)


def configure(store: Store, defaults: Defaults, *, instance_pools: bool = False) -> None:
    mgr = manager(store)
    mgr.defaults = defaults
    mgr.instance_pools = instance_pools
    mgr.forget()  # cached sizing used the old defaults


def for_instances(store: Store | None) -> bool:
    """Whether instance creates make pools on first demand (else they only use pools that exist)."""
    return store is not None and manager(store).instance_pools


def kick(store: Store, pool_id: str) -> None:
    """Refill the pool in the background if it is below min (at most one pending refill per pool)."""
    mgr = manager(store)
    with mgr.guard:
        if pool_id in mgr.pending:
            return
        # A pool that just failed to fill (e.g. an exhausted subnet) waits one second before the next try.
        if time.monotonic() - mgr.failed.get(pool_id, -1e9) < 1.0:
            return
        mgr.pending.add(pool_id)

    def run() -> None:
        try:
            refill(store, pool_id)
        except Exception as exc:
            log.warning("background refill of port pool %s failed: %s", pool_id, exc)
        finally:
            with mgr.guard:
                mgr.pending.discard(pool_id)

    try:
        mgr.executor.submit(run)
    except RuntimeError:  # executor shut down (interpreter exiting)
        with mgr.guard:
            mgr.pending.discard(pool_id)


# -- helpers ----------------------------------------------------------------------------------------


def _now() -> datetime:
    """idle_since needs sub-second order (recycled ports are handed out most recent first)."""
    return datetime.now(UTC).replace(tzinfo=None)


def _naive(value: datetime) -> datetime:
    """idle_since as stored by either database, comparable with `_now()`."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value


def _count_ready(conn: Connection, pool_id: str) -> int:
    return int(conn.execute(select(func.count()).select_from(M.join(P, P.c.id == M.c.port_id)).where(
        M.c.pool_id == pool_id, P.c.device_owner == FREE_OWNER)).scalar_one())  # fmt: skip


def _pool_key(host: str, project_id: str, network_id: str) -> Any:
    return (PP.c.host == host, PP.c.project_id == project_id, PP.c.network_id == network_id)


def _info(row: Any, defaults: Defaults) -> PoolInfo:
    return PoolInfo(row.id, row.host, row.project_id, row.network_id, tuple(row.security_groups or ()),
                    Sizing.of(row, defaults))  # fmt: skip


def _find_pool(tx: Tx, mgr: Manager, host: str, project_id: str, network_id: str) -> PoolInfo | None:
    """The pool of (host, project, network) if it exists, from the cache when it can."""
    key = (host, project_id, network_id)
    tx.sync()
    info = mgr.pools.get(key)
    if info is None:
        generation = mgr.generation
        row = tx.conn.execute(select(PP).where(*_pool_key(host, project_id, network_id))).first()
        if row is None:
            return None
        info = _info(row, mgr.defaults)
        with mgr.hint_lock:
            if mgr.generation == generation:
                mgr.pools[key] = info
    return info


def _ensure_pool(tx: Tx, host: str, project_id: str, network_id: str, sgs: tuple[str, ...]) -> Any:
    """The pool of (host, project, network), created on first demand (concurrent creators agree)."""
    key = _pool_key(host, project_id, network_id)
    row = tx.conn.execute(select(PP).where(*key)).first()
    if row is not None:
        return row
    module = postgresql if tx.conn.dialect.name == "postgresql" else sqlite
    values = {"id": common.new_id(), "host": host, "project_id": project_id, "network_id": network_id,
              "security_groups": list(sgs), "created_at": tx.now, "updated_at": tx.now,
              "revision_number": 0}  # fmt: skip
    tx.conn.execute(module.insert(PP).values(**values).on_conflict_do_nothing())
    return tx.conn.execute(select(PP).where(*key)).one()


def _resolve_sgs(tx: Tx, ctx: Context, project_id: str, network: Any, requested: list[str] | None) -> Bucket:
    if not network.port_security_enabled:  # its ports take the network's: no port security, no groups
        port_security.check_new_port(False, requested, [])
        return ()
    if requested is None:
        return (security_groups.ensure_default(tx, project_id),)
    return tuple(sorted(security_groups.check_usable(tx.conn, ctx, requested, project_id)))


def _related(dialect: str) -> list[Any]:
    """What else the claimed port's API shape needs, as three JSON arrays beside its row: fixed IPs as
    [subnet, address] pairs, security groups, tags."""
    pg = dialect == "postgresql"
    agg, pair = (func.json_agg, func.json_build_array) if pg else (func.json_group_array, func.json_array)
    queries = [
        select(agg(pair(A.c.subnet_id, A.c.ip_address))).where(A.c.port_id == P.c.id),
        select(agg(PSG.c.security_group_id)).where(PSG.c.port_id == P.c.id),
        select(agg(t.tags.c.tag)).where(t.tags.c.resource_id == P.c.id),
    ]
    return [q.scalar_subquery().label(f"related_{i}") for i, q in enumerate(queries)]


def _revision() -> Any:
    """The revision counter as the claim's statement sees it: a claim that deferred its sync checks it
    (_deferred)."""
    return select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1).scalar_subquery()


def _claim_stmt(dialect: str) -> Executable:
    # The guard that makes a double hand-out impossible: only a port still ready is taken.
    cond = [P.c.id == bindparam("port_id"), P.c.device_owner == FREE_OWNER]
    values = {k: bindparam(k, type_=P.c[k].type) for k in ("name", "device_id", "device_owner", "updated_at")}
    stmt = update(P).values(**values, revision_number=P.c.revision_number + 1)
    if dialect != "postgresql":  # SQLite: a RETURNING costs more than the SELECT after it (_PORT_ROW)
        return stmt.where(*cond)
    # Skip a port another transaction is taking right now instead of waiting for it.
    locked = select(P.c.id).where(P.c.id == bindparam("port_id")).with_for_update(skip_locked=True)
    return stmt.where(*cond, P.c.id == locked.scalar_subquery()).returning(*P.c, *_related(dialect), _revision())


def _claim_publishing_stmt(dialect: str) -> Executable:
    """PostgreSQL, a claim alone in its transaction: the claim's UPDATE also bumps the revision counter and
    writes the claim's event row (only when it took the port), one round trip instead of two."""
    claimed = _claim_stmt(dialect).cte("claimed")
    C, E = t.revision_counter, t.events
    bumped = (
        update(C).where(C.c.id == 1, select(claimed.c.id).exists())
        .values(value=C.c.value + 1).returning(C.c.value).cte("bumped")
    )  # fmt: skip
    columns = ("revision", "resource", "resource_id", "operation", "project_id", "created_at")
    written = select(
        bumped.c.value,
        literal("port"),
        claimed.c.id,
        literal("update"),
        bindparam("project_id", type_=E.c.project_id.type),
        bindparam("created_at", type_=E.c.created_at.type),
    ).select_from(bumped.join(claimed, true()))
    event = insert(E).from_select(list(columns), written).returning(E.c.revision).cte("event")
    # (`event` runs whether or not the final SELECT reads it: PostgreSQL runs every data-modifying CTE once.)
    return select(claimed, bumped.c.value.label("published")).select_from(claimed.join(bumped, true())).add_cte(event)


_CLAIM = Prepared(_claim_stmt)
_CLAIM_PUBLISHING = Prepared(_claim_publishing_stmt)
_PORT_ROW = Prepared(
    lambda dialect: select(*P.c, *_related(dialect), _revision()).where(P.c.id == bindparam("port_id"))
)
_PORT_COLUMNS = tuple(c.name for c in P.c)
_pid = bindparam("port_id", type_=String)
_UNPARKED = Prepared(update(P).where(P.c.id == _pid).values(status="DOWN", vif_details={}))
_DELETE_PSG = Prepared(delete(PSG).where(PSG.c.port_id == _pid))
_INSERT_PSG = BulkInsert(PSG, ["port_id", "security_group_id"])
_SET_POOL_GROUPS = Prepared(
    update(PP)
    .where(PP.c.id == bindparam("pool_id"))
    .values(security_groups=bindparam("groups", type_=PP.c.security_groups.type))
)
_READY_PORTS = (
    select(M.c.port_id, M.c.idle_since, PSG.c.security_group_id)
    .select_from(M.join(P, P.c.id == M.c.port_id).outerjoin(PSG, PSG.c.port_id == M.c.port_id))
    .where(M.c.pool_id == bindparam("pool_id"), P.c.device_owner == FREE_OWNER)
)
# Hinted ports tried before the hints are reloaded (each failure means another process took the port).
MAX_STALE = 8


def _load_ready(tx: Tx, mgr: Manager, pool_id: str) -> Ready:
    """Every ready port of the pool, read from the database into the hints (but the ports that claims of this
    process are taking right now: committed or not, they are not for another claim)."""
    generation = mgr.generation
    groups: dict[str, list[str]] = {}
    idle: dict[str, datetime] = {}
    for port_id, since, sg in tx.conn.execute(_READY_PORTS, {"pool_id": pool_id}):
        idle[port_id] = _naive(since) if since is not None else datetime.min
        if sg is not None:
            groups.setdefault(port_id, []).append(sg)
    ready = Ready()
    with mgr.hint_lock:
        for port_id, since in idle.items():
            if port_id not in mgr.taking:
                ready.add(port_id, tuple(sorted(groups.get(port_id, []))), since)
        if mgr.generation == generation:
            old = mgr.ready.pop(pool_id, None)
            for port_id in old.ports() if old is not None else ():
                mgr.where.pop(port_id, None)
            mgr.ready[pool_id] = ready
            for port_id in ready.ports():
                mgr.where[port_id] = pool_id
    return ready


def _pop(mgr: Manager, pool_id: str, sgs: Bucket) -> tuple[str, Bucket, datetime] | None:
    with mgr.hint_lock:
        ready = mgr.ready.get(pool_id)
        got = ready.pop(sgs) if ready is not None else None
        if got is not None:
            mgr.where.pop(got[0], None)
            mgr.taking.add(got[0])
        return got


def _claim_port(tx: Tx, port_id: str, values: dict[str, Any], project_id: str, alone: bool) -> tuple[Any, ...] | None:
    """Take the port if it is still ready, and record the claim's event; its row as updated, or None. `alone`:
    the claim is all the transaction writes, so on PostgreSQL its statement publishes the event itself
    (`Tx.record_published`: one round trip fewer)."""
    params = {**values, "port_id": port_id}
    event = Event("port", port_id, "update", project_id)
    if tx.conn.dialect.name != "postgresql":
        row = _PORT_ROW.first(tx.conn, params) if _CLAIM.rowcount(tx.conn, params) == 1 else None
    elif not alone or tx.events:
        row = _CLAIM.first(tx.conn, params)
    else:
        published = _CLAIM_PUBLISHING.first(tx.conn, {**params, "project_id": project_id, "created_at": tx.now})
        if published is not None:
            tx.record_published(event, int(published[-1]))
        return None if published is None else published[:-1]
    if row is not None:
        tx.record(event.resource, port_id, event.operation, project_id)
    return row


def _take(
    tx: Tx, mgr: Manager, pool_id: str, sgs: Bucket, values: dict[str, Any], project_id: str, alone: bool
) -> tuple[Any, ...] | None:
    """Take a ready port, writing `values` to it; its row (as updated), or None when the pool has none. The
    claim's event is recorded in `project_id` (see `_claim_port` for `alone`)."""
    for fresh in (False, True):
        if fresh or pool_id not in mgr.ready:
            _load_ready(tx, mgr, pool_id)
            fresh = True
        for _attempt in range(MAX_STALE):
            got = _pop(mgr, pool_id, sgs)
            if got is None:
                break
            port_id, bucket, idle = got
            try:
                row = _claim_port(tx, port_id, values, project_id, alone)
            except BaseException:
                mgr.taken(port_id, back=(pool_id, bucket, idle))
                raise
            if row is None:  # another server's claim has it
                mgr.taken(port_id)
                continue
            # Taken ahead of the commit (reloads of the hints leave it out); back in them if the claim fails.
            tx.after_commit(lambda p=port_id: mgr.taken(p))
            tx.after_rollback(lambda p=port_id, b=bucket, i=idle: mgr.taken(p, back=(pool_id, b, i)))
            return row
        if fresh:
            break
    if tx.conn.dialect.name != "postgresql":
        return None  # SQLite: the reload above was exact (one writer at a time)
    # PostgreSQL: other servers' claims may hold every hinted port; ask the database for one nobody holds.
    pick = (
        select(P.c.id).select_from(M.join(P, P.c.id == M.c.port_id))
        .where(M.c.pool_id == pool_id, P.c.device_owner == FREE_OWNER)
        .limit(1).with_for_update(of=P, skip_locked=True)
    )  # fmt: skip
    for _attempt in range(MAX_STALE):
        port_id = tx.conn.execute(pick).scalar()
        if port_id is None:
            return None
        row = _claim_port(tx, str(port_id), values, project_id, alone)
        if row is not None:
            return row
    return None


# -- claim and release ------------------------------------------------------------------------------

# tx.notes key: a claim that does not wait uses the caches before it syncs them (_defer_sync, _deferred).
DEFERRED = "pools.deferred_sync"


class _Stale(Exception):
    """A claim that deferred its sync found that what it read from the caches has changed: it rolls back."""


def _defer_sync(tx: Tx) -> None:
    """Skip the sync's read of the revision counter before the claim (PostgreSQL: one round trip of five); the
    claim's statement reads the counter instead, where it takes the port, and `_deferred` checks it."""
    if not tx.synced and tx.store is not None:
        tx.synced = True
        tx.notes[DEFERRED] = manager(tx.store).generation  # of the hints the claim will pick from


def _deferred(tx: Tx, revision: int, generation: int) -> None:
    """After a claim with a deferred sync: sync now if the counter the claim saw is beyond what this process
    has seen. What a claim reads from the caches (network, default group, pool, hints) changes only with
    events that make the pool manager drop its hints (a network, a security group, another process's port:
    Manager.changed), so the claim stands if the hints it picked from are still current; else it rolls back
    (also when another thread's sync told of such an event meanwhile)."""
    assert tx.store is not None
    seen = tx.store.changes.seen
    if seen is None or revision > seen:
        tx.synced = False
        # Up to what the claim saw, not the counter as this transaction reads it now: a claim that published
        # its own event has bumped it, and its revision is not committed (nor ours to skip) before the commit.
        tx.sync(upto=revision)
    if manager(tx.store).generation != generation:
        raise _Stale()


class ClaimSpec(Body):
    host: str = Field(..., min_length=1, max_length=255)
    project_id: str | None = Field(None, max_length=255)
    network_id: str = Field(..., min_length=1, max_length=36)
    security_groups: GroupIds | None = None
    name: str = Field("", max_length=255)
    device_id: str = Field("", max_length=255)
    device_owner: str = Field("compute:cloudnet", min_length=1, max_length=255)


def claim_in_tx(
    tx: Tx,
    ctx: Context,
    host: str,
    project_id: str,
    network_id: str,
    security_groups: list[str] | None,
    name: str,
    device_id: str,
    device_owner: str,
    *,
    fill: bool = True,
    create: bool = True,
    take_parked: bool = False,
) -> dict[str, Any] | None:
    """Take a ready port of the pool for `tx`'s caller (the pool is created on first demand unless not
    `create`); an empty pool is filled within `tx` (a savepoint) when `fill`. The port in its API shape, or
    None when no port can be had; the caller then creates its port the ordinary way (instance create) or
    answers 503 (the claim API). `take_parked`: the caller takes over the namespace the port's device is
    parked in, if it has one (binding:vif_details.prepared_netns), so the port stays as the agent reported it;
    otherwise the port is DOWN until its device is plugged where the caller wants it."""
    return _claim(tx, ctx, host, project_id, network_id, security_groups, name, device_id, device_owner,
                  fill=fill, create=create, take_parked=take_parked)  # fmt: skip


def _claim(
    tx: Tx, ctx: Context, host: str, project_id: str, network_id: str, requested: list[str] | None, name: str,
    device_id: str, device_owner: str, *, fill: bool, create: bool, take_parked: bool = False,
    alone: bool = False,
) -> dict[str, Any] | None:  # fmt: skip
    """claim_in_tx, answering the claimed port in its API shape (built from what the claim wrote and read).
    `alone`: the claim is all its transaction writes (the claim API), so it may publish its event itself."""
    assert tx.store is not None
    mgr = manager(tx.store)
    network = networks.visible_in_tx(tx, ctx, network_id)
    if network.project_id != project_id and not (network.shared or ctx.is_admin):
        raise not_found("network", network_id)  # as for a port of its own (ports.py), an external network too
    port_policy.check(tx.conn, ctx, device_owner, device_id, project_id, network)
    pool = _find_pool(tx, mgr, host, project_id, network_id)
    if pool is None and not create:
        return None
    sgs = _resolve_sgs(tx, ctx, project_id, network, requested)
    if pool is None:
        pool = _info(_ensure_pool(tx, host, project_id, network_id, sgs), mgr.defaults)
    values = {"name": name, "device_id": device_id, "device_owner": device_owner, "updated_at": tx.now}
    row = _take(tx, mgr, pool.id, sgs, values, project_id, alone)
    if row is None and fill:
        try:
            _fill_one_at_least(tx, tx.conn.execute(select(PP).where(PP.c.id == pool.id)).one(), sgs, mgr.defaults)
        except quotas.OverQuota:
            raise
        except CloudnetError as exc:
            log.info("port pool %s cannot be filled: %s", pool.id, exc.message)
            return None
        row = _take(tx, mgr, pool.id, sgs, values, project_id, alone)
    if row is None:
        return None
    n = len(_PORT_COLUMNS)
    generation = tx.notes.pop(DEFERRED, None)
    if generation is not None:
        _deferred(tx, int(row[n + 3]), generation)
    port = dict(zip(_PORT_COLUMNS, row[:n], strict=True))
    port_id = port["id"]
    if not take_parked and (port["status"] != "DOWN" or "prepared_netns" in (port["vif_details"] or {})):
        # Its device is parked where this caller will not take it (--park-pool-devices): not ACTIVE for the
        # caller until the agent has plugged it, and the parked namespace is no longer on offer.
        _UNPARKED.cursor(tx.conn, {"port_id": port_id})
        port["status"], port["vif_details"] = "DOWN", {}
    # JSON arrays: decoded by psycopg, text from SQLite; NULL (PostgreSQL) when empty.
    ips, groups, tags = (json.loads(v) if isinstance(v, str) else list(v or ()) for v in row[n : n + 3])
    fixed = [{"subnet_id": a, "ip_address": b} for a, b in ips]
    if set(groups) != set(sgs):  # a port of another bucket: its groups are rewritten
        _DELETE_PSG.cursor(tx.conn, {"port_id": port_id})
        _INSERT_PSG.run(tx.conn, [{"port_id": port_id, "security_group_id": sg} for sg in sgs])
        groups = list(sgs)
    if sgs != pool.security_groups:  # refills now make ports of the latest claim's bucket
        _SET_POOL_GROUPS.cursor(tx.conn, {"pool_id": pool.id, "groups": list(sgs)})
    tx.notes.setdefault(HANDLED, set()).add(port_id)
    assert tx.store is not None
    store, info = tx.store, pool
    tx.after_commit(lambda: _claimed(store, mgr, info, sgs))
    return port_views.port_dict(port, fixed, groups, sorted(tags))


def _claimed(store: Store, mgr: Manager, pool: PoolInfo, sgs: Bucket) -> None:
    """After a claim's commit: remember the pool's new bucket; top it up in the background below min (never
    during the claim: a refill that ran earlier would still count the claimed port as ready)."""
    with mgr.hint_lock:
        key = (pool.host, pool.project_id, pool.network_id)
        if sgs != pool.security_groups and key in mgr.pools:
            mgr.pools[key] = PoolInfo(pool.id, *key, sgs, pool.sizing)
        ready = mgr.ready.get(pool.id)
        enough = ready is not None and ready.size >= pool.sizing.min
    if not enough:
        kick(store, pool.id)


def release_in_tx(tx: Tx, port_row: Any) -> bool:
    """Give a pool port back (reset name, device_id, device_owner and security groups), or delete it when
    its pool already holds `max` ready ports. False when the port belongs to no pool (the caller deletes
    or unbinds it as usual)."""
    member = tx.conn.execute(select(M.c.pool_id).where(M.c.port_id == port_row.id)).first()
    if member is None:
        return False
    if port_row.device_owner == FREE_OWNER:
        return True  # already back
    pool = tx.conn.execute(select(PP).where(PP.c.id == member.pool_id)).first()
    if pool is None:
        return False
    assert tx.store is not None
    mgr = manager(tx.store)
    sizing = Sizing.of(pool, mgr.defaults)
    if sizing.max > 0 and _count_ready(tx.conn, pool.id) >= sizing.max:
        ports.delete_in_tx(tx, port_row)
        return True
    # Port security and address pairs as a new port of the network gets them (what the instance set is not for
    # the next one).
    secured = bool(cache.network(tx, port_row.network_id).port_security_enabled)
    tx.conn.execute(
        update(P).where(P.c.id == port_row.id).values(
            name="", device_id="", device_owner=FREE_OWNER, status="DOWN", updated_at=tx.now,
            port_security_enabled=secured,
            # The instance's namespace is not the port's to offer again: the agent parks it anew and says where.
            vif_details={}, revision_number=P.c.revision_number + 1)
    )  # fmt: skip
    tx.conn.execute(delete(t.allowed_address_pairs).where(t.allowed_address_pairs.c.port_id == port_row.id))
    current = {r[0] for r in tx.conn.execute(select(PSG.c.security_group_id).where(PSG.c.port_id == port_row.id))}
    target = set(pool.security_groups) if secured else set()
    if current != target:
        tx.conn.execute(delete(PSG).where(PSG.c.port_id == port_row.id))
        if target:
            tx.conn.execute(insert(PSG), [{"port_id": port_row.id, "security_group_id": sg} for sg in sorted(target)])
    idle = _now()
    tx.conn.execute(update(M).where(M.c.port_id == port_row.id).values(idle_since=idle))
    tx.record("port", port_row.id, "update", port_row.project_id)
    tx.notes.setdefault(HANDLED, set()).add(port_row.id)
    back = [(str(port_row.id), tuple(sorted(target)), idle)]
    tx.after_commit(lambda: mgr.add_ready(str(pool.id), back))
    return True


@overload
def claim(store: Store, ctx: Context, body: dict[str, Any], wait: Literal[True] = True) -> dict[str, Any]: ...
@overload
def claim(store: Store, ctx: Context, body: dict[str, Any], wait: bool) -> dict[str, Any] | None: ...


def claim(store: Store, ctx: Context, body: dict[str, Any], wait: bool = True) -> dict[str, Any] | None:
    """POST /v2.0/port-pools/claim: a ready port, now owned by the caller (201), or 503 + Retry-After.

    Not `wait`: only a claim of a ready port (one short transaction, no other lock taken); None when the pool
    has none, and the caller claims again with `wait`, which fills the pool first."""
    spec = parse(ClaimSpec, body)
    project = common.owner_project(ctx, spec.project_id)
    args = (ctx, spec.host, project, spec.network_id, spec.security_groups, spec.name, spec.device_id,
            spec.device_owner)  # fmt: skip
    try:
        with store.write() as tx:
            if not wait:
                _defer_sync(tx)
            _check_host(tx, spec.host)
            port = _claim(tx, *args, fill=False, create=True, alone=True)
            if port is not None or not wait:
                return port
            key = _pool_key(spec.host, project, spec.network_id)
            pool_id = tx.conn.execute(select(PP.c.id).where(*key)).scalar_one()
    except _Stale:
        return None  # only without `wait`: the caller claims again, with `wait` and synced caches
    # Empty: fill synchronously (outside the claim's transaction, so the claim holds no lock meanwhile).
    # Concurrent claimers take turns at the pool lock; one whose fill found ports already made by another
    # (and lost them to other claimers) tries again, a bounded number of times.
    reason = ""
    for _round in range(SYNC_ROUNDS):
        try:
            refill(store, pool_id, need_one=True)
        except quotas.OverQuota:
            raise  # the caller's own limit, not a pool that may fill later: 409, not "retry"
        except CloudnetError as exc:
            reason = f": {exc.message}"
            break
        with store.write() as tx:
            port = _claim(tx, *args, fill=False, create=True, alone=True)
            if port is not None:
                return port
    raise ServiceUnavailable(
        f"Port pool {pool_id} has no ready port and could not be filled{reason}", retry_after=RETRY_AFTER,
        type="PortPoolExhausted")  # fmt: skip


class ReleaseSpec(Body):
    port_id: str = Field(..., min_length=1, max_length=36)


def release(store: Store, ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """POST /v2.0/port-pools/release: {"port_id"}; answers whether the port was recycled or deleted."""
    spec = parse(ReleaseSpec, body)
    with store.write() as tx:
        row = common.get_row(tx.conn, P, "port", spec.port_id, ctx)
        if not release_in_tx(tx, row):
            raise InvalidInput(f"port {spec.port_id} does not belong to a port pool")
        kept = tx.conn.execute(select(P.c.id).where(P.c.id == spec.port_id)).first() is not None
        return {"port_id": spec.port_id, "recycled": kept, "deleted": not kept}


def _check_host(tx: Tx, host: str) -> None:
    if not cache.host_known(tx, host):
        raise InvalidInput(f"host {host} is not a registered host (no agent has reported from it)")


# -- refill and maintenance -------------------------------------------------------------------------


@contextmanager
def _pool_lock(store: Store, pool_id: str, timeout: float) -> Iterator[bool]:
    lock = manager(store).lock(pool_id)
    got = lock.acquire(timeout=timeout)
    try:
        yield got
    finally:
        if got:
            lock.release()


def _fill(
    tx: Tx, pool: Any, sgs: tuple[str, ...] | None, defaults: Defaults, *, need_one: bool = False,
    limit: int | None = None,
) -> int:  # fmt: skip
    """Create the ports one refill needs in ONE bulk create; returns how many."""
    if tx.conn.dialect.name == "postgresql":  # refills of one pool by several servers take turns
        tx.conn.execute(select(PP.c.id).where(PP.c.id == pool.id).with_for_update())
    n = refill_count(Sizing.of(pool, defaults), _count_ready(tx.conn, pool.id), need_one=need_one)
    if limit is not None:
        n = min(n, limit)
    if n <= 0:
        return 0
    groups = list(sgs if sgs is not None else pool.security_groups)
    spec = port_specs.PortCreate(
        network_id=pool.network_id, project_id=pool.project_id, device_owner=FREE_OWNER, host_id=pool.host,
        security_groups=groups or None, tags=[TAG_PREFIX + pool.id])  # fmt: skip
    ids = ports.create_in_tx(tx, Context.admin(pool.project_id), [spec] * n)
    idle = _now()
    tx.conn.execute(insert(M), [{"port_id": pid, "pool_id": pool.id, "idle_since": idle} for pid in ids])
    tx.conn.execute(update(PP).where(PP.c.id == pool.id).values(last_refill=tx.now))
    _plumb_metadata(tx, pool.network_id)
    if tx.store is not None:  # the next claim reads the pool's ready ports afresh (one query per refill)
        mgr, pool_id = manager(tx.store), str(pool.id)
        tx.after_commit(lambda: mgr.forget(pool_id))
    return len(ids)


def _plumb_metadata(tx: Tx, network_id: str) -> None:
    """The network's metadata port, made with the pool's first ports so that the first instance finds it.
    Best effort, after the pool's own ports: an address too few for it must not cost the pool its ports (the
    first instance create makes it, or fails, as without pools)."""
    if metadata_ports.find(tx.conn, network_id) is not None:
        return
    try:
        with tx.conn.begin_nested():
            metadata_ports.ensure(tx, network_id)
    except CloudnetError as exc:
        log.info("no metadata port for network %s yet: %s", network_id, exc.message)


def _fill_one_at_least(tx: Tx, pool: Any, sgs: tuple[str, ...] | None, defaults: Defaults) -> int:
    """A synchronous fill for a waiting claim: the whole batch, else (e.g. too few free addresses) one port."""
    try:
        with tx.conn.begin_nested():
            return _fill(tx, pool, sgs, defaults, need_one=True)
    except CloudnetError:
        with tx.conn.begin_nested():
            return _fill(tx, pool, sgs, defaults, need_one=True, limit=1)


def refill(store: Store, pool_id: str, *, need_one: bool = False, sgs_hint: tuple[str, ...] | None = None) -> int:
    """Bring a pool up to min (or to one ready port, `need_one`) in one transaction and one bulk create."""
    mgr = manager(store)
    if not need_one:
        # Most kicks find the pool at min: decide that in a read, without the (SQLite: global) write lock.
        with store.read() as conn:
            pool = conn.execute(select(PP).where(PP.c.id == pool_id)).first()
            if pool is None or refill_count(Sizing.of(pool, mgr.defaults), _count_ready(conn, pool_id)) == 0:
                return 0
    with _pool_lock(store, pool_id, timeout=30.0) as got:
        if not got:
            return 0
        try:
            with store.write() as tx:
                pool = tx.conn.execute(select(PP).where(PP.c.id == pool_id)).first()
                if pool is None:
                    return 0
                if need_one:
                    return _fill_one_at_least(tx, pool, sgs_hint, mgr.defaults)
                return _fill(tx, pool, sgs_hint, mgr.defaults)
        except CloudnetError:
            with mgr.guard:
                mgr.failed[pool_id] = time.monotonic()
            raise


def evict_idle(store: Store, pool_id: str) -> int:
    """TTL: delete ports idle longer than ttl, oldest first, while the pool stays at or above min."""
    mgr = manager(store)
    with store.write() as tx:
        pool = tx.conn.execute(select(PP).where(PP.c.id == pool_id)).first()
        if pool is None:
            return 0
        s = Sizing.of(pool, mgr.defaults)
        if s.ttl <= 0:
            return 0
        if tx.conn.dialect.name == "postgresql":
            tx.conn.execute(select(PP.c.id).where(PP.c.id == pool_id).with_for_update())
        spare = _count_ready(tx.conn, pool_id) - s.min
        if spare <= 0:
            return 0
        cutoff = _now() - timedelta(seconds=s.ttl)
        stmt = (
            select(P).select_from(M.join(P, P.c.id == M.c.port_id))
            .where(M.c.pool_id == pool_id, P.c.device_owner == FREE_OWNER, M.c.idle_since < cutoff)
            .order_by(M.c.idle_since, P.c.id).limit(spare)
        )  # fmt: skip
        old = tx.conn.execute(stmt).all()
        for row in old:
            ports.delete_in_tx(tx, row)
        return len(old)


def maintain(store: Store) -> None:
    """One maintenance pass: every pool whose update_interval has passed is refilled below min and has its
    idle ports evicted (TTL)."""
    mgr = manager(store)
    with store.read() as conn:
        pools = conn.execute(select(PP)).all()
    now = time.monotonic()
    for pool in pools:
        s = Sizing.of(pool, mgr.defaults)
        if now - mgr.maintained.get(pool.id, -1e9) < s.update_interval:
            continue
        mgr.maintained[pool.id] = now
        try:
            evict_idle(store, pool.id)
        except Exception as exc:
            log.warning("TTL eviction in port pool %s failed: %s", pool.id, exc)
        kick(store, pool.id)


def recover(store: Store) -> dict[str, int]:
    """After a start: rebuild pool membership from the database alone (device_owner and the pool tag).

    Tagged ports missing from `pool_ports` are added; `idle_since` is set on ready ports that lack it (a claimed
    port keeps the time it last became ready: nothing reads it until it is ready again); ready pool-tagged
    ports of no pool (their pool is gone) are deleted, so nothing leaks."""
    fixed = {"adopted": 0, "idle_fixed": 0, "leaked_deleted": 0}
    with store.write() as tx:
        T = t.tags
        tagged = tx.conn.execute(
            select(T.c.resource_id, T.c.tag).where(T.c.tag.like(TAG_PREFIX + "%"), T.c.resource_id.in_(select(P.c.id)))
        ).all()  # fmt: skip
        pools = {r[0] for r in tx.conn.execute(select(PP.c.id))}
        members = {r[0] for r in tx.conn.execute(select(M.c.port_id))}
        now = _now()
        adopt = [{"port_id": pid, "pool_id": tag[len(TAG_PREFIX):], "idle_since": None}
                 for pid, tag in tagged if pid not in members and tag[len(TAG_PREFIX):] in pools]  # fmt: skip
        if adopt:
            tx.conn.execute(insert(M), adopt)
            fixed["adopted"] = len(adopt)
        ready = select(P.c.id).where(P.c.device_owner == FREE_OWNER)
        r1 = tx.conn.execute(update(M).where(M.c.idle_since.is_(None), M.c.port_id.in_(ready)).values(idle_since=now))
        fixed["idle_fixed"] = r1.rowcount
        pool_tagged = select(T.c.resource_id).where(T.c.tag.like(TAG_PREFIX + "%"))
        orphans = tx.conn.execute(select(P).where(
            P.c.device_owner == FREE_OWNER, P.c.id.in_(pool_tagged), P.c.id.not_in(select(M.c.port_id))))  # fmt: skip
        for row in orphans.all():
            ports.delete_in_tx(tx, row)
            fixed["leaked_deleted"] += 1
    mgr = manager(store)
    with mgr.guard:
        mgr.pending.clear()
        mgr.maintained.clear()
        mgr.failed.clear()
    mgr.forget()
    return fixed


# -- host, network and security group deletion ------------------------------------------------------


def drop_host(tx: Tx, host: str) -> int:
    """A host is gone: delete its pools and their ready ports (Kuryr's removed-node cleanup), so that no
    address stays reserved for it; returns how many ports were deleted. Its in-use pool ports stay with their
    instances and, no longer in a pool, are deleted as ordinary ports when released."""
    pool_ids = select(PP.c.id).where(PP.c.host == host)
    ready = select(P).select_from(M.join(P, P.c.id == M.c.port_id))
    rows = tx.conn.execute(ready.where(M.c.pool_id.in_(pool_ids), P.c.device_owner == FREE_OWNER)).all()
    for row in rows:
        ports.delete_in_tx(tx, row)
    tx.conn.execute(delete(PP).where(PP.c.host == host))  # memberships go with them (ON DELETE CASCADE)
    if tx.store is not None:  # the cached pool rows of the host (its ports' events drop only their hints)
        mgr = manager(tx.store)
        tx.after_commit(mgr.forget)
    return len(rows)


# -- the API view -----------------------------------------------------------------------------------


class PoolUpdate(Body):
    min: int | None = Field(None, ge=0, le=10000)
    max: int | None = Field(None, ge=0, le=10000)
    batch: int | None = Field(None, ge=1, le=10000)
    ttl: int | None = Field(None, ge=0)
    update_interval: int | None = Field(None, ge=1, le=86400)


def _dicts(conn: Connection, rows: list[Any], defaults: Defaults) -> list[dict[str, Any]]:
    ids = [r.id for r in rows]
    counts: dict[str, dict[str, int]] = {i: {"ready": 0, "in_use": 0} for i in ids}
    buckets: dict[str, dict[str, list[str]]] = {i: {} for i in ids}
    for chunk in common.chunks(ids, 5000):
        stmt = (
            select(M.c.pool_id, P.c.id, P.c.device_owner)
            .select_from(M.join(P, P.c.id == M.c.port_id))
            .where(M.c.pool_id.in_(chunk))
        )
        members = conn.execute(stmt).all()
        ready_ids = [pid for _pool, pid, owner in members if owner == FREE_OWNER]
        sgs: dict[str, list[str]] = {}
        for c in common.chunks(ready_ids, 5000):
            for pid, sg in conn.execute(select(PSG.c.port_id, PSG.c.security_group_id).where(PSG.c.port_id.in_(c))):
                sgs.setdefault(pid, []).append(sg)
        for pool_id, pid, owner in members:
            key = "ready" if owner == FREE_OWNER else "in_use"
            counts[pool_id][key] += 1
            if owner == FREE_OWNER:
                buckets[pool_id].setdefault(",".join(sorted(sgs.get(pid, []))), []).append(pid)
    out = []
    for r in rows:
        s = Sizing.of(r, defaults)
        out.append({
            "id": r.id, "host": r.host, "project_id": r.project_id, "tenant_id": r.project_id,
            "network_id": r.network_id, "security_groups": list(r.security_groups),
            "min": s.min, "max": s.max, "batch": s.batch, "ttl": s.ttl, "update_interval": s.update_interval,
            "ready": counts[r.id]["ready"], "in_use": counts[r.id]["in_use"],
            "buckets": [{"security_groups": k.split(",") if k else [], "ready": len(v)}
                        for k, v in sorted(buckets[r.id].items())],
            "last_refill": common.fmt_time(r.last_refill) if r.last_refill else None,
            "created_at": common.fmt_time(r.created_at), "updated_at": common.fmt_time(r.updated_at),
            "revision_number": r.revision_number,
        })  # fmt: skip
    return out


def _visible(ctx: Context) -> Any:
    return common.only_visible(select(PP).order_by(PP.c.host, PP.c.project_id, PP.c.network_id), PP, ctx)


def list_pools(store: Store, ctx: Context, filters: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    stmt = _visible(ctx)
    for key, values in (filters or {}).items():
        if key in ("host", "project_id", "network_id", "id"):
            stmt = stmt.where(PP.c[key].in_(values))
    with store.read() as conn:
        return _dicts(conn, list(conn.execute(stmt).all()), manager(store).defaults)


def get_pool(store: Store, ctx: Context, pool_id: str) -> dict[str, Any]:
    with store.read() as conn:
        row = common.get_row(conn, PP, "port_pool", pool_id, ctx)
        return _dicts(conn, [row], manager(store).defaults)[0]


def update_pool(store: Store, ctx: Context, pool_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """PUT: sizing overrides; null puts a value back to the server default."""
    spec = parse(PoolUpdate, body)
    changes = {k: getattr(spec, k) for k in spec.model_fields_set if k in SIZING}
    with store.write() as tx:
        row = common.get_row(tx.conn, PP, "port_pool", pool_id, ctx)  # 404 first: another project's pool is unseen
        if not ctx.is_admin:
            raise Forbidden("Only admins may change port pools")
        tx.conn.execute(update(PP).where(PP.c.id == pool_id).values(
            **changes, updated_at=tx.now, revision_number=PP.c.revision_number + 1))  # fmt: skip
        new = tx.conn.execute(select(PP).where(PP.c.id == pool_id)).one()
        s = Sizing.of(new, manager(store).defaults)
        if s.max and s.min > s.max:
            raise InvalidInput(f"min ({s.min}) must not exceed max ({s.max})")
        del row
        result = _dicts(tx.conn, [new], manager(store).defaults)[0]
    mgr = manager(store)
    with mgr.guard:
        mgr.maintained.pop(pool_id, None)
    mgr.forget()  # the cached sizing of the pool
    kick(store, pool_id)
    return result


__all__ = [
    "FREE_OWNER",
    "claim",
    "claim_in_tx",
    "configure",
    "drop_host",
    "for_instances",
    "list_pools",
    "maintain",
    "recover",
    "refill",
    "release",
    "release_in_tx",
]

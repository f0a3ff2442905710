"""Port pools (Kuryr-Kubernetes style, ../shared/reference/networking.md §2): ready ports per (host,
project, network), bucketed by their security groups, handed out in one transaction and recycled.

Everything durable is in the database: a pool port is an ordinary port with device_owner
`compute:cloudnet-pool` while ready, the tag `cloudnet.pool=<pool id>` and a `pool_ports` row (its
`idle_since`). A claim flips device_owner with `UPDATE ... WHERE device_owner = <ready>` and checks the row
count (on PostgreSQL it first picks the row with `FOR UPDATE SKIP LOCKED`), so no port is handed out twice,
whatever the number of threads or server processes. What lives in memory (the `Manager`) is only
scheduling: which pools have a background refill pending, and when each was last maintained.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field
from sqlalchemy import Connection, and_, delete, exists, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from cloudnet.errors import CloudnetError, Forbidden, InvalidInput, ServiceUnavailable
from cloudnet.services import common, networks, ports, security_groups
from cloudnet.services.context import Context
from cloudnet.services.validation import Body, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

log = logging.getLogger(__name__)

PP = t.port_pools
M = t.pool_ports  # membership
P = t.ports
PSG = t.port_security_groups
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


# -- in-memory scheduling ---------------------------------------------------------------------------


@dataclass
class Manager:
    """Per-store scheduling state: defaults, background refills, per-pool locks and maintenance times."""

    defaults: Defaults = field(default_factory=Defaults)
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(4, "cloudnet-pools"))
    pending: set[str] = field(default_factory=set)
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    maintained: dict[str, float] = field(default_factory=dict)
    failed: dict[str, float] = field(default_factory=dict)
    guard: threading.Lock = field(default_factory=threading.Lock)
    # Pools whose refill the current thread's open transaction asked for; kicked when it commits.
    deferred: threading.local = field(default_factory=threading.local)

    def lock(self, pool_id: str) -> threading.Lock:
        with self.guard:
            return self.locks.setdefault(pool_id, threading.Lock())


_managers: weakref.WeakKeyDictionary[Store, Manager] = weakref.WeakKeyDictionary()
_managers_guard = threading.Lock()


def manager(store: Store) -> Manager:
    with _managers_guard:
        m = _managers.get(store)
        if m is None:
            m = _managers[store] = Manager()
        return m


def configure(store: Store, defaults: Defaults) -> None:
    manager(store).defaults = defaults
    register(store)


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


def _ready_cond(pool_id: str) -> Any:
    return and_(M.c.pool_id == pool_id, P.c.id == M.c.port_id, P.c.device_owner == FREE_OWNER)


def _count_ready(conn: Connection, pool_id: str) -> int:
    return int(conn.execute(select(func.count()).select_from(M.join(P, P.c.id == M.c.port_id)).where(
        M.c.pool_id == pool_id, P.c.device_owner == FREE_OWNER)).scalar_one())  # fmt: skip


def _bucket_cond(sgs: tuple[str, ...]) -> Any:
    """The port's security groups are exactly `sgs`."""
    other = exists().where(PSG.c.port_id == P.c.id, PSG.c.security_group_id.not_in(sgs) if sgs else True)
    conds = [~other] + [exists().where(PSG.c.port_id == P.c.id, PSG.c.security_group_id == sg) for sg in sgs]
    return and_(*conds)


def _ensure_pool(tx: Tx, host: str, project_id: str, network_id: str, sgs: tuple[str, ...]) -> Any:
    """The pool of (host, project, network), created on first demand (concurrent creators agree)."""
    key = (PP.c.host == host, PP.c.project_id == project_id, PP.c.network_id == network_id)
    row = tx.conn.execute(select(PP).where(*key)).first()
    if row is not None:
        return row
    module = postgresql if tx.conn.dialect.name == "postgresql" else sqlite
    values = {"id": common.new_id(), "host": host, "project_id": project_id, "network_id": network_id,
              "security_groups": list(sgs), "created_at": tx.now, "updated_at": tx.now,
              "revision_number": 0}  # fmt: skip
    tx.conn.execute(module.insert(PP).values(**values).on_conflict_do_nothing())
    return tx.conn.execute(select(PP).where(*key)).one()


def _resolve_sgs(tx: Tx, ctx: Context, project_id: str, requested: list[str] | None) -> tuple[str, ...]:
    if requested is None:
        return (security_groups.ensure_default(tx, project_id),)
    return tuple(sorted(security_groups.check_usable(tx.conn, ctx, requested, project_id)))


def _take(tx: Tx, pool_id: str, sgs: tuple[str, ...], values: dict[str, Any]) -> tuple[str, bool] | None:
    """Take a ready port, writing `values` to it; returns it (and whether its security groups already
    match), or None."""
    pg = tx.conn.dialect.name == "postgresql"
    for cond in (_bucket_cond(sgs), None):
        stmt = select(P.c.id).select_from(M.join(P, P.c.id == M.c.port_id)).where(
            M.c.pool_id == pool_id, P.c.device_owner == FREE_OWNER)  # fmt: skip
        # Same bucket: most recently idle first (a recycled port is warm on its host). Another bucket:
        # least recently idle first, as Kuryr takes from its least recently used bucket.
        # No tie-break column: the (pool_id, idle_since) index then yields the rows in order, no sort.
        if cond is not None:
            stmt = stmt.where(cond).order_by(M.c.idle_since.desc())
        else:
            stmt = stmt.order_by(M.c.idle_since.asc())
        for _attempt in range(8):
            pick = stmt.limit(1)
            if pg:
                pick = pick.with_for_update(of=P, skip_locked=True)
            port_id = tx.conn.execute(pick).scalar()
            if port_id is None:
                break
            # The guard that makes a double hand-out impossible, also without SKIP LOCKED.
            won = tx.conn.execute(
                update(P).where(P.c.id == port_id, P.c.device_owner == FREE_OWNER).values(**values)
            ).rowcount
            if won == 1:
                return str(port_id), cond is not None
    return None


# -- claim and release ------------------------------------------------------------------------------


class ClaimSpec(Body):
    host: str = Field(..., min_length=1, max_length=255)
    project_id: str | None = Field(None, max_length=255)
    network_id: str = Field(..., min_length=1, max_length=36)
    security_groups: list[str] | None = None
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
) -> str | None:
    """Take a ready port of the pool for `tx`'s caller (the pool is created on first demand unless not
    `create`); an empty pool is filled within `tx` (a savepoint) when `fill`. None when no port can be had;
    the caller then creates its port the ordinary way (instance create) or answers 503 (the claim API)."""
    if device_owner == FREE_OWNER:
        raise InvalidInput(f"device_owner {FREE_OWNER} is reserved for ready pool ports")
    networks.get_visible(tx.conn, ctx, network_id)
    if not create and not tx.conn.execute(select(PP.c.id).where(
            PP.c.host == host, PP.c.project_id == project_id, PP.c.network_id == network_id)).first():  # fmt: skip
        return None
    sgs = _resolve_sgs(tx, ctx, project_id, security_groups)
    pool = _ensure_pool(tx, host, project_id, network_id, sgs)
    values = {"name": name, "device_id": device_id, "device_owner": device_owner, "updated_at": tx.now,
              "revision_number": P.c.revision_number + 1}  # fmt: skip
    taken = _take(tx, pool.id, sgs, values)
    if taken is None and fill:
        try:
            _fill_one_at_least(tx, pool, sgs, manager_of_tx(tx).defaults)
        except CloudnetError as exc:
            log.info("port pool %s cannot be filled: %s", pool.id, exc.message)
            return None
        taken = _take(tx, pool.id, sgs, values)
    if taken is None:
        return None
    port_id, same_bucket = taken
    if not same_bucket:
        tx.conn.execute(delete(PSG).where(PSG.c.port_id == port_id))
        if sgs:
            tx.conn.execute(insert(PSG), [{"port_id": port_id, "security_group_id": sg} for sg in sgs])
    if list(sgs) != list(pool.security_groups):
        tx.conn.execute(update(PP).where(PP.c.id == pool.id).values(security_groups=list(sgs)))
    tx.conn.execute(update(M).where(M.c.port_id == port_id).values(idle_since=None))
    tx.record("port", port_id, "update", project_id)
    _after_commit(tx, pool.id)
    return port_id


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
    sizing = Sizing.of(pool, manager_of_tx(tx).defaults)
    if sizing.max > 0 and _count_ready(tx.conn, pool.id) >= sizing.max:
        ports.delete_in_tx(tx, port_row)
        return True
    tx.conn.execute(
        update(P).where(P.c.id == port_row.id).values(
            name="", device_id="", device_owner=FREE_OWNER, status="DOWN", updated_at=tx.now,
            revision_number=P.c.revision_number + 1)
    )  # fmt: skip
    current = {r[0] for r in tx.conn.execute(select(PSG.c.security_group_id).where(PSG.c.port_id == port_row.id))}
    target = set(pool.security_groups)
    if current != target:
        tx.conn.execute(delete(PSG).where(PSG.c.port_id == port_row.id))
        if target:
            tx.conn.execute(insert(PSG), [{"port_id": port_row.id, "security_group_id": sg} for sg in sorted(target)])
    tx.conn.execute(update(M).where(M.c.port_id == port_row.id).values(idle_since=_now()))
    tx.record("port", port_row.id, "update", port_row.project_id)
    return True


# Claims in a transaction cannot reach the store; the manager is found through the connection's engine.
_store_of_engine: weakref.WeakValueDictionary[int, Store] = weakref.WeakValueDictionary()
_fallback = Manager()


def register(store: Store) -> None:
    """Make the store's manager reachable from its transactions, and kick deferred refills at commit."""
    if _store_of_engine.get(id(store.engine)) is store:
        return
    _store_of_engine[id(store.engine)] = store
    mgr = manager(store)

    def committed(_revision: int) -> None:
        kicks = getattr(mgr.deferred, "pools", None)
        if kicks:
            mgr.deferred.pools = set()
            for pool_id in kicks:
                kick(store, pool_id)

    store.on_commit(committed)


def manager_of_tx(tx: Tx) -> Manager:
    store = _store_of_engine.get(id(tx.conn.engine))
    return manager(store) if store is not None else _fallback


def _after_commit(tx: Tx, pool_id: str) -> None:
    """Top the pool up in the background once the claim's transaction has committed (never during it:
    a refill that ran earlier would still count the claimed port as ready)."""
    mgr = manager_of_tx(tx)
    kicks = getattr(mgr.deferred, "pools", None)
    if kicks is None:
        kicks = mgr.deferred.pools = set()
    kicks.add(pool_id)


def claim(store: Store, ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """POST /v2.0/port-pools/claim: a ready port, now owned by the caller (201), or 503 + Retry-After."""
    spec = parse(ClaimSpec, body)
    project = common.owner_project(ctx, spec.project_id)
    register(store)
    with store.write() as tx:
        _check_host(tx.conn, spec.host)
        port_id = claim_in_tx(tx, ctx, spec.host, project, spec.network_id, spec.security_groups, spec.name,
                              spec.device_id, spec.device_owner, fill=False)  # fmt: skip
        if port_id is not None:
            return ports.load(tx.conn, [port_id])[0]
        key = (PP.c.host == spec.host, PP.c.project_id == project, PP.c.network_id == spec.network_id)
        pool_id = tx.conn.execute(select(PP.c.id).where(*key)).scalar_one()
    # Empty: fill synchronously (outside the claim's transaction, so the claim holds no lock meanwhile).
    # Concurrent claimers take turns at the pool lock; one whose fill found ports already made by another
    # (and lost them to other claimers) tries again, a bounded number of times.
    reason = ""
    for _round in range(SYNC_ROUNDS):
        try:
            refill(store, pool_id, need_one=True)
        except CloudnetError as exc:
            reason = f": {exc.message}"
            break
        with store.write() as tx:
            port_id = claim_in_tx(tx, ctx, spec.host, project, spec.network_id, spec.security_groups, spec.name,
                                  spec.device_id, spec.device_owner, fill=False)  # fmt: skip
            if port_id is not None:
                return ports.load(tx.conn, [port_id])[0]
    raise ServiceUnavailable(
        f"Port pool {pool_id} has no ready port and could not be filled{reason}", retry_after=RETRY_AFTER,
        type="PortPoolExhausted")  # fmt: skip


class ReleaseSpec(Body):
    port_id: str = Field(..., min_length=1, max_length=36)


def release(store: Store, ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """POST /v2.0/port-pools/release: {"port_id"}; answers whether the port was recycled or deleted."""
    spec = parse(ReleaseSpec, body)
    register(store)
    with store.write() as tx:
        row = common.get_row(tx.conn, P, "port", spec.port_id, ctx)
        if not release_in_tx(tx, row):
            raise InvalidInput(f"port {spec.port_id} does not belong to a port pool")
        kept = tx.conn.execute(select(P.c.id).where(P.c.id == spec.port_id)).first() is not None
        return {"port_id": spec.port_id, "recycled": kept, "deleted": not kept}


def _check_host(conn: Connection, host: str) -> None:
    if not conn.execute(select(t.hosts.c.name).where(t.hosts.c.name == host)).first():
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
    spec = ports.PortCreate(
        network_id=pool.network_id, project_id=pool.project_id, device_owner=FREE_OWNER, host_id=pool.host,
        security_groups=groups or None, tags=[TAG_PREFIX + pool.id])  # fmt: skip
    ids = ports.create_in_tx(tx, Context.admin(pool.project_id), [spec] * n)
    idle = _now()
    tx.conn.execute(insert(M), [{"port_id": pid, "pool_id": pool.id, "idle_since": idle} for pid in ids])
    tx.conn.execute(update(PP).where(PP.c.id == pool.id).values(last_refill=tx.now))
    return len(ids)


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

    Tagged ports missing from `pool_ports` are added; `idle_since` is set on ready ports and cleared on
    claimed ones; ready pool-tagged ports of no pool (their pool is gone) are deleted, so nothing leaks."""
    register(store)
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
        r2 = tx.conn.execute(update(M).where(M.c.idle_since.is_not(None), M.c.port_id.not_in(ready)).values(
            idle_since=None))  # fmt: skip
        fixed["idle_fixed"] = r1.rowcount + r2.rowcount
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
    return fixed


# -- network and security group deletion ------------------------------------------------------------


def forget_security_group(tx: Tx, sg_id: str) -> None:
    """A security group is being deleted: ready pool ports lose it (moving to another bucket) and refills
    stop giving it, so that pool ports never block the deletion."""
    ready = select(P.c.id).where(P.c.device_owner == FREE_OWNER)
    tx.conn.execute(delete(PSG).where(PSG.c.security_group_id == sg_id, PSG.c.port_id.in_(ready)))
    for pool_id, sgs in tx.conn.execute(select(PP.c.id, PP.c.security_groups)).all():
        if sg_id in (sgs or []):
            tx.conn.execute(update(PP).where(PP.c.id == pool_id).values(
                security_groups=[s for s in sgs if s != sg_id]))  # fmt: skip


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
    cond = common.visible(PP, ctx)
    stmt = select(PP).order_by(PP.c.host, PP.c.project_id, PP.c.network_id)
    return stmt if cond is None else stmt.where(cond)


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
    if not ctx.is_admin:
        raise Forbidden("Only admins may change port pools")
    spec = parse(PoolUpdate, body)
    changes = {k: getattr(spec, k) for k in spec.model_fields_set if k in SIZING}
    with store.write() as tx:
        row = common.get_row(tx.conn, PP, "port_pool", pool_id, ctx)
        tx.conn.execute(update(PP).where(PP.c.id == pool_id).values(
            **changes, updated_at=tx.now, revision_number=PP.c.revision_number + 1))  # fmt: skip
        new = tx.conn.execute(select(PP).where(PP.c.id == pool_id)).one()
        s = Sizing.of(new, manager(store).defaults)
        if s.max and s.min > s.max:
            raise InvalidInput(f"min ({s.min}) must not exceed max ({s.max})")
        del row
        result = _dicts(tx.conn, [new], manager(store).defaults)[0]
    with manager(store).guard:
        manager(store).maintained.pop(pool_id, None)
    kick(store, pool_id)
    return result


__all__ = [
    "FREE_OWNER",
    "claim",
    "claim_in_tx",
    "configure",
    "forget_security_group",
    "list_pools",
    "maintain",
    "recover",
    "refill",
    "release",
    "release_in_tx",
]

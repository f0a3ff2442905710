"""Port pools, refill and TTL policy: how many ports one refill makes, background refills (one pending per pool,
a pause after a failure), the bulk fill itself, and the maintenance pass (refill below min, evict ports idle
beyond ttl)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from sqlalchemy import insert, select, update

from cloudnet import metrics
from cloudnet.errors import CloudnetError
from cloudnet.services import cache
from cloudnet.services.context import Context
from cloudnet.services.networks import networks
from cloudnet.services.pools.pool_model import (
    FREE_OWNER,
    PP,
    TAG_PREFIX,
    Defaults,
    M,
    P,
    Sizing,
    count_ready,
    manager,
    precise_now,
)
from cloudnet.services.ports import metadata_ports, port_specs, ports
from cloudnet.store.db import Store, Tx

log = logging.getLogger(__name__)


def refill_count(s: Sizing, ready: int, *, need_one: bool = False) -> int:
    """How many ports one refill creates: `max(batch, min - ready)` when below min, within `max`."""
    if ready >= s.min and not (need_one and ready == 0):
        return 0
    n = max(s.batch, s.min - ready, 1 if need_one else 0)
    if s.max > 0:
        n = min(n, s.max - ready)
    return max(n, 0)


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
    n = refill_count(Sizing.of(pool, defaults), count_ready(tx.conn, pool.id), need_one=need_one)
    if limit is not None:
        n = min(n, limit)
    if n <= 0:
        return 0
    network = cache.network(tx, pool.network_id)
    if network is None or not networks.usable_in_tx(tx, network, pool.project_id):
        return 0  # the project lost the network (unshared, its RBAC policy gone): nothing to refill it with
    groups = list(sgs if sgs is not None else pool.security_groups)
    spec = port_specs.PortCreate(
        network_id=pool.network_id, project_id=pool.project_id, device_owner=FREE_OWNER, host_id=pool.host,
        security_groups=groups or None, tags=[TAG_PREFIX + pool.id])  # fmt: skip
    ids = ports.create_in_tx(tx, Context.admin(pool.project_id), [spec] * n)
    idle = precise_now()
    tx.conn.execute(insert(M), [{"port_id": pid, "pool_id": pool.id, "idle_since": idle} for pid in ids])
    tx.conn.execute(update(PP).where(PP.c.id == pool.id).values(last_refill=tx.now))
    _plumb_metadata(tx, pool.network_id)
    if tx.store is not None:  # the next claim reads the pool's ready ports afresh (one query per refill)
        mgr, pool_id = manager(tx.store), str(pool.id)
        tx.after_commit(lambda: mgr.forget(pool_id))
    tx.after_commit(metrics.POOL_REFILLS.labels("claim" if need_one else "background").inc)
    tx.after_commit(functools.partial(metrics.POOL_REFILL_PORTS.inc, len(ids)))
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


def fill_one_at_least(tx: Tx, pool: Any, sgs: tuple[str, ...] | None, defaults: Defaults) -> int:
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
            if pool is None or refill_count(Sizing.of(pool, mgr.defaults), count_ready(conn, pool_id)) == 0:
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
                    return fill_one_at_least(tx, pool, sgs_hint, mgr.defaults)
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
        spare = count_ready(tx.conn, pool_id) - s.min
        if spare <= 0:
            return 0
        cutoff = precise_now() - timedelta(seconds=s.ttl)
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

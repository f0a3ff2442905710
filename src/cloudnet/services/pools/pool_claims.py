"""Port pools, claims and releases: a claim takes a ready port for its caller (filling an empty pool within the
transaction when it may), rewrites its groups to the caller's bucket and tops the pool up after the commit; a
release gives a port back (or deletes it when the pool is full). A claim that does not wait defers its cache
sync to its own statement and rolls back if what it read from memory went stale."""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy import String, bindparam, delete, insert, select, update

from cloudnet import metrics
from cloudnet.errors import CloudnetError, InvalidInput, not_found
from cloudnet.services import cache, quotas
from cloudnet.services.context import Context
from cloudnet.services.networks import networks, single_host
from cloudnet.services.pools import pool_refill, pool_take
from cloudnet.services.pools.pool_model import (
    FREE_OWNER,
    HANDLED,
    PP,
    PSG,
    Bucket,
    M,
    Manager,
    P,
    PoolInfo,
    Sizing,
    count_ready,
    ensure_pool,
    find_pool,
    manager,
    pool_info,
    precise_now,
)
from cloudnet.services.ports import port_policy, port_views, ports
from cloudnet.services.security import port_security, security_groups
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.store.prepared import BulkInsert, Prepared

log = logging.getLogger(__name__)

_pid = bindparam("port_id", type_=String)
_UNPARKED = Prepared(update(P).where(P.c.id == _pid).values(status="DOWN", vif_details={}))
_DELETE_PSG = Prepared(delete(PSG).where(PSG.c.port_id == _pid))
_INSERT_PSG = BulkInsert(PSG, ["port_id", "security_group_id"])
_SET_POOL_GROUPS = Prepared(
    update(PP)
    .where(PP.c.id == bindparam("pool_id"))
    .values(security_groups=bindparam("groups", type_=PP.c.security_groups.type))
)


def _resolve_sgs(tx: Tx, ctx: Context, project_id: str, network: Any, requested: list[str] | None) -> Bucket:
    if not network.port_security_enabled:  # its ports take the network's: no port security, no groups
        port_security.check_new_port(False, requested, [])
        return ()
    if requested is None:
        return (security_groups.ensure_default(tx, project_id),)
    return tuple(sorted(security_groups.check_usable(tx.conn, ctx, requested, project_id)))


# tx.notes key: a claim that does not wait uses the caches before it syncs them (defer_sync, _deferred).
DEFERRED = "pools.deferred_sync"


class Stale(Exception):
    """A claim that deferred its sync found that what it read from the caches has changed: it rolls back."""


def defer_sync(tx: Tx) -> None:
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
        raise Stale()


def claim_in_tx(
    tx: Tx, ctx: Context, host: str, project_id: str, network_id: str, requested: list[str] | None, name: str,
    device_id: str, device_owner: str, *, fill: bool = True, create: bool = True, take_parked: bool = False,
    alone: bool = False,
) -> dict[str, Any] | None:  # fmt: skip
    """Take a ready port of the pool for `tx`'s caller (the pool is created on first demand unless not
    `create`); an empty pool is filled within `tx` (a savepoint) when `fill`. The port in its API shape (built
    from what the claim wrote and read), or None when no port can be had; the caller then creates its port the
    ordinary way (instance create) or answers 503 (the claim API). `take_parked`: the caller takes over the
    namespace the port's device is parked in, if it has one (binding:vif_details.prepared_netns), so the port
    stays as the agent reported it; otherwise the port is DOWN until its device is plugged where the caller
    wants it. `alone`: the claim is all its transaction writes (the claim API), so it may publish its event
    itself."""
    assert tx.store is not None
    mgr = manager(tx.store)
    network = networks.visible_in_tx(tx, ctx, network_id)
    if not networks.usable_in_tx(tx, network, project_id):
        if not ctx.is_admin:
            raise not_found("network", network_id)  # as for a port of its own (port_create.py), an external one too
        # An admin may make a port for any project, but a pool's ports are refilled for its project, which this
        # network is not shared with: the claim API refuses rather than make a pool that could never fill; an
        # instance's port is made the ordinary way.
        if not alone:
            return None
        raise InvalidInput(f"Network {network_id} is not shared with project {project_id}: a pool's ports are the "
                           "project's own.")  # fmt: skip
    port_policy.check(tx.conn, ctx, device_owner, device_id, project_id, network)
    pool = find_pool(tx, mgr, host, project_id, network_id)
    if pool is None and not create:
        return None
    sgs = _resolve_sgs(tx, ctx, project_id, network, requested)
    if pool is None:
        single_host.check_placement(tx, network_id, host)  # (a pool plumbs its network on its host)
        pool = pool_info(ensure_pool(tx, host, project_id, network_id, sgs), mgr.defaults)
    values = {"name": name, "device_id": device_id, "device_owner": device_owner, "updated_at": tx.now}
    row = pool_take.take(tx, mgr, pool.id, sgs, values, project_id, alone)
    result = "hit" if row is not None else "miss"
    if row is None and fill:
        try:
            pool_row = tx.conn.execute(select(PP).where(PP.c.id == pool.id)).one()
            pool_refill.fill_one_at_least(tx, pool_row, sgs, mgr.defaults)
        except quotas.OverQuota:
            raise
        except CloudnetError as exc:
            log.info("port pool %s cannot be filled: %s", pool.id, exc.message)
            return None
        row = pool_take.take(tx, mgr, pool.id, sgs, values, project_id, alone)
    if fill:  # (without: the caller fills, and counts the claim as it ends: services/pools/pools.py)
        if row is None:
            metrics.POOL_CLAIMS.labels("failed").inc()
        else:
            tx.after_commit(metrics.POOL_CLAIMS.labels(result).inc)
    if row is None:
        return None
    n = len(pool_take.PORT_COLUMNS)
    generation = tx.notes.pop(DEFERRED, None)
    if generation is not None:
        _deferred(tx, int(row[n + 3]), generation)
    port = dict(zip(pool_take.PORT_COLUMNS, row[:n], strict=True))
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
        pool_refill.kick(store, pool.id)


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
    if sizing.max > 0 and count_ready(tx.conn, pool.id) >= sizing.max:
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
    idle = precise_now()
    tx.conn.execute(update(M).where(M.c.port_id == port_row.id).values(idle_since=idle))
    tx.record("port", port_row.id, "update", port_row.project_id)
    tx.notes.setdefault(HANDLED, set()).add(port_row.id)
    back = [(str(port_row.id), tuple(sorted(target)), idle)]
    tx.after_commit(lambda: mgr.add_ready(str(pool.id), back))
    return True

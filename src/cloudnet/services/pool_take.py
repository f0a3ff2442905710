"""Port pools, taking one ready port: the hints of this process pick it, and the guarded UPDATE (only a port still
ready is taken; PostgreSQL skips a row another transaction holds) decides; the row comes back with what its API
shape needs (fixed IPs, groups, tags) and the revision counter the claim's statement saw."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, insert, literal, select, true, update
from sqlalchemy.sql import Executable

from cloudnet.services.pool_model import FREE_OWNER, PSG, A, Bucket, M, Manager, P, Ready, naive
from cloudnet.store import tables as t
from cloudnet.store.db import Tx
from cloudnet.store.events import Event
from cloudnet.store.prepared import Prepared
from cloudnet.wire import request_ids


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
    columns = ("revision", "resource", "resource_id", "operation", "project_id", "created_at", "type", "request_id")
    written = select(
        bumped.c.value,
        literal("port"),
        claimed.c.id,
        literal("update"),
        bindparam("project_id", type_=E.c.project_id.type),
        bindparam("created_at", type_=E.c.created_at.type),
        literal("port.updated"),
        bindparam("request_id", type_=E.c.request_id.type),
    ).select_from(bumped.join(claimed, true()))
    event = insert(E).from_select(list(columns), written).returning(E.c.revision).cte("event")
    # (`event` runs whether or not the final SELECT reads it: PostgreSQL runs every data-modifying CTE once.)
    return select(claimed, bumped.c.value.label("published")).select_from(claimed.join(bumped, true())).add_cte(event)


_CLAIM = Prepared(_claim_stmt)
_CLAIM_PUBLISHING = Prepared(_claim_publishing_stmt)
_PORT_ROW = Prepared(
    lambda dialect: select(*P.c, *_related(dialect), _revision()).where(P.c.id == bindparam("port_id"))
)
PORT_COLUMNS = tuple(c.name for c in P.c)
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
        idle[port_id] = naive(since) if since is not None else datetime.min
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
    event = Event("port", port_id, "update", project_id, request_id=request_ids.current.get())
    if tx.conn.dialect.name != "postgresql":
        row = _PORT_ROW.first(tx.conn, params) if _CLAIM.rowcount(tx.conn, params) == 1 else None
    elif not alone or tx.events:
        row = _CLAIM.first(tx.conn, params)
    else:
        published = _CLAIM_PUBLISHING.first(tx.conn, {**params, "project_id": project_id, "created_at": tx.now,
                                                    "request_id": event.request_id})  # fmt: skip
        if published is not None:
            tx.record_published(event, int(published[-1]))
        return None if published is None else published[:-1]
    if row is not None:
        tx.record(event.resource, port_id, event.operation, project_id)
    return row


def take(
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

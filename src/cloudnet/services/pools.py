"""Port pools, the /v2.0/port-pools operations: list, show and resize pools; claim a ready port (503 with
Retry-After when the pool cannot be filled) and release it."""

from __future__ import annotations

from typing import Any, Literal, overload

from pydantic import Field
from sqlalchemy import Connection, select, update

from cloudnet import metrics
from cloudnet.errors import CloudnetError, Forbidden, InvalidInput, ServiceUnavailable
from cloudnet.services import cache, common, pool_claims, pool_refill, quotas
from cloudnet.services.context import Context
from cloudnet.services.pool_model import FREE_OWNER, PP, PSG, SIZING, Defaults, M, P, Sizing, manager, pool_key
from cloudnet.services.security_groups import GroupIds
from cloudnet.services.validation import Body, parse
from cloudnet.store.db import Store, Tx

RETRY_AFTER = 1  # seconds, in the 503 of a pool that cannot be filled
SYNC_ROUNDS = 5  # fill-then-claim attempts of a claim that found its pool empty


class ClaimSpec(Body):
    host: str = Field(..., min_length=1, max_length=255)
    project_id: str | None = Field(None, max_length=255)
    network_id: str = Field(..., min_length=1, max_length=36)
    security_groups: GroupIds | None = None
    name: str = Field("", max_length=255)
    device_id: str = Field("", max_length=255)
    device_owner: str = Field("compute:cloudnet", min_length=1, max_length=255)


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
                pool_claims.defer_sync(tx)
            _check_host(tx, spec.host)
            port = pool_claims.claim_in_tx(tx, *args, fill=False, create=True, alone=True)
            if port is not None:
                tx.after_commit(metrics.POOL_CLAIMS.labels("hit").inc)
            if port is not None or not wait:
                return port
            key = pool_key(spec.host, project, spec.network_id)
            pool_id = tx.conn.execute(select(PP.c.id).where(*key)).scalar_one()
    except pool_claims.Stale:
        return None  # only without `wait`: the caller claims again, with `wait` and synced caches
    # Empty: fill synchronously (outside the claim's transaction, so the claim holds no lock meanwhile).
    # Concurrent claimers take turns at the pool lock; one whose fill found ports already made by another
    # (and lost them to other claimers) tries again, a bounded number of times.
    reason = ""
    for _round in range(SYNC_ROUNDS):
        try:
            pool_refill.refill(store, pool_id, need_one=True)
        except quotas.OverQuota:
            raise  # the caller's own limit, not a pool that may fill later: 409, not "retry"
        except CloudnetError as exc:
            reason = f": {exc.message}"
            break
        with store.write() as tx:
            port = pool_claims.claim_in_tx(tx, *args, fill=False, create=True, alone=True)
            if port is not None:
                tx.after_commit(metrics.POOL_CLAIMS.labels("miss").inc)  # (a ready port only after a fill)
                return port
    metrics.POOL_CLAIMS.labels("failed").inc()
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
        if not pool_claims.release_in_tx(tx, row):
            raise InvalidInput(f"port {spec.port_id} does not belong to a port pool")
        kept = tx.conn.execute(select(P.c.id).where(P.c.id == spec.port_id)).first() is not None
        return {"port_id": spec.port_id, "recycled": kept, "deleted": not kept}


def _check_host(tx: Tx, host: str) -> None:
    if not cache.host_known(tx, host):
        raise InvalidInput(f"host {host} is not a registered host (no agent has reported from it)")


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
    pool_refill.kick(store, pool_id)
    return result

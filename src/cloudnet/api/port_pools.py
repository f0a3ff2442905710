"""/v2.0/port-pools: Kuryr-style pools of ready ports (list, show, resize), claim and release, and the
background maintenance every server runs (refill below min, TTL eviction)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import AppState, call, context, quick, state
from cloudnet.services.pools import pool_model, pool_recovery, pool_refill, pools

log = logging.getLogger(__name__)
router = APIRouter()
# How often the maintenance task looks for pools whose update_interval has passed.
TICK = 0.5


def defaults_of(st: AppState) -> pool_model.Defaults:
    c = st.config
    return pool_model.Defaults(min=c.pool_min, max=c.pool_max, batch=c.pool_batch, ttl=c.pool_ttl,
                               update_interval=c.pool_update_interval)  # fmt: skip


@router.get("/v2.0/port-pools")
async def list_pools(request: Request) -> Response:
    st = state(request)
    neutron.fields_of(request)  # refuses NUL characters
    filters: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        filters.setdefault(key, []).append(value)
    items = await call(pools.list_pools, st.store, context(request), filters)
    return neutron.JSON({"port_pools": items})


@router.get("/v2.0/port-pools/{pool_id}")
async def show_pool(request: Request, pool_id: str) -> Response:
    st = state(request)
    item = await call(pools.get_pool, st.store, context(request), neutron.check_id("port_pool", pool_id))
    return neutron.JSON({"port_pool": item})


@router.put("/v2.0/port-pools/{pool_id}")
async def update_pool(request: Request, pool_id: str) -> Response:
    st = state(request)
    body = neutron.unwrap_one(await neutron.body_of(request), "port_pool")
    item = await call(pools.update_pool, st.store, context(request), neutron.check_id("port_pool", pool_id), body)
    return neutron.JSON({"port_pool": item})


@router.post("/v2.0/port-pools/claim")
async def claim(request: Request) -> Response:
    st = state(request)
    body = neutron.unwrap_one(await neutron.body_of(request), "claim")
    ctx = context(request)
    port = await quick(st.store, pools.claim, st.store, ctx, body, False)  # a ready port: no waiting
    if port is None:  # the pool is empty: filled while the claim waits
        port = await call(pools.claim, st.store, ctx, body)
    return neutron.JSON({"port": port}, status_code=201)


@router.post("/v2.0/port-pools/release")
async def release(request: Request) -> Response:
    st = state(request)
    body = await neutron.body_of(request)
    if not isinstance(body, dict):
        body = {}
    result = await call(pools.release, st.store, context(request), body)
    return neutron.JSON({"release": result})


async def recover_pools(st: AppState) -> None:
    """At start, before the API answers: pool defaults, and pool state rebuilt from the database (a claim or
    a pool listing never sees a half-recovered pool)."""
    pool_model.configure(st.store, defaults_of(st), instance_pools=st.config.instance_pools)
    try:
        fixed = await call(pool_recovery.recover, st.store)
        if any(fixed.values()):
            log.warning("port pools recovered from the database: %s", fixed)
    except Exception:
        log.exception("port pool recovery failed")


async def maintain_pools(st: AppState) -> None:
    """Background task of every server (after `recover_pools`): refill pools below min and evict idle ports
    (TTL), each pool every `update_interval` seconds."""
    while True:
        with contextlib.suppress(Exception):
            await call(pool_refill.maintain, st.store)
        await asyncio.sleep(TICK)

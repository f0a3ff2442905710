"""/v2.0/hosts: agents register and heartbeat, fetch their desired state, and report port status; admins delete
decommissioned hosts."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import AppState, call, context, state
from cloudnet.api.metrics import Programming
from cloudnet.services.hosts import host_checks, host_qos, host_state, hosts

log = logging.getLogger(__name__)
router = APIRouter()


@router.get("/v2.0/hosts")
async def list_hosts(request: Request) -> Response:
    st = state(request)
    items = await call(hosts.list_hosts, st.store, context(request), st.config.agent_down_time)
    return neutron.JSON({"hosts": items})


@router.get("/v2.0/hosts/{name}")
async def show_host(request: Request, name: str) -> Response:
    st = state(request)
    item = await call(hosts.get_host, st.store, context(request), name, st.config.agent_down_time)
    return neutron.JSON({"host": item})


@router.put("/v2.0/hosts/{name}")
async def heartbeat(request: Request, name: str) -> Response:
    st = state(request)
    body = neutron.unwrap_one(await neutron.body_of(request), "host")
    item = await call(hosts.heartbeat, st.store, context(request), name, body, st.config.agent_down_time)
    return neutron.JSON({"host": item})


@router.delete("/v2.0/hosts/{name}")
async def delete_host(request: Request, name: str) -> Response:
    st = state(request)
    freed = await call(hosts.delete_host, st.store, context(request), name, st.config.agent_down_time)
    log.info("host %s deleted; %d ready pool ports freed", name, freed)
    return Response(status_code=204)


@router.post("/v2.0/hosts/{name}/check")
async def request_check(request: Request, name: str) -> Response:
    """Ask the host's agent for a drift check; its result shows in the host's `report.check` (202: not yet)."""
    item = await call(host_checks.request_check, state(request).store, context(request), name)
    return neutron.JSON({"check": item}, status_code=202)


@router.get("/v2.0/hosts/{name}/state")
async def desired_state(request: Request, name: str) -> Response:
    """The host's whole desired state (`since=N`: with the requests that changed its ports after revision N), or with
    `part=qos&port=ID...` the part its agent's QoS-only pass needs."""
    st, params = state(request), request.query_params
    which = params.get("part")
    if which is not None:
        return neutron.JSON(await call(host_qos.part, st.store, context(request), name, which, params.getlist("port")))
    return neutron.JSON(await call(host_state.desired_state, st.store, context(request), name, params.get("since")))


@router.put("/v2.0/hosts/{name}/ports")
async def report_ports(request: Request, name: str) -> Response:
    body = await neutron.body_of(request)
    programming: Programming | None = request.app.state.programming
    pending = programming.pending(body) if programming is not None else {}
    answer = await call(hosts.report_ports, state(request).store, context(request), name, body)
    Programming.realised(pending, answer["updated"])
    request.app.state.reports.committed(int(answer["revision"]))  # wakes those waiting for an instance
    return neutron.JSON(answer)


async def sweep_dead_hosts(st: AppState) -> None:
    """Background task of every server: report the ports of hosts whose agent went silent DOWN."""
    interval = max(0.5, min(5.0, st.config.agent_down_time / 3))
    while True:
        await asyncio.sleep(interval)
        with contextlib.suppress(Exception):
            dead = await call(hosts.sweep_dead, st.store, st.config.agent_down_time)
            if dead:
                log.warning("hosts without heartbeat for %.0f s, ports reported DOWN: %s",
                            st.config.agent_down_time, ", ".join(dead))  # fmt: skip

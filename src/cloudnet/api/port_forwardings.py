"""/v2.0/floatingips/{floatingip_id}/port_forwardings[/{id}] (Neutron's floating-ip-port-forwarding)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import call, context, state
from cloudnet.services.forwards import port_forwardings as pf

router = APIRouter()
BASE = "/v2.0/floatingips/{floatingip_id}/port_forwardings"
MEMBER = "port_forwarding"


@router.get(BASE)
async def list_port_forwardings(request: Request, floatingip_id: str) -> Response:
    neutron.check_id("floatingip", floatingip_id)
    q = neutron.list_query(request)
    items = await call(pf.list_port_forwardings, state(request).store, context(request), floatingip_id, q.filters)
    return neutron.JSON({"port_forwardings": [neutron.trim(i, q.fields) for i in items]})


@router.post(BASE)
async def create_port_forwarding(request: Request, floatingip_id: str) -> Response:
    neutron.check_id("floatingip", floatingip_id)
    body = neutron.unwrap_one(await neutron.body_of(request), MEMBER)
    item = await call(pf.create_port_forwarding, state(request).store, context(request), floatingip_id, body)
    return neutron.JSON({MEMBER: item}, status_code=201)


@router.get(BASE + "/{pf_id}")
async def show_port_forwarding(request: Request, floatingip_id: str, pf_id: str) -> Response:
    neutron.check_id("floatingip", floatingip_id)
    item = await call(pf.get_port_forwarding, state(request).store, context(request), floatingip_id, pf_id)
    return neutron.JSON({MEMBER: neutron.trim(item, neutron.fields_of(request))})


@router.put(BASE + "/{pf_id}")
async def update_port_forwarding(request: Request, floatingip_id: str, pf_id: str) -> Response:
    neutron.check_id("floatingip", floatingip_id)
    body = neutron.unwrap_one(await neutron.body_of(request), MEMBER)
    item = await call(pf.update_port_forwarding, state(request).store, context(request), floatingip_id, pf_id, body)
    return neutron.JSON({MEMBER: item})


@router.delete(BASE + "/{pf_id}")
async def delete_port_forwarding(request: Request, floatingip_id: str, pf_id: str) -> Response:
    neutron.check_id("floatingip", floatingip_id)
    await call(pf.delete_port_forwarding, state(request).store, context(request), floatingip_id, pf_id)
    return Response(status_code=204)

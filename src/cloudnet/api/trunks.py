"""/v2.0/trunks (Neutron's trunk extension): CRUD from the resource table, and the subport actions."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import call, context, state
from cloudnet.services.ports import trunks

router = APIRouter()
BASE = "/v2.0/trunks/{trunk_id}"


@router.put(BASE + "/add_subports")
async def add_subports(request: Request, trunk_id: str) -> Response:
    neutron.check_id("trunk", trunk_id)
    body = await neutron.body_of(request)
    return neutron.JSON(await call(trunks.add_subports, state(request).store, context(request), trunk_id, body))


@router.put(BASE + "/remove_subports")
async def remove_subports(request: Request, trunk_id: str) -> Response:
    neutron.check_id("trunk", trunk_id)
    body = await neutron.body_of(request)
    return neutron.JSON(await call(trunks.remove_subports, state(request).store, context(request), trunk_id, body))


@router.get(BASE + "/get_subports")
async def get_subports(request: Request, trunk_id: str) -> Response:
    neutron.check_id("trunk", trunk_id)
    return neutron.JSON(await call(trunks.get_subports, state(request).store, context(request), trunk_id))

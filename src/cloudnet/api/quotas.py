"""/v2.0/quotas: Neutron's quota API (the `quotas` and `quota_details` extensions)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import call, context, state
from cloudnet.services import quotas

router = APIRouter()
BASE = "/v2.0/quotas"


@router.get(BASE)
async def list_quotas(request: Request) -> Response:
    items = await call(quotas.list_quotas, state(request).store, context(request))
    return neutron.JSON({"quotas": items})


@router.get(BASE + "/{project_id}")
async def show_quota(request: Request, project_id: str) -> Response:
    item = await call(quotas.get_quota, state(request).store, context(request), project_id)
    return neutron.JSON({"quota": item})


@router.get(BASE + "/{project_id}/details")
async def show_details(request: Request, project_id: str) -> Response:
    item = await call(quotas.get_details, state(request).store, context(request), project_id)
    return neutron.JSON({"quota": item})


@router.get(BASE + "/{project_id}/default")
async def show_defaults(request: Request, project_id: str) -> Response:
    item = await call(quotas.get_defaults, state(request).store, context(request), project_id)
    return neutron.JSON({"quota": item})


@router.put(BASE + "/{project_id}")
async def update_quota(request: Request, project_id: str) -> Response:
    body = await neutron.body_of(request)
    item = await call(quotas.update_quota, state(request).store, context(request), project_id, body)
    return neutron.JSON({"quota": item})


@router.delete(BASE + "/{project_id}")
async def reset_quota(request: Request, project_id: str) -> Response:
    await call(quotas.reset_quota, state(request).store, context(request), project_id)
    return Response(status_code=204)

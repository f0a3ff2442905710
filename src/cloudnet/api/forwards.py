"""/v2.0/networks/{network}/forwards[/{listen_address}] (LXD-shaped network forwards)."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import call, context, state
from cloudnet.services.forwards import forwards

router = APIRouter()
BASE = "/v2.0/networks/{network}/forwards"


@router.get(BASE)
async def list_forwards(request: Request, network: str) -> Response:
    items = await call(forwards.list_forwards, state(request).store, context(request), network)
    return neutron.JSON({"forwards": items})


@router.post(BASE)
async def create_forward(request: Request, network: str) -> Response:
    body = await neutron.body_of(request)
    item = await call(forwards.create_forward, state(request).store, context(request), network, body)
    location = f"/v2.0/networks/{quote(network, safe='')}/forwards/{quote(item['listen_address'], safe='')}"
    return neutron.JSON({"forward": item}, status_code=201, headers={"Location": location})


@router.get(BASE + "/{listen_address}")
async def show_forward(request: Request, network: str, listen_address: str) -> Response:
    item, tag = await call(forwards.get_forward, state(request).store, context(request), network, listen_address)
    return neutron.JSON({"forward": item}, headers={"ETag": f'"{tag}"'})


async def _update(request: Request, network: str, listen_address: str, patch: bool) -> Response:
    body = await neutron.body_of(request)
    item = await call(
        lambda: forwards.update_forward(
            state(request).store, context(request), network, listen_address, body,
            patch=patch, if_match=request.headers.get("if-match"),
        )
    )  # fmt: skip
    return neutron.JSON({"forward": item})


@router.put(BASE + "/{listen_address}")
async def put_forward(request: Request, network: str, listen_address: str) -> Response:
    return await _update(request, network, listen_address, patch=False)


@router.patch(BASE + "/{listen_address}")
async def patch_forward(request: Request, network: str, listen_address: str) -> Response:
    return await _update(request, network, listen_address, patch=True)


@router.delete(BASE + "/{listen_address}")
async def delete_forward(request: Request, network: str, listen_address: str) -> Response:
    await call(forwards.delete_forward, state(request).store, context(request), network, listen_address)
    return Response(status_code=204)

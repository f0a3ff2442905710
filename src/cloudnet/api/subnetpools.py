"""Neutron's subnetpool-prefix-ops: PUT /v2.0/subnetpools/{id}/add_prefixes and .../remove_prefixes (the pools'
CRUD routes come from resources.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import call, context, state
from cloudnet.services.networks import subnetpools

router = APIRouter()


def _prefix_op(add: bool) -> Callable[[Request, str], Awaitable[Response]]:
    async def change(request: Request, pool_id: str) -> Response:
        neutron.check_id("subnetpool", pool_id)
        body = await neutron.body_of(request)
        found = await call(subnetpools.change_prefixes, state(request).store, context(request), pool_id, body, add)
        return neutron.JSON(found)

    return change


router.add_api_route("/v2.0/subnetpools/{pool_id}/add_prefixes", _prefix_op(True), methods=["PUT"])
router.add_api_route("/v2.0/subnetpools/{pool_id}/remove_prefixes", _prefix_op(False), methods=["PUT"])

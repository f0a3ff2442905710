"""/v2.0/routers/{id}/gateway_chassis: a router's gateway chassis on OVN and whether its gateway can fail over
(northbound/gateway_ha.py); admins only."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import call, context, state
from cloudnet.northbound import gateway_ha

router = APIRouter()


@router.get("/v2.0/routers/{router_id}/gateway_chassis")
async def gateway_chassis(request: Request, router_id: str) -> Response:
    neutron.check_id("router", router_id)
    st = state(request)
    item = await call(gateway_ha.show, st.store, context(request), router_id, list(st.config.ovn_gateway_chassis),
                      st.config.dataplane)  # fmt: skip
    return neutron.JSON({"gateway_chassis": item})

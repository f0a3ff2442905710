"""GET /v2.0/availability_zones (Neutron's availability_zone extension; services/hosts/zones.py)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import call, context, state
from cloudnet.services.hosts import zones

router = APIRouter()


@router.get("/v2.0/availability_zones")
async def list_zones(request: Request) -> Response:
    # (no sorting or pages, as Neutron's controller for them: a handful of rows; fields as everywhere)
    q = neutron.list_query(request)
    st = state(request)
    items = await call(zones.list_zones, st.store, context(request), q.filters, st.config.agent_down_time)
    return neutron.JSON({"availability_zones": [neutron.trim(i, q.fields) for i in items]})

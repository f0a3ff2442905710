"""/v3: the sliver of Keystone's identity API that clients need around the network API (version discovery and
project look-ups); see services/identity/identity.py."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import context, state
from cloudnet.services.identity import identity

router = APIRouter()
VERSION = "v3.14"


def _base(request: Request) -> str:
    return str(request.base_url) + "v3"


@router.get("/v3")
@router.get("/v3/")
async def version(request: Request) -> Response:
    return neutron.JSON({"version": {
        "id": VERSION, "status": "stable", "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": _base(request) + "/"}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}],
    }})  # fmt: skip


@router.get("/v3/projects")
async def list_projects(request: Request) -> Response:
    known = state(request).auth.projects()
    items = identity.list_projects(context(request), known, request.query_params.get("name"), _base(request))
    return neutron.JSON({"projects": items, "links": {"self": _base(request) + "/projects", "next": None,
                                                      "previous": None}})  # fmt: skip


@router.get("/v3/projects/{project_id}")
async def show_project(request: Request, project_id: str) -> Response:
    known = state(request).auth.projects()
    return neutron.JSON({"project": identity.get_project(context(request), project_id, known, _base(request))})

"""/v2.0/instances/{id}/metadata[/{key}]: an instance's metadata items, one key at a time; and
/v2.0/instances/{id}/config-drive: all that its guest reads from the metadata API, as Nova's config drive image.

What guests write over their SmartOS metadata socket lands here (through the host agent), and what is
written here reaches the guest with the agent's next desired state. Every answer carries
`X-Cloudnet-Revision`: a revision of the event log that includes what the answer shows, so an agent can
tell whether a desired state it holds is older than its own write.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import call, context, state
from cloudnet.metadata import config_drive
from cloudnet.services import instance_metadata

router = APIRouter()
BASE = "/v2.0/instances/{instance_id}/metadata"
REVISION_HEADER = "X-Cloudnet-Revision"
# Keys may contain '/' (vendor prefixes are free-form): the key is the rest of the path.
ITEM = BASE + "/{key:path}"
CONFIG_DRIVE = "/v2.0/instances/{instance_id}/config-drive"
ISO_TYPE = "application/x-iso9660-image"


def _revision(value: int) -> dict[str, str]:
    return {REVISION_HEADER: str(value)}


@router.get(BASE)
async def show_metadata(request: Request, instance_id: str) -> Response:
    neutron.check_id("instance", instance_id)
    view, revision = await call(instance_metadata.get_metadata, state(request).store, context(request), instance_id)
    return neutron.JSON(view, headers=_revision(revision))


@router.get(ITEM)
async def show_item(request: Request, instance_id: str, key: str) -> Response:
    neutron.check_id("instance", instance_id)
    item = await call(instance_metadata.get_metadata_item, state(request).store, context(request), instance_id, key)
    return neutron.JSON({"metadata_item": item})


@router.put(ITEM)
async def set_item(request: Request, instance_id: str, key: str) -> Response:
    neutron.check_id("instance", instance_id)
    body = await neutron.body_of(request)
    view, revision = await call(
        instance_metadata.set_metadata_item, state(request).store, context(request), instance_id, key, body
    )
    return neutron.JSON(view, headers=_revision(revision))


@router.delete(ITEM)
async def delete_item(request: Request, instance_id: str, key: str) -> Response:
    neutron.check_id("instance", instance_id)
    internal = request.query_params.get("internal", "").lower() in ("1", "true", "yes")
    revision = await call(
        instance_metadata.delete_metadata_item, state(request).store, context(request), instance_id, key, internal
    )
    return Response(status_code=204, headers=_revision(revision))


@router.get(CONFIG_DRIVE)
async def show_config_drive(request: Request, instance_id: str) -> Response:
    neutron.check_id("instance", instance_id)
    app = state(request)
    image = await call(config_drive.config_drive, app.store, context(request), app.metadata, instance_id)
    return Response(image, media_type=ISO_TYPE)

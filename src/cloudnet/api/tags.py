"""Neutron tag routes: /v2.0/{collection}/{id}/tags[/{tag}]."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import call, context, state
from cloudnet.errors import BadRequest, NotFound
from cloudnet.services import tags

router = APIRouter()
PATH = "/v2.0/{collection}/{resource_id}/tags"


def _collection(collection: str) -> str:
    if collection not in tags.TABLES:
        raise NotFound("The resource could not be found.")
    return collection


@router.get(PATH)
async def get_tags(request: Request, collection: str, resource_id: str) -> Response:
    values = await call(tags.get_all, state(request).store, context(request), _collection(collection), resource_id)
    return neutron.JSON({"tags": values})


async def _tag_list(request: Request) -> list[object]:
    body = await neutron.body_of(request)
    if not isinstance(body, dict) or not isinstance(body.get("tags"), list):
        raise BadRequest('Invalid input for tags: expected {"tags": [...]}')
    return body["tags"]  # type: ignore[no-any-return]


@router.put(PATH)
async def replace_tags(request: Request, collection: str, resource_id: str) -> Response:
    values = await _tag_list(request)
    found = await call(tags.replace, state(request).store, context(request), _collection(collection), resource_id,
                       values)  # fmt: skip
    return neutron.JSON({"tags": found})


@router.post(PATH)
async def add_tags(request: Request, collection: str, resource_id: str) -> Response:
    """Neutron's "add tags" (tag-creation's POST): to those the resource has; answers all of them."""
    values = await _tag_list(request)
    found = await call(tags.add_many, state(request).store, context(request), _collection(collection), resource_id,
                       values)  # fmt: skip
    return neutron.JSON({"tags": found}, status_code=201)


@router.delete(PATH)
async def delete_tags(request: Request, collection: str, resource_id: str) -> Response:
    await call(tags.remove, state(request).store, context(request), _collection(collection), resource_id, None)
    return Response(status_code=204)


@router.get(PATH + "/{tag}")
async def check_tag(request: Request, collection: str, resource_id: str, tag: str) -> Response:
    found = await call(tags.has, state(request).store, context(request), _collection(collection), resource_id, tag)
    if not found:
        raise NotFound(f"Tag {tag} could not be found.", type="TagNotFound")
    return Response(status_code=204)


@router.put(PATH + "/{tag}")
async def add_tag(request: Request, collection: str, resource_id: str, tag: str) -> Response:
    await call(tags.add, state(request).store, context(request), _collection(collection), resource_id, tag)
    return Response(status_code=201)


@router.delete(PATH + "/{tag}")
async def delete_tag(request: Request, collection: str, resource_id: str, tag: str) -> Response:
    await call(tags.remove, state(request).store, context(request), _collection(collection), resource_id, tag)
    return Response(status_code=204)

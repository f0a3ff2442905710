"""Neutron's HTTP conventions: query parsing, envelopes, `fields`, pagination links, error bodies."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import orjson
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.errors import BadRequest, CloudnetError, not_found
from cloudnet.services.query import ListQuery, Page

CONTROL_PARAMS = {"fields", "sort_key", "sort_dir", "limit", "marker", "page_reverse"}
# A larger limit means "everything" (and must still fit the database's LIMIT).
MAX_LIMIT = 2**31 - 2
# Deepest JSON nesting a request body may have (Neutron's deepest bodies nest 4 levels).
MAX_DEPTH = 32


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(exc: CloudnetError) -> JSON:
    body = {"NeutronError": {"type": exc.type, "message": exc.message, "detail": exc.detail}}
    headers = {}
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return JSON(body, status_code=exc.status, headers=headers)


def check_id(kind: str, ident: str) -> str:
    """A path id worth looking up: none contains a NUL character (which PostgreSQL refuses in a query)."""
    if "\x00" in ident:
        raise not_found(kind, ident)
    return ident


def _no_nul(request: Request) -> None:
    if any("\x00" in key or "\x00" in value for key, value in request.query_params.multi_items()):
        raise BadRequest("Null characters are not allowed in query parameters")


def list_query(request: Request) -> ListQuery:
    _no_nul(request)
    q = ListQuery()
    for key, value in request.query_params.multi_items():
        if key == "fields":
            q.fields.extend(f for f in value.split(",") if f)
        elif key == "sort_key":
            q.sort_keys.append(value)
        elif key == "sort_dir":
            q.sort_dirs.append(value)
        elif key == "limit":
            try:
                limit = int(value)
                if limit < 0:
                    raise ValueError
            except ValueError:
                raise BadRequest(
                    f"Bad limit request: Limit must be an integer 0 or greater and not '{value}'"
                ) from None
            q.limit = min(limit, MAX_LIMIT) or None
        elif key == "marker":
            q.marker = value
        elif key == "page_reverse":
            q.page_reverse = value.lower() == "true"  # as Neutron: anything else is false
        else:
            q.filters.setdefault(key, []).append(value)
    return q


def fields_of(request: Request) -> list[str]:
    _no_nul(request)
    return [f for v in request.query_params.getlist("fields") for f in v.split(",") if f]


def trim(item: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    if not fields:
        return item
    return {k: item[k] for k in fields if k in item}


async def body_of(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        raise BadRequest("Resource body required")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadRequest("Malformed request body") from None
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _too_deep(body):
        raise BadRequest(f"Malformed request body: nested deeper than {MAX_DEPTH} levels")
    if b"\\u0000" in raw and _has_nul(body):
        raise BadRequest("Null characters are not allowed in the request body")
    return body


def _too_deep(body: Any) -> bool:
    """Whether containers nest deeper than MAX_DEPTH (iteratively: a deep body must not recurse here)."""
    level: list[Any] = [body] if isinstance(body, dict | list) else []
    for _depth in range(MAX_DEPTH + 1):
        nested = [v for c in level for v in (c.values() if isinstance(c, dict) else c) if isinstance(v, dict | list)]
        if not nested:
            return False
        level = nested
    return True


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def unwrap(body: Any, member: str, collection: str | None = None) -> tuple[list[dict[str, Any]], bool]:
    """The resource bodies of a create request and whether it was a bulk one."""
    if not isinstance(body, dict):
        raise BadRequest("Body contains invalid data")
    if collection and collection in body:
        items = body[collection]
        if not isinstance(items, list) or not items:
            raise BadRequest(f"Invalid input for {collection}: expected a non-empty list")
        return items, True
    if member not in body:
        raise BadRequest(f"Unable to find '{member}' in request body")
    return [body[member]], False


def unwrap_one(body: Any, member: str) -> dict[str, Any]:
    if not isinstance(body, dict) or member not in body:
        raise BadRequest(f"Unable to find '{member}' in request body")
    item = body[member]
    if not isinstance(item, dict):
        raise BadRequest(f"Invalid input for {member}: expected an object")
    return item


def list_response(request: Request, collection: str, page: Page, q: ListQuery) -> JSON:
    items = [trim(i, q.fields) for i in page.items] if q.fields else page.items
    body: dict[str, Any] = {collection: items}
    links = _links(request, page, q)
    if links:
        body[f"{collection}_links"] = links
    return JSON(body)


def _links(request: Request, page: Page, q: ListQuery) -> list[dict[str, str]]:
    """Neutron's links (api_common.get_pagination_links): whenever a limit is given, `next` unless a short page
    came back going forward, `previous` unless a short page came back going backward; each href is the request's
    own query without marker/page_reverse, then the marker (when the page has items), then page_reverse=True."""
    if q.limit is None:
        return []
    items = page.items
    base = [(k, v) for k, v in request.query_params.multi_items() if k not in ("marker", "page_reverse")]
    url = str(request.url.replace(query=""))

    def href(item: dict[str, Any] | None, reverse: bool) -> str:
        params = [*base, *([("marker", item["id"])] if item else []), *([("page_reverse", "True")] if reverse else [])]
        return f"{url}?{urlencode(params)}"

    short = len(items) < q.limit
    links = []
    if not (short and not q.page_reverse):
        links.append({"rel": "next", "href": href(items[-1] if items else None, False)})
    if not (short and q.page_reverse):
        links.append({"rel": "previous", "href": href(items[0] if items else None, True)})
    return links

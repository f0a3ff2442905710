"""The few calls of cloudnet's v2.0 API the driver makes, asynchronously (it serves dockerd on an event loop)."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any

import httpx

Json = dict[str, Any]


class PluginError(Exception):
    """What the driver answers dockerd as {"Err": message}: a refusal or a failure, said in one line."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.status = status  # the API's HTTP status, when the API said no


class CloudnetApi:
    """Requests against `<url>/v2.0` with the driver's token (X-Auth-Token); every failure is a PluginError
    carrying the API's own message (a 404 for another project's object reads as not found, as to any member)."""

    def __init__(self, url: str, token: str, timeout: float = 20.0, transport: httpx.AsyncBaseTransport | None = None,
                 verify: ssl.SSLContext | bool = True) -> None:  # fmt: skip
        base = url.rstrip("/")
        base = base if base.endswith("/v2.0") else base + "/v2.0"
        self._http = httpx.AsyncClient(base_url=base, headers={"X-Auth-Token": token}, timeout=timeout,
                                       transport=transport, verify=verify)  # fmt: skip

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise PluginError(f"cloudnet API unreachable: {type(exc).__name__}") from None
        if response.status_code >= 400:
            raise PluginError(_message(response), response.status_code)
        return response

    async def get(self, collection: str, member: str, object_id: str) -> Json:
        response = await self._call("GET", f"/{collection}/{_segment(object_id)}")
        return dict(response.json()[member])

    async def find(self, collection: str, params: Sequence[tuple[str, str]]) -> list[Json]:
        response = await self._call("GET", f"/{collection}", params=list(params))
        return list(response.json()[collection.replace("-", "_")])

    async def create(self, collection: str, member: str, body: Json) -> Json:
        response = await self._call("POST", f"/{collection}", json={member: body})
        return dict(response.json()[member])

    async def delete(self, collection: str, object_id: str) -> None:
        """Delete; one that is gone already is no error (dockerd retries after a failure half-way)."""
        try:
            await self._call("DELETE", f"/{collection}/{_segment(object_id)}")
        except PluginError as exc:
            if exc.status != 404:
                raise


def _segment(object_id: str) -> str:
    """An id as one path segment: ids come from dockerd's options, so nothing that could step elsewhere."""
    if not object_id or len(object_id) > 64 or not all(c.isalnum() or c == "-" for c in object_id):
        raise PluginError(f"invalid cloudnet id {object_id[:64]!r}")
    return object_id


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"cloudnet API answered {response.status_code}"
    error = body.get("NeutronError") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:500]
    return f"cloudnet API answered {response.status_code}"

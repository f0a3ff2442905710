"""The door of every request: who is asking, before a byte of the body is read, and how much body there may be.

A raw ASGI middleware (no framework layer on the hot path): it authenticates the token first (401 before the body
is read, so an anonymous caller cannot make the server buffer or parse anything), then refuses a body whose
announced length is over the limit (413 without reading it) and counts the bytes of one that did not announce its
length (413 the moment it crosses the limit). The caller's context goes into the scope for the routes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from cloudnet.api.auth import Authenticator
from cloudnet.api.neutron import error_response
from cloudnet.errors import CloudnetError
from cloudnet.services.context import Context

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Version discovery answers anyone (keystoneauth asks before it authenticates), and so does the OpenAPI document
# (it describes the API, and holds no data); /v3/auth/* authenticate for themselves (api/keystone.py: a login has
# no token yet).
PUBLIC_PATHS = frozenset({"/", "/v2.0", "/v2.0/", "/v3", "/v3/", "/v3/auth/tokens", "/v3/auth/projects",
                          "/openapi.json", "/v2.0/openapi.json"})  # fmt: skip
# Keystone's face authenticates these for itself too, to answer Keystone's error body (api/keystone.py).
SELF_AUTHENTICATED = ("/v3/users/",)
CONTEXT_KEY = "cloudnet.context"


class PayloadTooLarge(CloudnetError):
    status = 413
    type = "RequestEntityTooLarge"

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request is too large: the body may have at most {limit} bytes.")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")  # type: ignore[no-any-return]
    return None


def context_of(scope: Scope) -> Context:
    return scope[CONTEXT_KEY]  # type: ignore[no-any-return]


class Guard:
    def __init__(self, app: ASGIApp, auth: Authenticator, max_body: int) -> None:
        self.app = app
        self.auth = auth
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            if scope["path"] not in PUBLIC_PATHS and not scope["path"].startswith(SELF_AUTHENTICATED):
                scope[CONTEXT_KEY] = self.auth.authenticate(
                    _header(scope, b"x-auth-token"), _header(scope, b"x-project-id")
                )
            length = _header(scope, b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                raise PayloadTooLarge(self.max_body)
        except CloudnetError as exc:
            response = error_response(exc)
            response.headers["Connection"] = "close"  # an unread body must not be taken for the next request
            await response(scope, receive, send)
            return
        if length is not None:  # the server delivers at most Content-Length bytes
            await self.app(scope, receive, send)
            return
        await self.app(scope, self._counted(receive), send)

    def _counted(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise PayloadTooLarge(self.max_body)
            return message

        return counted

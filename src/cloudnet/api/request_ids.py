"""Every API answer carries `X-OpenStack-Request-ID`: the client's id when well-formed (wire/request_ids.py),
else a new `req-<uuid4>`. A raw ASGI middleware, outside the guard so that refusals carry the id too: it sets the
request's context (what the log filter and the store read; api/deps.py `call` carries it to the worker threads)
and logs one line per write (a GET changes nothing, and an agent's heartbeats and reports are logged at DEBUG:
they come every few seconds from every host)."""

from __future__ import annotations

import logging
import time

from starlette.responses import Response

from cloudnet.api.guard import ASGIApp, Message, Receive, Scope, Send
from cloudnet.wire import logs, request_ids

log = logging.getLogger("cloudnet.api.requests")
_HEADER = request_ids.HEADER.encode()
_KEY = _HEADER.lower()
_QUIET_PREFIX = "/v2.0/hosts/"  # agents' own calls (their admins' calls on hosts are rare)
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


def with_id(response: Response) -> Response:
    """The answer with the request's id: for answers made outside this middleware (Starlette answers unhandled
    errors in its outermost layer)."""
    rid = request_ids.current.get()
    if rid is not None:
        response.headers[request_ids.HEADER] = rid
    return response


class RequestIds:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_ids.from_headers(scope["headers"])
        # (uvicorn runs each request in a task of its own: the id stays with this request only, error handlers
        # outside this middleware included)
        request_ids.current.set(rid)
        header = (_HEADER, rid.encode())
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = message.get("headers", ())
                if not any(k == _KEY for k, _v in headers):  # (`with_id` may have added it)
                    message["headers"] = [*headers, header]
            await send(message)

        if scope["method"] in _READS:
            await self.app(scope, receive, send_with_id)
            return
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            level = logging.DEBUG if scope["path"].startswith(_QUIET_PREFIX) else logging.INFO
            if log.isEnabledFor(level):
                log.log(level, "%s %s %d %.1f ms", scope["method"], logs.printable(scope["path"]), status,
                        (time.perf_counter() - started) * 1000)  # fmt: skip

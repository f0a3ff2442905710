"""The two candidates issue 19 measures the hand-written HTTP/1.1 server (wire/http_server.py) against, serving
the same `Application` (answer_now / answer, wire/http1 Request and Response) under the same limits:

- `serve_uvicorn`: uvicorn with httptools and uvloop running a plain ASGI callable (no framework);
- `serve_h11`: an asyncio.Protocol driving h11 (pure Python), one request at a time per connection.

Both are as lean as their library allows (no access log, no middleware), so what they cost is the library's
floor. The limits the hand-written server enforces are added where the library offers no setting: the body
limit (413), head limit (431, h11's max_incomplete_event_size), the idle timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from typing import Any, cast

import h11
import uvicorn

from cloudnet.wire.http1 import MAX_HEAD, Request, Response, plain
from cloudnet.wire.http_server import MAX_BODY, Application

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# -- uvicorn + httptools, a plain ASGI callable ---------------------------------------------------------


class AsgiAdapter:
    """The application as a plain ASGI callable."""

    def __init__(self, app: Application, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup
            self.app.start()
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            await self.app.stop()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if sum(len(n) + len(v) + 4 for n, v in scope["headers"]) > MAX_HEAD:  # uvicorn has no head limit
            await _asgi_send(send, plain(431, "Request head too large."), close=True)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and int(length) > self.max_body:
            await _asgi_send(send, plain(413, "Request body too large."), close=True)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body:  # uvicorn has no body limit of its own
                await _asgi_send(send, plain(413, "Request body too large."), close=True)
                return
            chunks.append(body)
            more = message.get("more_body", False)
        target = scope["raw_path"].decode("latin-1")
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("latin-1")
        request = Request(scope["method"], target, "HTTP/" + scope["http_version"], None, b"".join(chunks),
                          scope["headers"], scope.get("client"))  # fmt: skip
        response = self.app.answer_now(request) or await self.app.answer(request)
        await _asgi_send(send, response, close=False)


async def _asgi_send(send: Send, response: Response, close: bool) -> None:
    headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in response.headers]
    headers.append((b"content-length", str(len(response.body)).encode()))  # else uvicorn chunks the answer
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})


async def serve_uvicorn(app: Application, sock: socket.socket, idle_timeout: float) -> None:
    # No framework and no middleware: uvicorn's X-Forwarded-For rewriting (proxy_headers) is off too.
    config = uvicorn.Config(AsgiAdapter(app), http="httptools", loop="none", lifespan="on", access_log=False,
                            proxy_headers=False, log_level="warning", timeout_keep_alive=int(max(1, idle_timeout)),
                            backlog=1024)  # fmt: skip
    await uvicorn.Server(config).serve(sockets=[sock])


# -- h11 ------------------------------------------------------------------------------------------------


class _H11Connection(asyncio.Protocol):
    """One connection: h11 parses, one request is answered at a time (reading pauses meanwhile)."""

    def __init__(self, app: Application, idle_timeout: float, max_body: int) -> None:
        self.app = app
        self.idle_timeout = idle_timeout
        self.max_body = max_body
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.busy = False
        self.request: h11.Request | None = None
        self.body: list[bytes] = []
        self.size = 0
        self.loop = asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = transport.get_extra_info("peername")
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.timer is not None:
            self.timer.cancel()

    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(self.idle_timeout, self._expire)

    def _expire(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def pause_writing(self) -> None:  # the client does not read its answers: read no more requests
        self.busy = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.busy = False
        if self.transport is not None:
            self.transport.resume_reading()
            self._drain()

    def data_received(self, data: bytes) -> None:
        self._arm()
        self.conn.receive_data(data)
        self._drain()

    def eof_received(self) -> bool | None:
        self.conn.receive_data(b"")
        self._drain()
        return True

    def _drain(self) -> None:
        while not self.busy and self.transport is not None:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._refuse(exc.error_status_hint, f"Bad request: {exc}.")
                return
            if event is h11.NEED_DATA:
                if len(self.conn.trailing_data[0]) > MAX_HEAD:  # h11 checks only once a head is complete
                    self._refuse(431, "Request head too large.")
                return
            if isinstance(event, h11.Request):
                self.request, self.body, self.size = event, [], 0
                if sum(len(n) + len(v) + 4 for n, v in event.headers) > MAX_HEAD:  # a head in one read
                    self._refuse(431, "Request head too large.")
                    return
                length = dict(event.headers).get(b"content-length")
                if length is not None and int(length) > self.max_body:
                    self._refuse(413, "Request body too large.")
                    return
            elif isinstance(event, h11.Data):
                self.size += len(event.data)
                if self.size > self.max_body:
                    self._refuse(413, "Request body too large.")
                    return
                self.body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self._answer()
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                if event is h11.PAUSED and self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
                    self.conn.start_next_cycle()
                    continue
                if isinstance(event, h11.ConnectionClosed):
                    self.transport.close()
                return

    def _answer(self) -> None:
        ev = self.request
        assert ev is not None
        request = Request(ev.method.decode("ascii"), ev.target.decode("latin-1"), "HTTP/" + ev.http_version.decode(),
                          None, b"".join(self.body), list(ev.headers), self.peer)  # fmt: skip
        response = self.app.answer_now(request)
        if response is not None:
            self._send(response)
            return
        self.busy = True
        assert self.transport is not None
        self.transport.pause_reading()
        self.loop.create_task(self._later(request))

    async def _later(self, request: Request) -> None:
        response = await self.app.answer(request)
        self.busy = False
        if self.transport is None:
            return
        self.transport.resume_reading()
        self._send(response)
        self._drain()

    def _send(self, response: Response) -> None:
        assert self.transport is not None
        head = h11.Response(status_code=response.status, headers=[*response.headers,
                            ("Content-Length", str(len(response.body)))])  # fmt: skip
        out = self.conn.send(head) + self.conn.send(h11.Data(data=response.body)) + self.conn.send(h11.EndOfMessage())
        self.transport.write(out)
        if self.conn.our_state is h11.MUST_CLOSE:
            self.transport.close()
        elif self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()

    def _refuse(self, status: int, text: str) -> None:
        assert self.transport is not None
        response = plain(status, text)
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            head = h11.Response(status_code=status, headers=[*response.headers, ("Connection", "close"),
                                ("Content-Length", str(len(response.body)))])  # fmt: skip
            with contextlib.suppress(h11.LocalProtocolError):
                self.transport.write(self.conn.send(head) + self.conn.send(h11.Data(data=response.body)))
        self.transport.close()


async def serve_h11(app: Application, sock: socket.socket, idle_timeout: float) -> None:
    app.start()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _H11Connection(app, idle_timeout, MAX_BODY), sock=sock, backlog=1024)
    try:
        await asyncio.Event().wait()  # until the process is stopped
    finally:
        server.close()
        await app.stop()

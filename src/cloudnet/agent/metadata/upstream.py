"""The metadata proxy's side towards the metadata API: a few kept-alive connections, pipelined.

Each connection is an asyncio.Protocol with llhttp (httptools) reading the answers: stream readers and a
Python response reader cost the proxy more than everything else it does per request. Requests are pipelined:
those made in one turn of the event loop go out in one write on one connection, and their answers come back
in order, in as few reads. The proxy and the API usually share a core, and one write per request (one wake-up
of the API, and a switch back and forth, per request) was what a proxied request cost most.

Answers come back in order, so an answer that needs the API's database (a view not cached yet: the first
question of a booting guest) holds up the requests behind it on its connection. A connection takes at most
MAX_DEPTH requests at a time, and none while its oldest one has waited longer than SLOW: new requests then go
to another connection, opened if need be (up to MAX_CONNECTIONS), so a boot storm's loads run side by side.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any, cast

import httptools

from cloudnet.wire.http1 import MAX_BODY, Response

CONNECT_TIMEOUT = 5.0
ANSWER_TIMEOUT = 60.0  # neutron's proxy waits 60 s for nova
MAX_CONNECTIONS = 16
MAX_DEPTH = 8  # requests in flight on one connection
SLOW = 0.003  # seconds: a connection whose oldest request has waited longer takes no more for now
# Header lines as received -> decoded (names lower-cased): the API's answers have a handful of different heads.
_DECODED: dict[tuple[tuple[bytes, bytes], ...], list[tuple[str, str]]] = {}
_ID_NAME = b"x-openstack-request-id"  # the metadata API's answers carry it first (wire/http1.with_first_header)


class UpstreamUnavailable(Exception):
    pass


class UpstreamUnreachable(UpstreamUnavailable):
    """No connection could be made: nothing was sent, so any request may go to another server."""


class _Lost(Exception):
    """The connection ended before the whole answer; `started` tells whether any of it had arrived."""

    def __init__(self, reason: str, started: bool) -> None:
        super().__init__(reason)
        self.started = started


class _Connection(asyncio.Protocol):
    """One connection to the API: requests go out in order, their answers are handed back in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_body: int) -> None:
        self._loop = loop
        self._max_body = max_body
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []  # requests to write at the end of this turn of the loop
        # Requests sent and not answered yet: their waiters, and when each was sent.
        self.waiting: deque[tuple[asyncio.Future[Response], float]] = deque()
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._size = 0
        self._started = False  # bytes of the first waiting answer have arrived
        self._framed = False  # that answer has a Content-Length or is chunked
        self.closed = False  # no new requests: closed, closing, or the API said it will close
        self.used = False  # has carried a request before
        self.expired = False  # closed by the sweep: an answer took too long

    # -- asyncio.Protocol -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiting and self._started and not self._framed and self._parser.get_status_code():
            self._complete(keep_alive=False)  # no framing: the answer ran to the end of the connection
        reason, started = str(exc or "connection closed"), self._started
        while self.waiting:
            waiter, _since = self.waiting.popleft()
            if not waiter.done():
                waiter.set_exception(_Lost(reason, started))
            started = False  # the answers behind the first had not begun

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, ValueError) as exc:
            self._fail(f"malformed answer from the metadata API: {exc}")

    def eof_received(self) -> bool | None:
        return None  # close: answers still due then end as connection_lost decides

    # -- httptools callbacks --------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._headers, self._body, self._size = [], [], 0
        self._started, self._framed = True, False

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        if len(name) in (14, 17) and name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._max_body:
            raise ValueError("answer body too large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete(self._parser.should_keep_alive())

    # -- the exchanges --------------------------------------------------------------------------------

    def _complete(self, keep_alive: bool) -> None:
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        raw = self._headers
        if raw and len(raw[0][0]) == len(_ID_NAME) and raw[0][0].lower() == _ID_NAME:
            raw = raw[1:]  # the request's id (the relay adds its own): the other lines key the table
        lines = tuple(raw)
        headers = _DECODED.get(lines)
        if headers is None:
            headers = [(n.decode("ascii").lower(), v.decode("latin-1").strip(" \t")) for n, v in lines]
            if len(_DECODED) >= 256:
                _DECODED.clear()
            _DECODED[lines] = headers  # shared by the answers with these lines: not to be changed
        response = Response(self._parser.get_status_code(), headers, body, keep_alive and self._framed)
        self._started = False
        if not response.keep_alive:
            self.closed = True  # the API ends the connection after this answer: nothing more is sent on it
        if self.waiting:
            waiter, _since = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(response)
        else:
            self._fail("an answer the proxy did not ask for")

    def _fail(self, reason: str) -> None:
        while self.waiting:
            waiter, _since = self.waiting.popleft()
            if not waiter.done():
                waiter.set_exception(UpstreamUnavailable(reason))
        self.close()

    def send(self, data: bytes) -> asyncio.Future[Response]:
        """Queue a request; it goes out with the others of this turn of the loop. Returns its answer's waiter."""
        waiter = self._loop.create_future()
        if self.closed and (self._transport is None or self._transport.is_closing()):
            waiter.set_exception(_Lost("connection closed", False))  # nothing will answer it
            return waiter
        self.waiting.append((waiter, self._loop.time()))
        self.used = True
        if not self._out:
            self._loop.call_soon(self._flush)
        self._out.append(data)
        return waiter

    def _flush(self) -> None:
        out, self._out = self._out, []
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(out[0] if len(out) == 1 else b"".join(out))

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


def _retrieved(task: asyncio.Task[_Connection]) -> None:
    if not task.cancelled():
        task.exception()  # a failure is reported to the requests that waited: not "never retrieved"


class Upstream:
    """The metadata API (`http://host:port`, `https://host:port` or `unix:/path`), over a few kept-alive, pipelined
    connections."""

    def __init__(self, url: str, answer_timeout: float = ANSWER_TIMEOUT, max_body: int = MAX_BODY,
                 tls: ssl.SSLContext | None = None) -> None:  # fmt: skip
        self.url = url
        self.answer_timeout = answer_timeout
        self.max_body = max_body
        self._tls: ssl.SSLContext | None = None
        if url.startswith("unix:"):
            self._path: str | None = url[len("unix:") :]
            self._addr: tuple[str, int] | None = None
        else:
            scheme, _sep, hostport = url.rstrip("/").rpartition("://")
            host, _sep, port = hostport.rpartition(":")
            if scheme not in ("http", "https", "") or not host or not port.isdigit():
                raise ValueError(f"metadata API address {url!r} must be http(s)://HOST:PORT or unix:/PATH")
            if scheme == "https":
                if tls is None:
                    raise ValueError(f"metadata API {url}: https needs this host's certificate (join with a token)")
                self._tls = tls  # the API verified against the cloud's CA, this host's certificate presented
            self._path, self._addr = None, (host.strip("[]"), int(port))
        self._connections: list[_Connection] = []
        self._opening: asyncio.Task[_Connection] | None = None  # the connection being opened, if any

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        def factory() -> _Connection:
            return _Connection(loop, self.max_body)

        try:
            if self._path is not None:
                opening: Any = loop.create_unix_connection(factory, self._path)
            else:
                assert self._addr is not None
                opening = loop.create_connection(
                    factory, *self._addr, ssl=self._tls, server_hostname=self._addr[0] if self._tls else None
                )
            _transport, connection = await asyncio.wait_for(opening, CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:  # (ssl.SSLError is an OSError: a refused handshake too)
            raise UpstreamUnreachable(str(exc) or type(exc).__name__) from None
        connection = cast(_Connection, connection)
        self._connections.append(connection)
        return connection

    def _choose(self, now: float) -> _Connection | None:
        """The first open connection with room (so that requests of one turn share a write), else None."""
        best = None
        for connection in list(self._connections):
            if connection.closed:
                self._connections.remove(connection)
                continue
            waiting = connection.waiting
            if not waiting or (len(waiting) < MAX_DEPTH and now - waiting[0][1] < SLOW):
                return connection
            if best is None or len(waiting) < len(best.waiting):
                best = connection
        if best is not None and len(self._connections) >= MAX_CONNECTIONS:
            return best  # all full, and no more allowed: the least busy one
        return None

    async def exchange(self, data: bytes, retry: bool = True) -> Response:
        """Send one request (head and body), return the whole answer. `retry`: the request may be sent again
        on a fresh connection if the API closed a used one before answering (not for a write such as a
        password POST: a pipelined request may have been carried out before the connection was lost)."""
        loop = asyncio.get_running_loop()
        for _attempt in range(2):
            connection = self._choose(loop.time())
            opened = 0
            while connection is None:
                # Requests that find no room meanwhile wait for the same new connection, not one each; then
                # they choose again, so that they spread over it and others as they would have.
                opening = self._opening
                if opening is None or opening.done():
                    opening = self._opening = loop.create_task(self._connect(loop))
                    opening.add_done_callback(_retrieved)
                new = await asyncio.shield(opening)
                opened += 1
                connection = self._choose(loop.time()) or (new if opened >= MAX_CONNECTIONS else None)
            reused = connection.used
            try:
                return await connection.send(data)
            except _Lost as exc:
                connection.close()
                if connection.expired:
                    raise UpstreamUnavailable(f"no answer within {self.answer_timeout:g} s") from None
                if retry and reused and not exc.started:
                    continue  # the API closed the connection before answering this one: once more on a fresh one
                raise UpstreamUnavailable(str(exc)) from None
        raise UpstreamUnavailable("connection closed")

    def sweep(self, now: float) -> None:
        """Give up on answers that take longer than the answer timeout: the waiting requests get a 503."""
        for connection in list(self._connections):
            if connection.waiting and now - connection.waiting[0][1] > self.answer_timeout:
                connection.expired = True
                connection.close()

    async def close(self) -> None:
        if self._opening is not None:
            self._opening.cancel()
        connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()

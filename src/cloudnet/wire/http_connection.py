"""One client connection of the HTTP/1.1 server (http_server.py): parses requests as they arrive (httptools,
llhttp) and writes their answers in order, with the guarantees listed in http_server's docstring."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, cast

import httptools

from cloudnet.wire.http1 import HttpError, Request, Response, plain, render_response

log = logging.getLogger(__name__)

MAX_QUEUED = 128  # requests pipelined ahead of their answers
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_HELD_BACK = 16 * 1024  # answers larger than this are not held back for one write with others
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, with no time: close() resets the connection
_INTERNAL_ERROR = HttpError(500, "An unknown error has occurred. Please try your request again.")
_VERSIONS = {"1.1": "HTTP/1.1", "1.0": "HTTP/1.0"}
_FRAMING_LENGTHS = frozenset({len(b"content-length"), len(b"expect")})  # other names are passed over at a glance
_METHODS = {m.encode(): m for m in ("GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH")}


class Application(Protocol):
    """What the server serves. `answer_now` answers without waiting, or returns None to have `answer` (a
    coroutine) asked instead; each is asked once per request; neither raises for a bad request, they answer it.
    The request carries its header lines as received (`raw_headers`) and the client's address (`peer`)."""

    def answer_now(self, request: Request) -> Response | None: ...

    async def answer(self, request: Request) -> Response: ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...


class Gate(Protocol):
    """Admission of connections (optional): `admit` is asked when a client connects, with its address
    (`peername`), and answers None to serve it or the refusal to send before closing; `release` is told when
    any connection it was asked about, admitted or not, is gone."""

    def admit(self, peer: Any) -> Response | None: ...

    def release(self, peer: Any) -> None: ...


class _Closed(Exception):
    """Raised from a parser callback to stop parsing: the connection is closing."""


def _error_bytes(error: HttpError) -> bytes:
    response = plain(error.status, error.reason)
    return render_response(response.status, response.headers, response.body, keep_alive=False)


class Serving(Protocol):
    """What a connection needs of its server (http_server.HttpServer)."""

    app: Application
    gate: Gate | None
    # Why a client certificate (DER; None: none) may not be served now (revoked, unknown), or None: asked when a
    # TLS connection is made and again by the server's sweep.
    certificates: Callable[[bytes | None], str | None] | None
    max_head: int
    max_body: int
    now: float  # the loop's clock, as of the server's last sweep
    connections: set[Connection]

    def track(self, task: asyncio.Task[None]) -> None: ...


class Connection(asyncio.Protocol):
    """One client connection: parses requests as they arrive and writes their answers in order."""

    __slots__ = (
        "_body", "_body_size", "_busy", "_continue_due", "_expect", "_failure", "_head_bytes", "_head_size",
        "_headers", "_in_head", "_in_message", "_keep_alive", "_last", "_max_body", "_max_head", "_out", "_parser",
        "_peer", "_queue", "_reading_paused", "_server", "_stopped", "_transport", "_url", "_version",
        "_writing_paused", "peer_cert", "waiting_since",
    )  # fmt: skip

    def __init__(self, server: Serving) -> None:
        self._server = server
        self._max_head, self._max_body = server.max_head, server.max_body
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._peer: Any = None
        self._out: list[bytes] | None = None  # answers held back while a read is parsed
        # The request being parsed.
        self._url = b""
        self._version = "HTTP/1.1"
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._body_size = 0
        self._head_size = 0  # bytes of the head parsed so far (request line and headers)
        self._head_bytes = 0  # bytes received since the read in which an unfinished head began
        self._in_head = self._in_message = self._expect = self._continue_due = False
        self._keep_alive = True
        # Requests not answered yet, in order (with whether to keep the connection after each). Empty while
        # answers go out as requests arrive; filled while an answer is worked out asynchronously (`_busy`, for
        # the first one) or the client is not reading its answers (`_writing_paused`).
        # (request, keep the connection after it, `answer_now` already said None)
        self._queue: deque[tuple[Request, bool, bool]] = deque()
        self._busy = False
        self._failure: HttpError | None = None  # to answer once the queue is done
        self._stopped = False  # nothing more is read: an error, an upgrade, the end of the input, a close
        self._last = False  # the server is stopping: the next answer is the last
        self._reading_paused = self._writing_paused = False
        # Since when the connection has been waiting for the client (a request, or reading its answers); None
        # while the server is busy answering. The server's sweep disconnects clients that keep it waiting.
        self.waiting_since: float | None = server.now
        self.peer_cert: bytes | None = None  # the client's certificate (DER), on TLS

    # -- asyncio.Protocol -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not inherit asyncio's
        self._server.connections.add(self)
        self._peer = peer = transport.get_extra_info("peername")
        gate = self._server.gate
        if gate is not None:
            refusal = gate.admit(peer)
            if refusal is not None:
                self._stopped = True
                self._transport.write(render_response(refusal.status, refusal.headers, refusal.body, False))
                self._transport.close()
        check = self._server.certificates
        if check is not None and not self._stopped:
            ssl_object = transport.get_extra_info("ssl_object")
            self.peer_cert = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            why = check(self.peer_cert)
            if why is not None:
                log.warning("refused a connection from %s: %s", peer, why)
                self.abort()  # no answer: a relay sees a lost connection and tells its guest to retry later

    def connection_lost(self, exc: Exception | None) -> None:
        self._stopped = True
        self._queue.clear()
        self._server.connections.discard(self)
        gate = self._server.gate
        if gate is not None:
            gate.release(self._peer)

    def data_received(self, data: bytes) -> None:
        if self._stopped:
            return
        if self._in_head:
            self._head_bytes += len(data)
        # Answers to the requests of this read go out in one write (a pipelining client, such as the agents'
        # proxy, sends many at once; one write each would wake it once each).
        self._out = []
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, HttpError):
                self._fail(cause)
            elif not isinstance(cause, _Closed):
                log.error("metadata HTTP server: request handling failed", exc_info=cause)
                self._fail(_INTERNAL_ERROR)
        except httptools.HttpParserUpgrade:
            self._fail(None)  # the request was answered; what follows it is another protocol
        except httptools.HttpParserError as exc:
            self._fail(HttpError(400, f"Bad request: {exc}."))
        else:
            if self._in_head and self._head_bytes > self._max_head:
                self._fail(HttpError(431, "Request head too large."))
        finally:
            self._flush()
            self._out = None

    def _flush(self) -> None:
        """Write the answers held back during a read (before anything else is written or the end)."""
        out = self._out
        if out:
            transport = self._transport
            if transport is not None and not transport.is_closing():
                transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()

    def eof_received(self) -> bool | None:
        # Reading pauses while answers are due, so the end of the input is normally seen after them.
        if not self._queue:
            return None  # the transport closes itself
        self._stopped = True  # half-closed after its last requests: answer them, then close
        return True

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._pump()

    # -- httptools callbacks --------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._body = []
        self._body_size = self._head_size = self._head_bytes = 0
        self._in_head = self._in_message = True
        self._expect = self._continue_due = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)
        if self._head_size > self._max_head:
            raise HttpError(431, "Request head too large.")

    def on_header(self, name: bytes, value: bytes) -> None:
        size = self._head_size = self._head_size + len(name) + len(value) + 4
        if size > self._max_head:
            raise HttpError(431, "Request head too large.")
        # Kept as received (Request decodes them when asked): llhttp admits only token characters in names,
        # and drops a value's leading white space, not trailing.
        self._headers.append((name, value))
        if len(name) in _FRAMING_LENGTHS:
            key = name.lower()
            if key == b"content-length":
                if int(value) > self._max_body:  # llhttp has checked that it is a number
                    raise HttpError(413, "Request body too large.")
            elif key == b"expect":
                self._expect = value.strip(b" \t").lower() == b"100-continue"

    def on_headers_complete(self) -> None:
        self._in_head = False
        version = _VERSIONS.get(self._parser.get_http_version())
        if version is None:
            raise HttpError(505, "HTTP version not supported.")
        self._version = version
        self._keep_alive = self._parser.should_keep_alive()
        if self._expect and self._transport is not None:
            if self._queue:
                self._continue_due = True  # after the answers still to come (see `_pump`)
            else:
                self._flush()
                self._transport.write(_CONTINUE)  # no earlier answer is still to come, so it may go out now

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._max_body:  # a chunked body has no length to check beforehand
            raise HttpError(413, "Request body too large.")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._in_message = self._continue_due = False
        if self._stopped:
            raise _Closed
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        method = self._parser.get_method()
        request = Request(_METHODS.get(method) or method.decode("ascii"), self._url.decode("latin-1"), self._version,
                          None, body, self._headers, self._peer)  # fmt: skip
        asked = False
        if not (self._queue or self._busy or self._writing_paused):
            response = self._server.app.answer_now(request)
            if response is not None:  # the usual case: answered at once
                self._send(request, response, self._keep_alive)
                if self._stopped:
                    raise _Closed
                return
            asked = True  # not asked again: an application may count what it is asked (a rate limit)
        self._queue.append((request, self._keep_alive, asked))
        if len(self._queue) > MAX_QUEUED:
            # Pipelined far ahead of its answers: answer those, then close (the client sends the rest again).
            self._fail(None)
            raise _Closed
        self._pump()

    # -- answering ------------------------------------------------------------------------------------

    def _send(self, request: Request, response: Response, keep_alive: bool) -> None:
        transport = self._transport
        assert transport is not None
        keep_alive = keep_alive and response.keep_alive and not self._last
        data = response.wire  # rendered ahead (a cached answer)
        if data is None or not keep_alive or request.method == "HEAD":
            head_length = len(response.body) if request.method == "HEAD" else None
            data = render_response(response.status, response.headers, response.body, keep_alive, head_length)
        out = self._out
        if out is None:
            transport.write(data)
        else:
            out.append(data)  # held back until the end of the read
            if len(data) > _HELD_BACK or len(out) > MAX_QUEUED // 4:
                self._flush()  # a large answer goes now: a client that does not read is then paused at once
        self.waiting_since = self._server.now
        if not keep_alive:
            self._stopped = True
            self._queue.clear()
            self._flush()
            transport.close()

    def _pump(self) -> None:
        """Answer queued requests in order while the client reads them; the first one that needs the
        application's coroutine is answered in a task, which pumps again when done."""
        app = self._server.app
        while self._queue and not self._busy and not self._writing_paused:
            request, keep_alive, asked = self._queue[0]
            response = None if asked else app.answer_now(request)
            if response is None:
                self._busy = True
                self.waiting_since = None
                self._server.track(asyncio.get_running_loop().create_task(self._answer_later(request, keep_alive)))
                break
            self._queue.popleft()
            self._send(request, response, keep_alive)
        if self._queue or self._busy:
            self._update_reading()  # no more requests until these are answered
        elif self._continue_due and self._transport is not None:
            self._continue_due = False
            self._transport.write(_CONTINUE)  # the request read meanwhile may now send its body
            self._update_reading()
        elif self._stopped:
            self._close(self._failure)
        else:
            self._update_reading()

    async def _answer_later(self, request: Request, keep_alive: bool) -> None:
        try:
            response = await self._server.app.answer(request)
        except Exception:
            log.exception("metadata HTTP server: request handling failed")
            self._queue.clear()
            self._busy = False
            self._close(_INTERNAL_ERROR)
            return
        self._busy = False
        if not self._queue:
            return  # the connection was lost meanwhile
        self._queue.popleft()
        self._send(request, response, keep_alive)
        self._pump()

    def _fail(self, error: HttpError | None) -> None:
        """Read no more; answer `error` (if any) after the answers still due, and close."""
        self._stopped = True
        if self._queue or self._busy:
            self._failure = error
            self._update_reading()
        else:
            self._close(error)

    def _close(self, error: HttpError | None = None) -> None:
        self._stopped = True
        self._flush()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if error is None or not transport.can_write_eof():
            if error is not None:
                transport.write(_error_bytes(error))
            transport.close()
            return
        # A lingering close: the answer, then our end of the stream; what the client is still sending (the
        # rest of an oversized head or body) is read and dropped until it closes too, or the sweep ends the
        # wait. Closing with unread input would reset the connection, and could destroy the answer in flight.
        transport.write(_error_bytes(error))
        transport.write_eof()
        self.waiting_since = self._server.now
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or (self._stopped and not (self._queue or self._busy)):
            return  # (a stopped connection with nothing left to answer is closing, or lingering)
        pause = len(self._queue) > 1 or self._writing_paused or self._stopped
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    # -- the server's side ----------------------------------------------------------------------------

    def finish(self) -> None:
        """The server is stopping: close now if idle, else after the answer to the request in progress."""
        self._last = True
        if not self._queue and not self._busy and not self._in_message:
            self._close()

    def expire(self) -> None:
        """The client kept the server waiting too long: an idle one is closed, any other dropped."""
        transport = self._transport
        if transport is None or self._in_message or self._writing_paused or transport.get_write_buffer_size():
            self.abort()
        else:
            self._close()

    def abort(self) -> None:
        """Drop the connection with a reset: what the kernel still holds for the client is freed at once,
        rather than trickling out to a client that may never read it."""
        self._stopped = True
        self._queue.clear()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        transport.abort()

"""A lean HTTP/1.1 server for the metadata API: asyncio.Protocol, httptools (llhttp) and one event loop.

Every guest boot asks dozens of questions and a boot storm multiplies them. Here a request costs a parse in C,
one `Request` and one call into the application, which answers from memory (`answer_now`) or, when it needs the
database, in a task (`answer`). Measured against the alternatives (issue 19, bench/http_servers.py): uvicorn
with httptools running a plain ASGI callable costs 1.6-2.9x the CPU per metadata answer, h11 2.5-5x (their p99
was 1.2-1.9x this server's, short of the 2x the issue asked for); but neither refuses all the hostile input this
server does (uvicorn reads an endless head and keeps a client that never finishes its head; h11 takes bare-LF
line ends and any HTTP version), and an ASGI application cannot refuse a connection (the proxy's per-source
cap). The request and response shapes, the size limits and the response rendering are the ones the agent's
proxy uses (wire/http1.py).

What it guarantees on a connection:
- answers go out in request order, pipelined requests included: while one request waits for an asynchronous
  answer, later ones queue behind it and the connection stops reading (from the second one on: pausing and
  resuming costs two system calls, which a client asking one question at a time need not pay);
- HTTP/1.0 and `Connection: close` are honoured; `Expect: 100-continue` is answered before the body is read;
- a malformed request is answered 400 (an oversized head 431, an oversized body 413) and the connection closed;
- a client that leaves a request incomplete, idles between requests or stops reading its answers for longer
  than `idle_timeout` is disconnected, and one that does not read is not read from, so none pins memory;
- `stop()` (safe from a signal handler or another thread) stops accepting, closes idle connections, lets
  answers in progress finish within `grace` seconds, and then returns from `serve()`.

This module is the server (listening, the sweep of slow clients, stopping); one connection is
http_connection.Connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable

from cloudnet.wire.http1 import MAX_HEAD
from cloudnet.wire.http_connection import Application, Connection, Gate

__all__ = ["Application", "Gate", "HttpServer"]

MAX_BODY = 64 * 1024  # the metadata API takes one body, a password of at most 1020 bytes
IDLE_TIMEOUT = 30.0
GRACE = 5.0
BACKLOG = 1024  # a boot storm opens many connections at once


class HttpServer:
    """Serves an `Application` on a listening socket; `connections` are the open ones."""

    def __init__(
        self,
        app: Application,
        *,
        idle_timeout: float = IDLE_TIMEOUT,
        grace: float = GRACE,
        max_head: int = MAX_HEAD,
        max_body: int = MAX_BODY,
        gate: Gate | None = None,
        certificates: Callable[[bytes | None], str | None] | None = None,
    ) -> None:
        self.app = app
        self.gate = gate
        self.certificates = certificates  # (see http_connection.Serving)
        self.idle_timeout = idle_timeout
        self.grace = grace
        self.max_head = max_head
        self.max_body = max_body
        self.now = 0.0  # the loop's clock, as of the last sweep: connections stamp their waits with it
        self.connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # answers in progress
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_requested = False
        self._serving = False

    @property
    def serving(self) -> bool:
        """Accepting connections (set once `serve()` listens, cleared when it stops)."""
        return self._serving

    def stop(self) -> None:
        """Ask `serve()` to finish; callable from any thread and from a signal handler."""
        self._stop_requested = True
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed: nothing is serving
                self._loop.call_soon_threadsafe(self._stopping.set)

    async def serve(self, sock: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        """Serve connections on the listening socket (TCP or Unix; over TLS with `tls`) until `stop()`."""
        loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._loop = loop
        self.now = loop.time()
        self.app.start()
        listener: asyncio.Server | None = None
        sweeper = loop.create_task(self._sweep())
        try:
            listener = await loop.create_server(lambda: Connection(self), sock=sock, backlog=BACKLOG, ssl=tls)
            self._serving = True
            if not self._stop_requested:
                await self._stopping.wait()
        finally:
            self._serving = False
            if listener is not None:
                listener.close()
            await self._close_connections()
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            await self.app.stop()

    def track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _close_connections(self) -> None:
        for connection in list(self.connections):
            connection.finish()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace
        while (self.connections or self._tasks) and loop.time() < deadline:
            await asyncio.sleep(0.01)  # answers still in progress (a database read, a password write)
        for connection in list(self.connections):
            connection.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _sweep(self) -> None:
        """Disconnect clients that kept the server waiting too long; one timer for all, not one per request."""
        loop = asyncio.get_running_loop()
        interval = min(1.0, self.idle_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            self.now = now = loop.time()
            check = self.certificates
            for connection in list(self.connections):
                since = connection.waiting_since
                if since is not None and now - since > self.idle_timeout:
                    connection.expire()
                elif check is not None and connection.peer_cert is not None and check(connection.peer_cert):
                    connection.abort()  # its certificate was revoked since: its connections go too

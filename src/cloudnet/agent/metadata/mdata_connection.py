"""One guest connection to an instance's SmartOS metadata socket: lines in, replies out, in order.

A write (PUT, DELETE) goes to the API and pauses the lines behind it; a guest that does not read its replies
is not read from; a connection idle for `idle_timeout` is closed; an instance has at most `max_connections`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from cloudnet.agent.client import InstanceMetadata
from cloudnet.agent.metadata.keyspace import KeySpace
from cloudnet.wire.mdata_protocol import LineSplitter

log = logging.getLogger("cloudnet.mdata")

# Lines a connection may queue behind a slow PUT before we stop reading from it.
MAX_QUEUED_LINES = 256
# The reply to one line: bytes now, None (dropped), or a coroutine function for a write.
Answer = bytes | Callable[[], Awaitable[bytes]] | None


@dataclass
class Bucket:
    """Token bucket for a guest's writes: each one becomes a store write and an event every agent follows."""

    rate: float  # tokens per second
    burst: float
    tokens: float
    stamp: float = 0.0

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


@dataclass
class Instance:
    """One served instance: its key space, its socket, its connections (loop thread only)."""

    id: str
    base: KeySpace  # from the latest desired state
    keys: KeySpace  # what is served: `base`, or our own write if the desired state predates it
    writes: Bucket
    pending: InstanceMetadata | None = None
    server: asyncio.AbstractServer | None = None
    ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket file we listen on
    vm: bool = False  # served on a VM's serial port (mdata_serial), not a zone socket
    stream: Connection | None = None  # a VM's: the connection that is its serial line now (mdata_serial)
    yielded: bool = False  # another live service took the path over: leave it alone while it listens
    connections: set[Connection] = field(default_factory=set)
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    dropped: int = 0  # malformed or spoofed frames dropped (for logs and tests)


class Answerer(Protocol):
    """What a connection asks of the service it belongs to."""

    max_connections: int
    max_line: int
    idle_timeout: float

    def answer(self, inst: Instance, line: bytes) -> Answer: ...


class Connection(asyncio.Protocol):
    """One guest connection: lines in, replies out, in order; a write pauses the lines behind it."""

    closes_when_idle = True  # a serial stream (mdata_serial) is a VMM's, held for the VM's life

    def __init__(self, service: Answerer, inst: Instance) -> None:
        self.service = service
        self.inst = inst
        self.lines = LineSplitter(service.max_line)
        self.queue: list[bytes] = []
        self.busy = False
        self.paused = False
        self.transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._active = self._loop.time()  # last request line (or reply) on this connection
        self._idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        if not self.admit():
            self.transport.abort()
            return
        self.inst.connections.add(self)
        if self.closes_when_idle:
            self._idle = self._loop.call_later(self.service.idle_timeout, self._check_idle)

    def admit(self) -> bool:
        """Whether this new connection may join the instance's others."""
        if len(self.inst.connections) >= self.service.max_connections:
            log.warning("instance %s: too many metadata connections; refusing one", self.inst.id)
            return False
        return True

    def answer(self, line: bytes) -> Answer:
        return self.service.answer(self.inst, line)

    def connection_lost(self, exc: Exception | None) -> None:
        self.inst.connections.discard(self)
        self.transport = None
        if self._idle is not None:
            self._idle.cancel()

    def _check_idle(self) -> None:
        """Close a connection that sent nothing for `idle_timeout` (a guest holding its connections open would
        keep them from the others it may have); a write still in flight is not idleness."""
        left = self._active + self.service.idle_timeout - self._loop.time()
        if self.transport is None:
            return
        if left > 0 or self.busy:
            self._idle = self._loop.call_later(max(left, 1.0), self._check_idle)
            return
        log.debug("instance %s: closing an idle metadata connection", self.inst.id)
        self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self._active = self._loop.time()
        lines = self.lines.feed(data)
        dropped, self.lines.dropped = self.lines.dropped, 0
        if dropped:
            self.inst.dropped += dropped
            log.debug("instance %s: dropped %d over-long line(s)", self.inst.id, dropped)
        if self.busy or self.queue:
            self.queue.extend(lines)
            if len(self.queue) > MAX_QUEUED_LINES:
                self._pause()
            return
        self._run(lines)

    def _run(self, lines: list[bytes]) -> None:
        out = []
        for i, line in enumerate(lines):
            reply = self.answer(line)
            if callable(reply):
                self.queue = lines[i + 1 :] + self.queue
                self.busy = True
                asyncio.get_running_loop().create_task(self._finish(reply))
                break
            if reply:
                out.append(reply)
        if out and self.transport is not None:
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])

    async def _finish(self, write: Callable[[], Awaitable[bytes]]) -> None:
        try:
            reply = await write()
        except Exception:
            log.exception("instance %s: metadata write failed", self.inst.id)
            reply = b""
        if self.transport is None:
            return
        if reply:
            self.transport.write(reply)
        self.busy = False
        queued, self.queue = self.queue, []
        self._run(queued)
        if not self.busy and self.paused:
            self._resume()

    def _pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    # The guest does not read its replies: stop reading its requests until it does.
    def pause_writing(self) -> None:
        self._pause()

    def resume_writing(self) -> None:
        if not self.busy:
            self._resume()

"""The metadata proxy: 169.254.169.254:80 in every network's metadata namespace, one asyncio loop for all.

A state observer of the agent. For each network with instance ports on this host it listens inside the
network's metadata namespace (`dataplane.base.metadata_ns`, created and plugged by the dataplane driver), on
169.254.169.254:80 and, when the driver gave the namespace fe80::a9fe:a9fe, on [fe80::a9fe:a9fe]:80. The
listening sockets are opened with this loop's thread inside the namespace (setns), then served from the
agent's own namespace, so one thread serves every network (neutron runs one haproxy per network).

Each socket is served by the shared HTTP/1.1 server (wire/http_server.py) with the network's guests as its
application (guest.py): the caller is the instance owning (network, source address) in the synced state
(relay.py), it is rate limited per instance, signed, and forwarded to the metadata API over pipelined,
kept-alive connections (upstream.py). Unknown callers get a
404, an unreachable API a 503 with Retry-After, an instance over its budget a 429 with Retry-After.

The agent asks `serving(network_id)` before reporting a port ACTIVE, so a guest never boots before its
network's proxy answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import uvloop

from cloudnet.agent.metadata.guest import MISS_WAIT, NetworkGuests, Relay
from cloudnet.agent.metadata.ratelimit import RateLimiter
from cloudnet.agent.metadata.relay import Callers
from cloudnet.agent.metadata.upstream import ANSWER_TIMEOUT
from cloudnet.agent.metadata.upstreams import Upstreams
from cloudnet.dataplane.base import metadata_ns
from cloudnet.dataplane.kernel import netns
from cloudnet.wire import http1, signing
from cloudnet.wire.http_server import HttpServer

log = logging.getLogger(__name__)
T = TypeVar("T")

METADATA_V4 = "169.254.169.254"
METADATA_V6 = "fe80::a9fe:a9fe"
# A cloud-init boot asks about 30 questions in one burst (reference/metadata.md §1.4); the refill lets a
# guest do it again (a reboot, a re-run) a few seconds later, not hammer the API continuously.
DEFAULT_BURST = 32
DEFAULT_RATE = 4.0  # requests per second
IDLE_TIMEOUT = 30.0  # haproxy's timeout http-request / keep-alive in neutron's template
GRACE = 1.0  # a stopped listener lets answers in progress finish this long


@dataclass
class _Listener:
    network_id: str
    namespace: str
    identity: tuple[int, int]  # (st_dev, st_ino) of the namespace: a recreated namespace is a new one
    # One HTTP server per listening socket (each sweeps its own idle and slow connections).
    v4: HttpServer | None = None
    v6: HttpServer | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def close(self) -> None:
        """Stop listening; connections close once idle (answers in progress get GRACE seconds)."""
        for server in (self.v4, self.v6):
            if server is not None:
                server.stop()
        self.v4 = self.v6 = None


def _listening_socket(family: socket.AddressFamily, address: tuple[Any, ...]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class MetadataProxy:
    """StateObserver serving the metadata address in every network namespace of this host."""

    def __init__(
        self,
        host: str,
        upstream: str,
        secret: str,
        *,
        burst: float = DEFAULT_BURST,
        rate: float = DEFAULT_RATE,
        port: int = 80,
        retry_interval: float = 2.0,
        idle_timeout: float = IDLE_TIMEOUT,
        answer_timeout: float = ANSWER_TIMEOUT,
        miss_wait: float = MISS_WAIT,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if not secret:
            raise signing.SecretError("the metadata proxy needs the shared secret to sign instance identities")
        self.host = host
        self.port = port
        self.retry_interval = retry_interval
        self.idle_timeout = idle_timeout
        self._secret = secret
        self._upstream = Upstreams(upstream, answer_timeout, tls=tls)  # (one or several, comma-separated)
        self._limiter = RateLimiter(burst, rate)
        self._relay = Relay(self._upstream, self._limiter, Callers({}, secret), miss_wait)
        self._listeners: dict[str, _Listener] = {}
        self._closed = False
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cloudnet-metadata-proxy", daemon=True)
        self._thread.start()
        self._maintainer = self._call(self._start_maintainer())

    # -- the agent's side (any thread) --------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def update(self, state: dict[str, Any]) -> None:
        """Follow a new desired state: who is who, and which networks need a listener."""
        if self._closed:
            return
        self._call(self._apply(state))

    def serving(self, network_id: str) -> bool:
        """Whether the network's proxy is listening on 169.254.169.254 (a guest's request would be answered)."""
        listener = self._listeners.get(network_id)
        return (
            not self._closed
            and self._thread.is_alive()
            and listener is not None
            and listener.v4 is not None
            and listener.v4.serving
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._call(self._shutdown(), timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    # -- on the loop --------------------------------------------------------------------------------

    async def _start_maintainer(self) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self._maintain())

    async def _apply(self, state: dict[str, Any]) -> None:
        callers = Callers(state, self._secret)
        self._relay.update(callers)
        self._limiter.keep_only(callers.instances)
        stopped: list[asyncio.Task[None]] = []
        for network_id in [n for n in self._listeners if n not in callers.networks]:
            listener = self._listeners.pop(network_id)
            listener.close()
            stopped += listener.tasks
            log.info("metadata proxy for network %s stopped", network_id)
        if stopped:  # not listening any more once the state is applied (answers in progress may finish)
            await asyncio.wait(stopped, timeout=GRACE + 1)
        for network_id in sorted(callers.networks):
            try:
                await self._ensure(network_id)
            except Exception:  # one broken namespace must not fail the agent's whole reconcile
                log.exception("metadata proxy for network %s", network_id)

    async def _maintain(self) -> None:
        """Pick up namespaces and addresses the driver adds after a reconcile, and recreated namespaces;
        enforce the timeouts (here rather than a timer per request, which would cost every request)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.retry_interval)
            self._upstream.sweep(loop.time())
            for network_id in sorted(self._relay.callers.networks):
                try:
                    await self._ensure(network_id)
                except Exception:
                    log.exception("metadata proxy for network %s", network_id)

    async def _shutdown(self) -> None:
        self._maintainer.cancel()
        for listener in self._listeners.values():
            listener.close()
        servers = [t for listener in self._listeners.values() for t in listener.tasks]
        self._listeners.clear()
        if servers:
            await asyncio.wait(servers, timeout=GRACE + 1)
        await self._upstream.close()
        # Connection handlers still running (a request waiting for the API): end them before the loop stops.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _ensure(self, network_id: str) -> None:
        namespace = metadata_ns(self.host, network_id)
        current = self._listeners.get(network_id)
        try:
            st = os.stat(netns.path_of(namespace))
            identity = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            identity = None
        if current is not None and (identity is None or current.identity != identity):
            self._listeners.pop(network_id).close()  # the namespace went away (or was made anew)
            current = None
        if identity is None:
            return
        if current is None:
            current = self._listeners[network_id] = _Listener(network_id, namespace, identity)
        if current.v4 is not None and current.v6 is not None:
            return
        v4, v6 = self._open_sockets(namespace, want_v4=current.v4 is None, want_v6=current.v6 is None)
        if v4 is not None:
            current.v4 = await self._serve(current, v4)
            log.info("metadata proxy for network %s listening in %s", network_id, namespace)
        if v6 is not None:
            current.v6 = await self._serve(current, v6)

    def _open_sockets(
        self, namespace: str, want_v4: bool, want_v6: bool
    ) -> tuple[socket.socket | None, socket.socket | None]:
        """Listening sockets made inside the namespace (they stay there when the thread comes back)."""
        v4 = v6 = None
        try:
            with netns.entered(namespace):
                if want_v4:
                    try:
                        v4 = _listening_socket(socket.AF_INET, (METADATA_V4, self.port))
                    except OSError as exc:
                        # EADDRNOTAVAIL: the driver has not added the address yet (retried); anything else,
                        # such as another proxy holding the port, needs a person.
                        level = logging.DEBUG if exc.errno == errno.EADDRNOTAVAIL else logging.WARNING
                        log.log(level, "metadata proxy: %s:%d in %s: %s", METADATA_V4, self.port, namespace, exc)
                if want_v6:
                    v6 = self._v6_socket()
        except netns.NamespaceMissing:
            pass
        return v4, v6

    def _v6_socket(self) -> socket.socket | None:
        # A link-local address is bound per interface: try the namespace's interfaces (not lo) in turn.
        for index, name in socket.if_nameindex():
            if name == "lo":
                continue
            try:
                return _listening_socket(socket.AF_INET6, (METADATA_V6, self.port, 0, index))
            except OSError as exc:
                if exc.errno not in (errno.EADDRNOTAVAIL, errno.EINVAL):
                    log.debug("metadata proxy: [%s]:%d on %s: %s", METADATA_V6, self.port, name, exc)
        return None

    async def _serve(self, listener: _Listener, sock: socket.socket) -> HttpServer | None:
        """Serve the network's guests on a socket made in its namespace (adopted by the loop, not bound)."""
        guests = NetworkGuests(self._relay, listener.network_id)
        server = HttpServer(guests, gate=guests, idle_timeout=self.idle_timeout, grace=GRACE,
                            max_head=http1.MAX_HEAD, max_body=http1.MAX_BODY)  # fmt: skip
        task = asyncio.get_running_loop().create_task(server.serve(sock))
        listener.tasks = [t for t in listener.tasks if not t.done()] + [task]
        while not server.serving:  # listening takes a step or two of the loop
            if task.done():
                sock.close()
                task.result()  # raises what stopped it
                return None
            await asyncio.sleep(0)
        return server

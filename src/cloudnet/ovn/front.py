"""The TLS front of OVN's databases: what other hosts reach on NB_PORT/SB_PORT when TLS is on.

ovsdb-server's SSL has no revocation list: a removed host's certificate, still within its validity, would be
answered on `pssl:` (and keep the connections it has). So with TLS the databases listen for clients only on their
unix sockets in their run directory, and this front listens on the `pssl:` address and port instead: a TLS handshake
with the stdlib's `ssl` (CERT_REQUIRED against the cloud's CA, the databases' own certificate presented), then the
peer's certificate asked of `refusal` (on a server, the store's list of the certificates the CA signed for hosts,
revoked or not; on a `cloudnet ovn join` member, which has no store, the CA's CRL from the API servers), then bytes
both ways between the peer and the database's socket. Clients see the same database, SSL and
certificate as before (ovn-controller, ovn-northd, ovsdb-client, ovsdbapp: nothing changes for them). Every open
connection's certificate is asked again every `sweep` seconds (and at once on `sweep_now`, when this server revokes
one): a refused one is closed. Every refusal is logged with the peer's address, the certificate's subject and serial
and the reason. `tick` runs at every sweep (the certificate's reload: see ovn_stack.py).

Raft (RAFT_PORT, between the members of a cluster) is not fronted: ovsdb-server's Raft connections are its own,
to and from each member's own address (a front would have to be a Raft-aware proxy), and only server hosts with a
member certificate of the CA take part, which `cloudnet host remove` then takes out of the cluster by hand
(`cluster/kick`). The listening sockets are bound with IP_FREEBIND: the address may come to this host only later
(a chassis' underlay address moves to its tunnel bridge at start), as ovsdb-server retries its own listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

log = logging.getLogger("cloudnet.ovn.front")
SWEEP = 1.0  # seconds between checks of the open connections' certificates (and of the certificate's files)
HANDSHAKE_TIMEOUT = 10.0
# Connections at once in their handshake (not yet known to be a host's): one more is closed at once, so a peer that
# opens many and never says hello holds at most these file descriptors, each for HANDSHAKE_TIMEOUT.
MAX_PENDING = 128
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)  # (Linux's <linux/in.h>; Python names it from 3.12 only)
# Why a client certificate (DER) is refused now, or None (may read the store: called off the serving loop).
Refusal = Callable[[bytes], str | None]


@dataclass(frozen=True)
class Route:
    """A listener: `address`:`port` (the `pssl:` remote's) forwarded to the database's unix socket `upstream`."""

    name: str  # for the log: "NB", "SB"
    address: str
    port: int
    upstream: Path


def describe(der: bytes) -> tuple[str, str]:
    """(subject, serial in hex) of a certificate, for the log."""
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return "(unreadable certificate)", "?"
    return cert.subject.rfc4514_string(), format(cert.serial_number, "x")


def _listener(address: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)  # (also for IPv6: see the module's doc)
        sock.bind((address, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class Front:
    """The listeners of `routes` on a loop of their own thread (`start`, `stop`)."""

    def __init__(self, context: ssl.SSLContext, routes: list[Route], refusal: Refusal,
                 tick: Callable[[], object] | None = None, sweep: float = SWEEP) -> None:  # fmt: skip
        if context.verify_mode != ssl.CERT_REQUIRED:
            raise ValueError("the front's context must require a client certificate")
        self.context, self.routes, self.refusal, self.tick, self.sweep = context, routes, refusal, tick, sweep
        self._links: set[_Client] = set()
        self._pending = 0  # connections in their handshake or check (MAX_PENDING)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind every listener (OSError here, not later), then serve on a thread of its own."""
        socks: list[socket.socket] = []
        try:
            for route in self.routes:
                socks.append(_listener(route.address, route.port))
        except OSError:
            for sock in socks:
                sock.close()
            raise
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(socks, ready), name="cloudnet-ovn-front", daemon=True)
        self._thread.start()
        ready.wait()
        if not self._thread.is_alive():
            raise OSError("the front's listeners did not start (see the log)")

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and self._wake is not None and not self._done.is_set():
            with contextlib.suppress(RuntimeError):  # (its loop closed meanwhile)
                loop.call_soon_threadsafe(self._done.set)
                loop.call_soon_threadsafe(self._wake.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def sweep_now(self) -> None:
        """Check the open connections' certificates now (a host was just revoked here); safe from any thread."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

    def _run(self, socks: list[socket.socket], ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(socks, ready))
        finally:
            ready.set()  # (also when it failed before serving: start() must not wait for ever)
            loop.close()

    async def _serve(self, socks: list[socket.socket], ready: threading.Event) -> None:
        self._wake = asyncio.Event()
        servers = []
        for route, sock in zip(self.routes, socks, strict=True):
            loop = asyncio.get_running_loop()
            servers.append(await loop.create_server(lambda route=route: self._accepted(route), sock=sock))
        ready.set()
        try:
            while not self._done.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.sweep)
                self._wake.clear()
                if not self._done.is_set():
                    await self._sweep()
        finally:
            for server in servers:
                server.close()
            for link in list(self._links):
                link.close()

    async def _sweep(self) -> None:
        """Close the connections whose certificate is refused now; the tick."""
        loop = asyncio.get_running_loop()
        links = list(self._links)
        verdicts = await loop.run_in_executor(None, lambda: [(link, self._ask(link.der)) for link in links])
        for link, why in verdicts:
            if why is not None and link in self._links:
                self._refused(link.peer, link.der, why, "closed its open connection")
                link.close()
                self._links.discard(link)
        if self.tick is not None:
            try:
                await loop.run_in_executor(None, self.tick)
            except Exception:  # (a failed reload keeps the certificate in use: the front goes on)
                log.exception("OVN's TLS front: the certificate reload failed")

    def _ask(self, der: bytes) -> str | None:
        try:
            return self.refusal(der)
        except Exception as exc:  # (the store unreachable: refuse rather than let an unchecked one in)
            return f"cannot check the certificate: {exc}"

    @staticmethod
    def _refused(peer: str, der: bytes, why: str, what: str) -> None:
        subject, serial = describe(der)
        log.warning("OVN's databases' TLS front refused %s (certificate %s, serial %s): %s; %s", peer, subject,
                    serial, why, what)  # fmt: skip

    def _accepted(self, route: Route) -> _Client:
        return _Client(self, route)


class _Half(asyncio.Protocol):
    """One side of a link: what it receives goes to `other`; a full buffer on either side pauses the sender."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _Half | None = None
        self.early: list[bytes] = []  # (a client's first request may come with its handshake: kept until linked)

    def data_received(self, data: bytes) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.write(data)
        else:
            self.early.append(data)

    def pause_writing(self) -> None:  # (this side's buffer is full: stop reading the other's)
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.close()  # (what it was given still goes out)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class _Client(_Half):
    """An accepted connection: paused until the TLS handshake (no byte of the client's hello may be read by
    anything else), then checked, then linked to the database's socket."""

    def __init__(self, front: Front, route: Route) -> None:
        super().__init__()
        self.front, self.route, self.der = front, route, b""
        self.peer = f"{route.name} client ?"
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        got = transport.get_extra_info("peername")
        if isinstance(got, tuple):
            self.peer = f"{self.route.name} client {got[0]}:{got[1]}"
        if self.front._pending >= MAX_PENDING:
            log.warning("OVN's databases' TLS front refused %s: too many connections in their TLS handshake (%d)",
                        self.peer, MAX_PENDING)  # fmt: skip
            transport.abort()
            return
        self.front._pending += 1
        self._task = asyncio.get_running_loop().create_task(self._admitted(transport))

    async def _admitted(self, raw: asyncio.Transport) -> None:
        try:
            await self._admit(raw)
        finally:
            self.front._pending -= 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.front._links.discard(self)
        super().connection_lost(exc)

    async def _admit(self, raw: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        try:
            secured = await loop.start_tls(raw, self, self.front.context, server_side=True,
                                           ssl_handshake_timeout=HANDSHAKE_TIMEOUT)  # fmt: skip
        except (OSError, TimeoutError, ssl.SSLError, ConnectionError) as exc:
            log.warning("OVN's databases' TLS front refused %s: TLS handshake failed (no certificate of the cloud's "
                        "CA?): %s", self.peer, exc or type(exc).__name__)  # fmt: skip
            raw.abort()
            return
        if secured is None:  # (the peer went away meanwhile)
            raw.abort()
            return
        self.transport = secured
        secured.pause_reading()  # (until the database's end is there to take it)
        ssl_object = secured.get_extra_info("ssl_object")
        self.der = (ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None) or b""
        why = "no client certificate" if not self.der else await loop.run_in_executor(None, self.front._ask, self.der)
        if why is not None:
            self.front._refused(self.peer, self.der, why, "connection closed")
            secured.abort()
            return
        upstream = _Half()
        try:
            transport, _protocol = await loop.create_unix_connection(lambda: upstream, str(self.route.upstream))
        except OSError as exc:  # (the database not up yet, or gone: the client retries, as with the database's own)
            log.info("OVN's TLS front: %s not reachable for %s: %s", self.route.upstream, self.peer, exc)
            secured.abort()
            return
        upstream.transport, upstream.other, self.other = transport, self, upstream
        if secured.is_closing():
            transport.close()
            return
        self.front._links.add(self)
        transport.write(b"".join(self.early))
        self.early.clear()
        secured.resume_reading()

    def close(self) -> None:
        self.abort()
        if self.other is not None:
            self.other.abort()

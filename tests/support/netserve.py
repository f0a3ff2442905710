"""Tiny TCP/UDP responders and clients that live in network namespaces, without extra processes.

Sockets are created inside a namespace (setns on the creating thread) and keep belonging to it, so a
test can serve and connect from any namespace it made. A responder answers "<name> <peer address>".
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

from cloudnet.dataplane.kernel import netns


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


@dataclass
class Responder:
    name: str
    sockets: list[socket.socket] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def start(
        cls, ns: str, name: str, tcp: tuple[int, ...] = (), udp: tuple[int, ...] = (), v6: bool = False
    ) -> Responder:
        r = cls(name)
        family = socket.AF_INET6 if v6 else socket.AF_INET
        anyaddr = "::" if v6 else "0.0.0.0"
        with netns.entered(ns):
            for port in tcp:
                s = socket.socket(family, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if v6:  # beside an IPv4 responder on the same port
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind((anyaddr, port))
                s.listen(16)
                r.sockets.append(s)
                threading.Thread(target=r._serve_tcp, args=(s,), daemon=True).start()
            for port in udp:
                s = socket.socket(family, socket.SOCK_DGRAM)
                s.bind((anyaddr, port))
                r.sockets.append(s)
                threading.Thread(target=r._serve_udp, args=(s,), daemon=True).start()
        return r

    def _serve_tcp(self, s: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = s.accept()
            except OSError:
                return
            with conn:
                port = s.getsockname()[1]
                conn.sendall(f"{self.name} {peer[0]} {port}".encode())

    def _serve_udp(self, s: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                _data, peer = s.recvfrom(512)
                port = s.getsockname()[1]
                s.sendto(f"{self.name} {peer[0]} {port}".encode(), peer)
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
        for s in self.sockets:
            s.close()


def tcp_ask(ns: str, address: str, port: int, timeout: float = 3.0, source: str | None = None) -> str:
    """Connect from inside `ns` (from `source`, if given) and return the responder's answer ('' if nothing
    answered)."""
    with netns.entered(ns):
        s = socket.socket(_family(address), socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        if source is not None:
            s.bind((source, 0))
        s.connect((address, port))
        return s.recv(256).decode()
    except OSError:
        return ""
    finally:
        s.close()


def udp_ask(ns: str, address: str, port: int, timeout: float = 2.0) -> str:
    with netns.entered(ns):
        s = socket.socket(_family(address), socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(b"?", (address, port))
        return s.recv(256).decode()
    except OSError:
        return ""
    finally:
        s.close()

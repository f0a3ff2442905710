"""A router solicitation and the first router advertisement that answers it, as a guest's kernel sees them: run
inside a namespace (`python ndisc_probe.py IFACE SECONDS`), it prints the advertisement as JSON (or `null`).
`python ndisc_probe.py IFACE SECONDS advertise` is a rogue router instead: an advertisement (default router, prefix
2001:db8:bad::/64) to all nodes every 0.2 s.
Written from RFC 4861 (RS/RA, prefix information and MTU options) and RFC 8106 (RDNSS), not from the sender's code."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import select
import socket
import struct
import sys
import time
from typing import Any

RS, RA = 133, 134
ALL_ROUTERS = "ff02::2"


def parse(msg: bytes, source: str) -> dict[str, Any]:
    _type, _code, _sum, hop_limit, flags, lifetime = struct.unpack_from("!BBHBBH", msg)
    found: dict[str, Any] = {"source": source, "hop_limit": hop_limit, "managed": bool(flags & 0x80),
                             "other": bool(flags & 0x40), "router_lifetime": lifetime, "prefixes": [], "mtu": None,
                             "rdnss": []}  # fmt: skip
    at = 16
    while at + 2 <= len(msg):
        kind, length = msg[at], msg[at + 1] * 8
        if length == 0:
            break
        body = msg[at : at + length]
        if kind == 3:  # prefix information
            plen, pflags = body[2], body[3]
            prefix = ipaddress.IPv6Address(body[16:32])
            found["prefixes"].append({"prefix": f"{prefix}/{plen}", "on_link": bool(pflags & 0x80),
                                      "autonomous": bool(pflags & 0x40)})  # fmt: skip
        elif kind == 5:  # MTU
            found["mtu"] = struct.unpack_from("!I", body, 4)[0]
        elif kind == 25:  # recursive DNS servers
            found["rdnss"] += [str(ipaddress.IPv6Address(body[i : i + 16])) for i in range(8, length, 16)]
        at += length
    return found


def probe(iface: str, seconds: float) -> dict[str, Any] | None:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, iface.encode())
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
    index = socket.if_nametoindex(iface)
    deadline = time.monotonic() + seconds
    next_rs = 0.0
    while (left := deadline - time.monotonic()) > 0:
        if time.monotonic() >= next_rs:  # (again each second: the first may go before the router listens)
            with contextlib.suppress(OSError):  # (no usable source address yet: the next second's)
                sock.sendto(struct.pack("!BBHI", RS, 0, 0, 0), (ALL_ROUTERS, 0, 0, index))
            next_rs = time.monotonic() + 1.0
        ready, _w, _x = select.select([sock], [], [], min(left, 1.0))
        if ready:
            msg, addr = sock.recvfrom(65535)
            source = addr[0].split("%")[0]
            # (a host discards an advertisement whose source is not link-local: RFC 4861 section 6.1.2)
            if msg and msg[0] == RA and ipaddress.IPv6Address(source).is_link_local:
                return parse(msg, source)
    return None


def advertise(iface: str, seconds: float) -> None:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, iface.encode())
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
    prefix = struct.pack("!BBBBIII", 3, 4, 64, 0xC0, 86400, 14400, 0) + ipaddress.IPv6Address("2001:db8:bad::").packed
    message = struct.pack("!BBHBBHII", RA, 0, 0, 64, 0, 1800, 0, 0) + prefix
    deadline = time.monotonic() + seconds
    index = socket.if_nametoindex(iface)
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):  # (EADDRNOTAVAIL until its own link-local address is no longer tentative)
            sock.sendto(message, ("ff02::1", 0, 0, index))
        time.sleep(0.2)


if __name__ == "__main__":
    if sys.argv[3:] == ["advertise"]:
        advertise(sys.argv[1], float(sys.argv[2]))
    else:
        print(json.dumps(probe(sys.argv[1], float(sys.argv[2]))))

"""A VMM's end of a VM's tap, from Python: attach to the persistent tap (TUNSETIFF on /dev/net/tun in the tap's
namespace, as QEMU's `-netdev tap,ifname=...` does) and write and read Ethernet frames; plus the frames a guest's
DHCP client and IPv6 stack send (a DHCPDISCOVER/REQUEST, a router solicitation), built by hand with struct, and
the parsing of what comes back."""

from __future__ import annotations

import ipaddress
import os
import random
import select
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from cloudnet.dataplane.kernel import netns
from tests.support import frames
from tests.support.tap_guest import attach

ETH_P_ALL = 0x0003
DHCP_MAGIC = 0x63825363
DISCOVER, OFFER, REQUEST, ACK = 1, 2, 3, 5
ASKED = (1, 3, 6, 15, 26, 51, 54, 121)  # netmask, router, DNS, domain, MTU, lease, server id, classless routes


class TapEnd:
    """Attached to a tap as a VMM is (EBUSY while another holds it)."""

    def __init__(self, ns: str, name: str) -> None:
        with netns.entered(ns):
            self.fd = attach(name, nonblocking=True)

    def send(self, frame: bytes) -> None:
        os.write(self.fd, frame)

    def wait_for(self, match: Callable[[bytes], bool], within: float) -> bytes | None:
        """The first frame that `match`es arriving within `within` seconds (others are dropped), or None."""
        return _wait_for(self.fd, match, within)

    def close(self) -> None:
        os.close(self.fd)


class Sniffer:
    """Every frame a device of namespace `ns` receives or sends (an AF_PACKET socket bound to it): e.g. a VM's qvo,
    to see what leaves its bridge for br-int."""

    def __init__(self, ns: str, name: str) -> None:
        with netns.entered(ns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.sock.bind((name, 0))
        self.sock.setblocking(False)

    def wait_for(self, match: Callable[[bytes], bool], within: float) -> bytes | None:
        return _wait_for(self.sock.fileno(), match, within)

    def close(self) -> None:
        self.sock.close()


def _wait_for(fd: int, match: Callable[[bytes], bool], within: float) -> bytes | None:
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        ready, _w, _x = select.select([fd], [], [], left)
        if not ready:
            break
        try:
            frame = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if match(frame):
            return frame
    return None


def dhcp(kind: int, mac: str, xid: int, requested: str | None = None, server: str | None = None) -> bytes:
    """A client's DHCP message in a broadcast frame from `mac`."""
    chaddr = bytes.fromhex(mac.replace(":", ""))
    bootp = struct.pack("!BBBBIHH4s4s4s4s16s64s128sI", 1, 1, 6, 0, xid, 0, 0x8000, b"\0" * 4, b"\0" * 4, b"\0" * 4,
                        b"\0" * 4, chaddr, b"", b"", DHCP_MAGIC)  # fmt: skip
    options = bytes([53, 1, kind, 55, len(ASKED), *ASKED])
    if requested:
        options += bytes([50, 4]) + socket.inet_aton(requested)
    if server:
        options += bytes([54, 4]) + socket.inet_aton(server)
    payload = frames.ipv4_udp("0.0.0.0", "255.255.255.255", 68, 67, bootp + options + b"\xff")
    return frames.ethernet(frames.BROADCAST, mac, 0x0800, payload)


@dataclass
class DhcpReply:
    kind: int
    yiaddr: str
    options: dict[int, bytes]

    def address(self, code: int) -> str:
        return socket.inet_ntoa(self.options[code][:4])

    def addresses(self, code: int) -> list[str]:
        value = self.options[code]
        return [socket.inet_ntoa(value[i : i + 4]) for i in range(0, len(value), 4)]

    def number(self, code: int) -> int:
        value = self.options[code]
        return int.from_bytes(value, "big")

    def classless_routes(self) -> set[tuple[str, str]]:
        """Option 121 (RFC 3442) as {(destination CIDR, next hop)}."""
        value, out, i = self.options[121], set(), 0
        while i < len(value):
            width = value[i]
            size = (width + 7) // 8
            dest = value[i + 1 : i + 1 + size] + b"\0" * (4 - size)
            hop = value[i + 1 + size : i + 5 + size]
            out.add((f"{socket.inet_ntoa(dest)}/{width}", socket.inet_ntoa(hop)))
            i += 5 + size
        return out


def dhcp_reply(frame: bytes, xid: int) -> DhcpReply | None:
    """A server's DHCP reply to transaction `xid` in this frame (IPv4, UDP 67 -> 68), else None."""
    if len(frame) < 14 + 20 + 8 + 240 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    ip_len = (frame[14] & 0x0F) * 4
    udp = 14 + ip_len
    sport, dport = struct.unpack("!HH", frame[udp : udp + 4])
    bootp = frame[udp + 8 :]
    if (sport, dport) != (67, 68) or bootp[0] != 2 or struct.unpack("!I", bootp[4:8])[0] != xid:
        return None
    options: dict[int, bytes] = {}
    i = 240
    while i < len(bootp) and bootp[i] != 255:
        if bootp[i] == 0:
            i += 1
            continue
        code, size = bootp[i], bootp[i + 1]
        options[code] = bootp[i + 2 : i + 2 + size]
        i += 2 + size
    return DhcpReply(options.get(53, b"\0")[0], socket.inet_ntoa(bootp[16:20]), options)


def ask_dhcp(tap: TapEnd, mac: str, within: float = 5.0) -> DhcpReply | None:
    """DISCOVER until an OFFER comes (ovn-controller may not have its flows yet on the first), then REQUEST/ACK."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        xid = random.getrandbits(32)
        tap.send(dhcp(DISCOVER, mac, xid))
        frame = tap.wait_for(lambda f, x=xid: dhcp_reply(f, x) is not None, 1.0)
        if frame is None:
            continue
        offer = dhcp_reply(frame, xid)
        assert offer is not None and offer.kind == OFFER
        tap.send(dhcp(REQUEST, mac, xid, requested=offer.yiaddr, server=offer.address(54)))
        frame = tap.wait_for(lambda f, x=xid: dhcp_reply(f, x) is not None, 2.0)
        assert frame is not None, "an OFFER but no ACK"
        return dhcp_reply(frame, xid)
    return None


def link_local(mac: str) -> str:
    """The EUI-64 link-local address of `mac`."""
    b = bytearray(bytes.fromhex(mac.replace(":", "")))
    b[0] ^= 2
    return str(ipaddress.IPv6Address(b"\xfe\x80" + b"\0" * 6 + bytes(b[:3]) + b"\xff\xfe" + bytes(b[3:])))


def router_solicitation(mac: str) -> bytes:
    """An RS (type 133) from `mac`'s link-local address to all routers, with its source link-layer option."""
    icmp = struct.pack("!BBHI", 133, 0, 0, 0) + bytes([1, 1]) + bytes.fromhex(mac.replace(":", ""))
    return frames.ethernet("33:33:00:00:00:02", mac, 0x86DD, frames.ipv6_icmp(link_local(mac), "ff02::2", icmp))


@dataclass
class RouterAdvert:
    managed: bool
    other: bool
    mtu: int | None
    prefixes: list[tuple[str, bool]]  # (prefix, autonomous)
    rdnss: list[str]


def router_advert(frame: bytes) -> RouterAdvert | None:
    if len(frame) < 14 + 40 + 16 or frame[12:14] != b"\x86\xdd" or frame[20] != 58 or frame[54] != 134:
        return None
    flags = frame[54 + 5]
    mtu, prefixes, rdnss, i = None, [], [], 54 + 16
    while i + 2 <= len(frame):
        kind, size = frame[i], frame[i + 1] * 8
        if size == 0:
            break
        body = frame[i : i + size]
        if kind == 5:
            mtu = struct.unpack("!I", body[4:8])[0]
        elif kind == 3:
            prefix = ipaddress.IPv6Address(body[16:32])
            prefixes.append((f"{prefix}/{body[2]}", bool(body[3] & 0x40)))
        elif kind == 25:
            rdnss += [str(ipaddress.IPv6Address(body[j : j + 16])) for j in range(8, size, 16)]
        i += size
    return RouterAdvert(bool(flags & 0x80), bool(flags & 0x40), mtu, prefixes, rdnss)

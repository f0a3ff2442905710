"""Hand-made Ethernet frames sent and caught inside test namespaces (raw AF_PACKET sockets; no scapy).

What a hostile guest would send: another address as its source, another MAC, an ARP or a neighbour advertisement
for its neighbour's address, a router advertisement, a DHCP server's offer, a VLAN-tagged frame. Each carries a
marker in its payload (where it has one) so that the catching side recognises it among other traffic.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from cloudnet.dataplane.kernel import netns

ETH_P_ALL = 0x0003
BROADCAST = "ff:ff:ff:ff:ff:ff"
PACKET_OUTGOING = 4


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ethernet(dst: str, src: str, ethertype: int, payload: bytes, vlan: int | None = None) -> bytes:
    tag = struct.pack("!HH", 0x8100, vlan) if vlan is not None else b""
    return _mac(dst) + _mac(src) + tag + struct.pack("!H", ethertype) + payload


def ipv4_udp(src: str, dst: str, sport: int, dport: int, data: bytes) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton(src),
                         socket.inet_aton(dst))  # fmt: skip
    header = header[:10] + struct.pack("!H", _checksum(header)) + header[12:]
    return header + udp


def ipv4_tcp(src: str, dst: str, sport: int, dport: int, data: bytes, flags: int = 0x02) -> bytes:
    """A TCP segment (a SYN by default) carrying `data`, in an IPv4 packet."""
    s, d = socket.inet_aton(src), socket.inet_aton(dst)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, flags, 64240, 0, 0) + data
    tcp = tcp[:16] + struct.pack("!H", _checksum(s + d + struct.pack("!xBH", 6, len(tcp)) + tcp)) + tcp[18:]
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, s, d)
    return header[:10] + struct.pack("!H", _checksum(header)) + header[12:] + tcp


def arp(op: int, sender_mac: str, sender_ip: str, target_mac: str, target_ip: str) -> bytes:
    return struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, op, _mac(sender_mac), socket.inet_aton(sender_ip),
                       _mac(target_mac), socket.inet_aton(target_ip))  # fmt: skip


def ipv6_icmp(src: str, dst: str, icmp: bytes, hop_limit: int = 255) -> bytes:
    s, d = ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed
    pseudo = s + d + struct.pack("!I3xB", len(icmp), 58)
    icmp = icmp[:2] + struct.pack("!H", _checksum(pseudo + icmp)) + icmp[4:]
    return struct.pack("!IHBB", 0x60000000, len(icmp), 58, hop_limit) + s + d + icmp


def ipv6_udp(src: str, dst: str, sport: int, dport: int, data: bytes) -> bytes:
    s, d = ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed
    length = 8 + len(data)
    udp = struct.pack("!HHHH", sport, dport, length, 0) + data
    udp = udp[:6] + struct.pack("!H", _checksum(s + d + struct.pack("!I3xB", length, 17) + udp) or 0xFFFF) + udp[8:]
    return struct.pack("!IHBB", 0x60000000, length, 17, 64) + s + d + udp


def router_advert(source_mac: str, marker: bytes) -> bytes:
    """An RA (type 134) offering itself as default router for 3600 s, with a source link-layer option."""
    body = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 3600, 0, 0) + struct.pack("!BB", 1, 1) + _mac(source_mac)
    return body + marker


def neighbour_advert(target: str, mac: str) -> bytes:
    """An unsolicited NA (override flag) for `target` at `mac` (target link-layer address option)."""
    return (
        struct.pack("!BBHI", 136, 0, 0, 0x20000000)
        + ipaddress.IPv6Address(target).packed
        + struct.pack("!BB", 2, 1)
        + _mac(mac)
    )


def echo_request(marker: bytes) -> bytes:
    return struct.pack("!BBHHH", 128, 0, 0, 0x77, 1) + marker


def solicited_node(address: str) -> tuple[str, str]:
    """The solicited-node multicast address of `address` and its Ethernet group address."""
    low = ipaddress.IPv6Address(address).packed[-3:]
    group = ipaddress.IPv6Address(bytes.fromhex("ff020000000000000000000001ff") + low)
    return str(group), "33:33:" + ":".join(f"{b:02x}" for b in group.packed[-4:])


def send(ns: str, frame: bytes, ifname: str = "eth0") -> None:
    with netns.entered(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    try:
        s.bind((ifname, 0))
        s.send(frame)
    finally:
        s.close()


@dataclass
class Catcher:
    """Every frame arriving on a namespace's interface (not those it sends), kept while it runs."""

    frames: list[bytes] = field(default_factory=list)
    _sock: socket.socket | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def start(cls, ns: str, ifname: str = "eth0") -> Catcher:
        c = cls()
        with netns.entered(ns):
            c._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        c._sock.bind((ifname, 0))
        c._sock.settimeout(0.05)
        threading.Thread(target=c._run, daemon=True).start()
        return c

    def _run(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                data, addr = self._sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            if addr[2] != PACKET_OUTGOING:
                self.frames.append(data)

    def seen(self, marker: bytes, within: float) -> bool:
        """Did a frame containing `marker` arrive (waiting up to `within` seconds for it)?"""
        deadline = time.monotonic() + within
        while True:
            if any(marker in f for f in list(self.frames)):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()

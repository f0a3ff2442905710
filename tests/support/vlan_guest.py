"""A guest's 802.1Q interface, made in user space: the kernel these tests run on has no 8021q (CONFIG_VLAN_8021Q is
off), so a container cannot make `eth0.101` itself. A tap named so, with the subport's MAC, stands for it: what the
guest's stack sends on it leaves `lower` tagged with the VLAN, and what arrives on `lower` tagged with it comes out
of it untagged (the tag as the kernel hands it to a packet socket: PACKET_AUXDATA). The guest's own IP stack does
the rest, as it would over a kernel VLAN device."""

from __future__ import annotations

import fcntl
import os
import select
import socket
import struct
import threading
from dataclasses import dataclass, field

from cloudnet.dataplane.kernel import netns
from tests.support.cloud import ns_run

TUNSETIFF, IFF_TAP, IFF_NO_PI = 0x400454CA, 0x0002, 0x1000
ETH_P_ALL, SOL_PACKET, PACKET_AUXDATA, PACKET_OUTGOING = 3, 263, 8, 4
TP_STATUS_VLAN_VALID = 1 << 4


@dataclass
class VlanIface:
    ns: str
    lower: str
    vid: int
    name: str
    mac: str
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        with netns.entered(self.ns):
            self._tap = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
            fcntl.ioctl(self._tap, TUNSETIFF, struct.pack("16sH", self.name.encode(), IFF_TAP | IFF_NO_PI))
            self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._sock.bind((self.lower, 0))
        self._sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        ns_run(self.ns, "ip", "link", "set", self.name, "address", self.mac, "up", check=True)
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self._out, self._in)]
        for t in self._threads:
            t.start()

    def _out(self) -> None:
        tag = struct.pack("!HH", 0x8100, self.vid)
        while not self._stop.is_set():
            if select.select([self._tap], [], [], 0.05)[0]:
                frame = os.read(self._tap, 65535)
                self._sock.send(frame[:12] + tag + frame[12:])

    def _in(self) -> None:
        while not self._stop.is_set():
            if not select.select([self._sock], [], [], 0.05)[0]:
                continue
            data, ancillary, _flags, addr = self._sock.recvmsg(65535, 1024)
            if addr[2] == PACKET_OUTGOING:
                continue
            for level, kind, raw in ancillary:
                if level == SOL_PACKET and kind == PACKET_AUXDATA:
                    status, _len, _snap, _mac, _net, tci, _tpid = struct.unpack("<IIIHHHH", raw[:20])
                    if status & TP_STATUS_VLAN_VALID and tci & 0xFFF == self.vid:
                        os.write(self._tap, data)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        self._sock.close()
        os.close(self._tap)  # (the tap is not persistent: it goes with its descriptor)

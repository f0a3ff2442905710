"""A stand-in VMM for tests: attaches to a VM's tap as QEMU does (open /dev/net/tun, TUNSETIFF by name, in the
namespace the tap is in) and gives the guest a real kernel NIC: eth0 of a namespace of the test's, itself a tap
whose frames a thread copies to and from the VM's. The guest then runs real clients (udhcpc, curl, ping) with its
port's MAC, and the test can write raw frames onto the VM's tap (`inject`) as a hostile guest would."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import threading
import time
from types import TracebackType

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet.dataplane.kernel import netns, tuntap


def attach(tap: str, nonblocking: bool = False) -> int:
    """An fd attached to the existing tap `tap` of the calling thread's namespace (as a VMM attaches: EBUSY while
    another holds it)."""
    fd = os.open(tuntap.TUN_DEVICE, os.O_RDWR | os.O_CLOEXEC | (os.O_NONBLOCK if nonblocking else 0))
    try:
        fcntl.ioctl(fd, tuntap.TUNSETIFF, tuntap.ifreq(tap))
    except OSError:
        os.close(fd)
        raise
    return fd


def attach_in(ns: str, tap: str, limit: float = 5) -> int:
    """attach() in namespace `ns`, once the bridge forwards on the tap (its carrier seen: a VMM's guest boots for
    seconds before it sends, a test would send at once)."""
    with netns.entered(ns):
        fd = attach(tap)
    deadline = time.monotonic() + limit
    with netns.iproute(ns) as ipr:
        while ipr.link("get", ifname=tap)[0].get_attr("IFLA_OPERSTATE") != "UP":
            if time.monotonic() > deadline:
                os.close(fd)
                raise TimeoutError(f"{tap} not operationally up {limit} s after attaching")
            time.sleep(0.01)
    return fd


class TapGuest:
    """eth0 of `guest_ns` (MAC `mac`, MTU `mtu`, up) wired to the VM's tap `tap` in `host_ns`."""

    def __init__(self, host_ns: str, tap: str, guest_ns: str, mac: str, mtu: int) -> None:
        self.vm = attach_in(host_ns, tap)
        with netns.entered(guest_ns):  # (a non-persistent tap: gone when its fd closes)
            self.nic = attach("eth0")
        with netns.iproute(guest_ns) as ipr:
            idx = ipr.link_lookup(ifname="eth0")[0]
            ipr.link("set", index=idx, address=mac, mtu=mtu, state="up")
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def inject(self, frame: bytes) -> None:
        """A frame the guest sends, as raw as it likes."""
        os.write(self.vm, frame)

    def _pump(self) -> None:
        peer = {self.vm: self.nic, self.nic: self.vm}
        live = [self.vm, self.nic, self._stop_r]
        while True:
            ready, _, _ = select.select(live, [], [])
            if self._stop_r in ready:
                return
            for fd in ready:
                try:
                    frame = os.read(fd, 65536)
                except OSError:  # (the VM's tap was deleted under us: as a VMM's, this end goes dead)
                    live.remove(fd)
                    continue
                with contextlib.suppress(OSError):  # (a frame the other side refuses: a wire drops it)
                    os.write(peer[fd], frame)

    def close(self) -> None:
        os.write(self._stop_w, b"x")
        self._thread.join(timeout=5)
        for fd in (self.vm, self.nic, self._stop_r, self._stop_w):
            os.close(fd)

    def __enter__(self) -> TapGuest:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def link_of(ipr: IPRoute, name: str) -> dict[str, object] | None:
    """A device's attributes that the tests check (master, MTU, group, alias, flags); None when there is none."""
    try:
        msg = ipr.link("get", ifname=name)[0]
    except NetlinkError as exc:
        if exc.code != errno.ENODEV:
            raise
        return None
    return {"index": msg["index"], "master": msg.get_attr("IFLA_MASTER"), "mtu": msg.get_attr("IFLA_MTU"),
            "group": msg.get_attr("IFLA_GROUP"), "alias": msg.get_attr("IFLA_IFALIAS"),
            "up": bool(msg["flags"] & 1), "carrier": msg.get_attr("IFLA_CARRIER")}  # fmt: skip

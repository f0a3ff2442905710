"""Persistent tap devices for VM NICs, made with the tun driver's ioctls (rtnetlink cannot make one; as `ip tuntap
add` and Nova's create_tap_dev do) and opened later by a VMM (QEMU's `-netdev tap,ifname=...`): TUNSETIFF on
/dev/net/tun (the device lands in the namespace of whoever opened the file), TUNSETOWNER/TUNSETGROUP (the VMM's
user or group may attach without CAP_NET_ADMIN) and TUNSETPERSIST (the device outlives this file, and the agent).

No multiqueue: a VMM attaching with it (`queues=N`) would be refused, as the kernel insists the flag matches; the
vnet header is the VMM's choice per attach. Both dataplanes make their taps here; each marks them its own way
(linux/vm_ports.py, ovn/tapdev.py) before or after they persist."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections.abc import Callable

from cloudnet.dataplane.kernel import netns

TUN_DEVICE = "/dev/net/tun"
TUNSETIFF, TUNSETPERSIST, TUNSETOWNER, TUNSETGROUP = 0x400454CA, 0x400454CB, 0x400454CC, 0x400454CE
IFF_TAP, IFF_NO_PI, IFF_VNET_HDR, IFF_TUN_EXCL = 0x0002, 0x1000, 0x4000, 0x8000


class TapExists(OSError):
    """A device of that name exists already (anybody's): an exclusive make fails rather than attach to it."""


def ifreq(name: str, flags: int = 0) -> bytes:
    """TUNSETIFF's argument for the tap `name` (as QEMU asks, less the vnet header, plus `flags`)."""
    return struct.pack("16sH22x", name.encode(), IFF_TAP | IFF_NO_PI | flags)


def make_persistent(
    name: str, uid: int, gid: int, *, ns: str | None = None, exclusive: bool = True,
    before_persist: Callable[[], None] | None = None,
) -> None:  # fmt: skip
    """A persistent tap `name` owned by `uid`/`gid` (-1: none), in namespace `ns` (None: the calling thread's).
    `exclusive`: a device of that name, anybody's, is TapExists rather than attached to. `before_persist` runs
    while the tap still goes with this call's descriptor (a mark set there is on every tap that outlives it)."""
    if ns is None:
        fd = os.open(TUN_DEVICE, os.O_RDWR | os.O_CLOEXEC)
    else:
        with netns.entered(ns):
            fd = os.open(TUN_DEVICE, os.O_RDWR | os.O_CLOEXEC)
    try:
        try:
            fcntl.ioctl(fd, TUNSETIFF, ifreq(name, IFF_TUN_EXCL if exclusive else 0))
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                raise TapExists(exc.errno, f"a device named {name} exists") from None
            raise
        if uid >= 0:
            fcntl.ioctl(fd, TUNSETOWNER, uid)
        if gid >= 0:
            fcntl.ioctl(fd, TUNSETGROUP, gid)
        if before_persist is not None:
            before_persist()
        fcntl.ioctl(fd, TUNSETPERSIST, 1)
    finally:
        os.close(fd)  # (persistent: the device stays, with no reader until a VMM attaches)

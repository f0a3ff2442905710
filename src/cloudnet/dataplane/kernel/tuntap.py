"""Persistent tap devices for VM NICs, made with the tun driver's ioctls (rtnetlink cannot make one; as `ip tuntap
add` and Nova's create_tap_dev do) and opened later by a VMM (QEMU's `-netdev tap,ifname=...`): TUNSETIFF on
/dev/net/tun (the device lands in the namespace of whoever opened the file), TUNSETOWNER/TUNSETGROUP (the VMM's
user or group may attach without CAP_NET_ADMIN) and TUNSETPERSIST (the device outlives this file, and the agent).

No multiqueue: a VMM attaching with it (`queues=N`) would be refused, as the kernel insists the flag matches; the
vnet header is the VMM's choice per attach. Both dataplanes make their taps here and mark them the same way: a
tap's name is Nova's ("tap" + port id), which anybody may use, so cloudnet's carry their alias (IFLA_IFALIAS)
"cloudnet:<host hash>:<port id>", and only a tap with this host's mark is ever adopted or removed."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
from collections.abc import Callable
from typing import Any

from cloudnet.dataplane.kernel import netns

TUN_DEVICE = "/dev/net/tun"
TUNSETIFF, TUNSETPERSIST, TUNSETOWNER, TUNSETGROUP = 0x400454CA, 0x400454CB, 0x400454CC, 0x400454CE
IFF_TAP, IFF_NO_PI, IFF_VNET_HDR, IFF_TUN_EXCL = 0x0002, 0x1000, 0x4000, 0x8000


MARK = "cloudnet:"


def mark(host: str, port_id: str) -> str:
    """The alias of the tap cloudnet made for this host's port (short whatever the host's name: IFALIASZ)."""
    return f"{mark_prefix(host)}{port_id}"


def mark_prefix(host: str) -> str:
    return f"{MARK}{hashlib.sha1(host.encode()).hexdigest()[:6]}:"


def is_marked(alias: str | None, host: str) -> bool:
    """Is a device with this alias a VM tap cloudnet made for `host`?"""
    return bool(alias) and str(alias).startswith(mark_prefix(host))


def marked(ipr: Any, host: str) -> dict[str, int]:
    """This host's taps (by their mark) in the namespace of `ipr` (an IPRoute): name -> ifindex."""
    return {str(link.get_attr("IFLA_IFNAME")): int(link["index"]) for link in ipr.get_links()
            if is_marked(link.get_attr("IFLA_IFALIAS"), host)}  # fmt: skip


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

"""Persistent tap devices for VM NICs: made by cloudnet, opened by a VMM (QEMU's `-netdev tap,ifname=...`).

A tap is made with the tun driver's ioctls (rtnetlink cannot make one): `/dev/net/tun` opened by a thread in the
target namespace (the device lands in the namespace of whoever opened the file), TUNSETIFF with IFF_TUN_EXCL (only
a new device: one of that name, anybody's, fails EBUSY rather than being attached to), TUNSETOWNER/TUNSETGROUP
(the VMM's user may attach without CAP_NET_ADMIN) and TUNSETPERSIST (the device outlives this file, and the agent;
the VMM attaches to it by name later). IFF_MULTI_QUEUE is not set: a VMM attaching with it (`queues=N`) would be
refused, as the kernel insists the flag matches; IFF_VNET_HDR is what QEMU asks for anyway (it is per attach).

The device is born down, off any bridge, under a name of cloudnet's (names.VM_TAP_NEW: a crash right after leaves
a device garbage collection recognises); the caller marks, configures and renames it before it goes up.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct

TUN_DEVICE = "/dev/net/tun"
TUNSETIFF = 0x400454CA
TUNSETPERSIST = 0x400454CB
TUNSETOWNER = 0x400454CC
TUNSETGROUP = 0x400454CE
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
IFF_TUN_EXCL = 0x8000
IFNAMSIZ = 16


class TapExists(OSError):
    """A device of that name exists already (anybody's)."""


def create_persistent(name: str, uid: int, gid: int) -> None:
    """A new persistent tap `name` owned by `uid`/`gid`, in the calling thread's network namespace, down."""
    fd = os.open(TUN_DEVICE, os.O_RDWR | os.O_CLOEXEC)
    try:
        request = struct.pack(f"{IFNAMSIZ}sH", name.encode(), IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | IFF_TUN_EXCL)
        try:
            fcntl.ioctl(fd, TUNSETIFF, request)
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                raise TapExists(exc.errno, f"a device named {name} exists") from None
            raise
        fcntl.ioctl(fd, TUNSETOWNER, uid)
        fcntl.ioctl(fd, TUNSETGROUP, gid)
        fcntl.ioctl(fd, TUNSETPERSIST, 1)
    finally:
        os.close(fd)  # (persistent: the device stays, with no reader until a VMM attaches)

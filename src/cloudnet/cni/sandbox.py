"""What the plugin itself looks at in a container's namespace: that a path is one, and (CHECK) the interface the
agent plugged there."""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import stat
import struct

from cloudnet.cni.errors import CHECK_FAILED, INVALID_ENV, CniError

NS_GET_NSTYPE = 0xB703  # ioctl on a namespace file: its CLONE_NEW* type (ENOTTY on anything else)
CLONE_NEWNET = 0x40000000
SIOCGIFHWADDR = 0x8927
LIBC = ctypes.CDLL(None, use_errno=True)  # setns(2): os.setns is Python 3.12's


def check_is_netns(path: str, label: str = "CNI_NETNS") -> None:
    """The path holds a network namespace (the agent checks again, and more, before it enters it; this turns a
    wrong path into the runtime's error at once, instead of an instance that never comes up)."""
    try:  # a namespace file is a regular file (also through /proc/PID/ns/net): nothing else is opened
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise CniError(INVALID_ENV, f"{label} {path} is not a network namespace")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise CniError(INVALID_ENV, f"{label} {path} cannot be opened: {exc.strerror}") from None
    try:
        kind = fcntl.ioctl(fd, NS_GET_NSTYPE)
    except OSError:
        kind = None
    finally:
        os.close(fd)
    if kind != CLONE_NEWNET:
        raise CniError(INVALID_ENV, f"{label} {path} is not a network namespace")


def enter_and_check(path: str, ifname: str, mac: str) -> None:
    """Join the namespace (the process's last act: nothing on the host's loopback is reachable afterwards) and
    compare `ifname`'s MAC with the port's."""
    check_is_netns(path)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if LIBC.setns(fd, CLONE_NEWNET) != 0:
            raise CniError(CHECK_FAILED, f"cannot enter {path}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            answer = fcntl.ioctl(sock.fileno(), SIOCGIFHWADDR, struct.pack("256s", ifname.encode()))
        except OSError:
            raise CniError(CHECK_FAILED, f"no interface {ifname} in {path}") from None
    found = ":".join(f"{b:02x}" for b in answer[18:24])
    if found != mac.lower():
        raise CniError(CHECK_FAILED, f"{ifname} in {path} has MAC {found}, its port {mac}")

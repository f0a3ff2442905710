"""Network namespaces: create/remove by name, and enter one on the current thread.

Entering uses setns(2) on the calling thread only (Python 3.11 has no os.setns), so that netlink and
nftables sockets opened inside belong to that namespace without forking a helper process.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2 import netns as pr_netns

RUN_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceMissing(LookupError):
    pass


def path_of(name_or_path: str) -> str:
    """A namespace name (under /run/netns) or a path such as /proc/PID/ns/net, as a path."""
    return name_or_path if "/" in name_or_path else str(RUN_DIR / name_or_path)


def exists(name_or_path: str) -> bool:
    return os.path.exists(path_of(name_or_path))


def ensure(name: str) -> None:
    if not exists(name):
        pr_netns.create(name)
    with iproute(name) as ipr:
        lo = ipr.link_lookup(ifname="lo")
        if lo:
            ipr.link("set", index=lo[0], state="up")


def remove(name: str) -> None:
    if exists(name):
        pr_netns.remove(name)


def names(prefix: str) -> list[str]:
    if not RUN_DIR.is_dir():
        return []
    return sorted(p.name for p in RUN_DIR.iterdir() if p.name.startswith(prefix))


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def entered(name_or_path: str) -> Iterator[None]:
    """Run the body with the current thread inside the namespace; always comes back."""
    try:
        target = os.open(path_of(name_or_path), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NamespaceMissing(name_or_path) from None
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


@contextmanager
def iproute(name_or_path: str | None) -> Iterator[IPRoute]:
    """An rtnetlink socket bound to the namespace (None: the agent's own)."""
    if name_or_path is None:
        ipr = IPRoute()
    else:
        with entered(name_or_path):
            ipr = IPRoute()
    try:
        yield ipr
    finally:
        ipr.close()


def fd_of(name_or_path: str) -> int:
    try:
        return os.open(path_of(name_or_path), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NamespaceMissing(name_or_path) from None


def write_sysctl(name_or_path: str, key: str, value: str) -> None:
    """Set a per-namespace sysctl (e.g. net/ipv4/ip_forward) inside the namespace."""
    with entered(name_or_path):
        fd = os.open(f"/proc/sys/{key}", os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

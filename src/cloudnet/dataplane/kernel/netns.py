"""Network namespaces: create/remove by name, and enter one on the current thread.

Entering uses setns(2) on the calling thread only (Python 3.11 has no os.setns), so that netlink and
nftables sockets opened inside belong to that namespace without forking a helper process.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2 import netns as pr_netns

RUN_DIR = Path("/run/netns")
AGENT_NS = f"/proc/{os.getpid()}/ns/net"  # the process's (its main thread's) network namespace
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceMissing(LookupError):
    pass


def path_of(name_or_path: str) -> str:
    """A namespace name (under /run/netns) or a path such as /proc/PID/ns/net, as a path."""
    return name_or_path if "/" in name_or_path else str(RUN_DIR / name_or_path)


def exists(name_or_path: str) -> bool:
    return os.path.exists(path_of(name_or_path))


MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20
_shared_run_dir = False


def _share_run_dir() -> None:
    """Make RUN_DIR a shared mount, as `ip netns add` does, so that namespaces mounted here are seen from
    other mount namespaces (a container runtime's) too. Once per process."""
    global _shared_run_dir
    if _shared_run_dir:
        return
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    target = str(RUN_DIR).encode()

    def share() -> bool:
        return _libc.mount(b"none", target, b"none", MS_SHARED | MS_REC, None) == 0

    # Not a mount point yet: bind it onto itself first.
    if not share() and (_libc.mount(target, target, b"none", MS_BIND | MS_REC, None) != 0 or not share()):
        err = ctypes.get_errno()
        raise OSError(err, f"sharing {RUN_DIR}: {os.strerror(err)}")
    _shared_run_dir = True


def create(name: str) -> None:
    """A new, empty namespace mounted at RUN_DIR/name. Made on the calling thread (unshare, bind-mount its
    namespace, setns back): about 0.5 ms, where pyroute2's netns.create forks a process (about 5 ms)."""
    _share_run_dir()
    path = path_of(name)
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0))
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            unshare()
        except OSError:
            os.unlink(path)
            raise
        try:
            if _libc.mount(b"/proc/thread-self/ns/net", path.encode(), b"none", MS_BIND, None) != 0:
                err = ctypes.get_errno()
                os.unlink(path)
                raise OSError(err, f"mounting namespace {name}: {os.strerror(err)}")
            _loopback_up()
        finally:
            _setns(own)
    finally:
        os.close(own)


def unshare() -> None:
    """Move the calling thread into a new, unnamed network namespace of its own (it goes when nothing holds it)."""
    if _libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")


def _loopback_up() -> None:
    """Bring up `lo` of the calling thread's namespace (two ioctls: cheaper than a netlink socket)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = bytearray(struct.pack("16sH22x", b"lo", 0))
        fcntl.ioctl(sock, SIOCGIFFLAGS, request)
        flags = struct.unpack_from("H", request, 16)[0]
        if not flags & IFF_UP:
            struct.pack_into("H", request, 16, flags | IFF_UP)
            fcntl.ioctl(sock, SIOCSIFFLAGS, request)


def ensure(name: str) -> None:
    """The namespace exists, with `lo` up."""
    if not exists(name):
        create(name)
        return
    with entered(name):
        _loopback_up()


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
def entered(ns: str | int) -> Iterator[None]:
    """Run the body with the current thread inside the namespace (a name, a path, or an open descriptor, which
    stays open); always comes back."""
    target = fd_of(ns)
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
def iproute(name_or_path: str | int | None) -> Iterator[IPRoute]:
    """An rtnetlink socket bound to the namespace (None: the agent's own, the process's, whatever namespace this
    thread is in). Use it on this thread only: pyroute2 opens a socket of its own for every other thread that
    uses the object, in the namespace that thread is in at the time."""
    with entered(AGENT_NS if name_or_path is None else name_or_path):
        ipr = IPRoute()
    try:
        yield ipr
    finally:
        ipr.close()


def fd_of(ns: str | int) -> int:
    """A descriptor of the namespace (the caller closes it): opened by name or path, or a copy of one open."""
    if isinstance(ns, int):
        return os.dup(ns)
    try:
        return os.open(path_of(ns), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NamespaceMissing(ns) from None


def enter_for_good(name: str) -> None:
    """Move the calling thread into the namespace for the rest of its life (a worker that works there)."""
    fd = fd_of(name)
    try:
        _setns(fd)
    finally:
        os.close(fd)


def write_sysctl(name_or_path: str | None, key: str, value: str) -> None:
    """Set a per-namespace sysctl (e.g. net/ipv4/ip_forward) inside the namespace (None: the calling thread's)."""
    with entered(name_or_path) if name_or_path is not None else contextlib.nullcontext():
        fd = os.open(f"/proc/sys/{key}", os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

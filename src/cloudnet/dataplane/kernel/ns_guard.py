"""Which network namespace an instance may be plugged into: checked by the agent before it touches one.

An instance names its namespace (admin and the service role may name an existing one; services/instances.py), and
the agent is about to create devices inside it, move them, set addresses and routes. So before it enters, it opens
the namespace itself, safely, and checks what it got:

- opened without following symbolic links (openat2 RESOLVE_NO_SYMLINKS, or a walk with O_NOFOLLOW on kernels
  before 5.6) and with O_PATH, so nothing is opened for real: a FIFO cannot block the agent, a device file is not
  opened; `/proc/<pid>/ns/net` is the one link followed (a namespace link cannot point at anything but a
  namespace), and `/var/run/` is read as `/run/` where it is the usual link to it;
- it must be a file of nsfs holding a network namespace (NS_GET_NSTYPE), not a regular file (`/etc/hostname`);
- not the agent's own namespace nor the host's (PID 1's), not one cloudnet made (host, routers, metadata, pool
  devices, other instances' namespaces cloudnet provides), and not the namespace of another instance of this host
  (the instance already plugged there keeps it; else the first by creation).

The descriptor it returns is what the agent then uses (setns, IFLA_NET_NS_FD): no second look-up by path.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cloudnet import namespaces
from cloudnet.dataplane.kernel import netns

NS_GET_NSTYPE = 0xB703  # _IO(0xb7, 0x3)
SYS_OPENAT2 = 437  # the same number on every architecture (the generic table)
RESOLVE_NO_SYMLINKS = 0x04
AT_FDCWD = -100
_PROC_NS = re.compile(r"/proc/([0-9]+)/ns/net")
_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceRefused(Exception):
    """The namespace an instance names is not one the agent may plug it into; str() says why."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@dataclass(frozen=True)
class Identity:
    dev: int
    ino: int

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(st.st_dev, st.st_ino)


def _openat2(path: str, flags: int, resolve: int) -> int:
    how = _OpenHow(flags, 0, resolve)
    fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_long(AT_FDCWD), ctypes.c_char_p(path.encode()),
                       ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))  # fmt: skip
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def _walk_nofollow(path: str, directory: bool = False) -> int:
    """O_PATH descriptor of `path`, each component opened with O_NOFOLLOW (for kernels without openat2)."""
    parts = [p for p in path.split("/") if p]
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if not last or directory else 0)
            nxt = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
        if stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH|O_NOFOLLOW opens the link itself
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_path(path: str, directory: bool = False) -> int:
    flags = os.O_PATH | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        return _openat2(path, flags, RESOLVE_NO_SYMLINKS)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
    return _walk_nofollow(path, directory)


def _spelled(name_or_path: str) -> str:
    """The path to open (namespaces.spelled; /var/run read as /run where it is the usual link to it)."""
    try:
        path = namespaces.spelled(name_or_path)
    except ValueError as exc:
        raise NamespaceRefused(f"{name_or_path!r}: {exc}") from None
    if path.startswith("/var/run/") and os.path.realpath("/var/run") == "/run":
        return "/run/" + path[len("/var/run/") :]
    return path


def _open_o_path(path: str) -> int:
    proc = _PROC_NS.fullmatch(path)
    try:
        if proc is None:
            return _open_path(path)
        directory = _open_path(f"/proc/{proc.group(1)}/ns", directory=True)
        try:
            return os.open("net", os.O_PATH | os.O_CLOEXEC, dir_fd=directory)  # the namespace link, followed
        finally:
            os.close(directory)
    except FileNotFoundError:
        raise netns.NamespaceMissing(path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NamespaceRefused(f"{path} goes through a symbolic link") from None
        if exc.errno == errno.ENOTDIR:
            raise netns.NamespaceMissing(path) from None
        raise NamespaceRefused(f"{path} cannot be opened: {exc.strerror}") from None


_nsfs_dev: int | None = None


def _nsfs() -> int:
    global _nsfs_dev
    if _nsfs_dev is None:
        _nsfs_dev = os.stat("/proc/thread-self/ns/net").st_dev
    return _nsfs_dev


def open_network_namespace(name_or_path: str) -> int:
    """A descriptor (O_RDONLY, for setns) of the network namespace at `name_or_path`, or NamespaceMissing /
    NamespaceRefused. Never follows a link (but a /proc namespace link), never blocks, never opens a non-nsfs file."""
    path = _spelled(name_or_path)
    fd = _open_o_path(path)
    try:
        st = os.fstat(fd)
        if st.st_dev != _nsfs() or not stat.S_ISREG(st.st_mode):
            raise NamespaceRefused(f"{path} is not a namespace (a {_kind(st.st_mode)} outside nsfs)")
        ns = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)  # the same nsfs inode, opened for real
    finally:
        os.close(fd)
    try:
        kind = fcntl.ioctl(ns, NS_GET_NSTYPE)
    except OSError as exc:
        os.close(ns)
        raise NamespaceRefused(f"{path} is not a namespace: {exc.strerror}") from None
    if kind != netns.CLONE_NEWNET:
        os.close(ns)
        raise NamespaceRefused(f"{path} is not a network namespace")
    return ns


def _kind(mode: int) -> str:
    for test, label in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
                        (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISREG, "file")):  # fmt: skip
        if test(mode):
            return label
    return "special file"


def _identity(path: str) -> Identity | None:
    try:
        return Identity.of(os.stat(path))  # (stat opens nothing: a FIFO or a device cannot block it)
    except OSError:
        return None


def _named_identity(name_or_path: str) -> Identity | None:
    """What an instance's netns names, reached as `open_network_namespace` reaches it (no symbolic links): a
    spelling the agent would refuse claims nothing."""
    try:
        fd = _open_o_path(_spelled(name_or_path))
    except (NamespaceRefused, netns.NamespaceMissing):
        return None
    try:
        return Identity.of(os.fstat(fd))
    finally:
        os.close(fd)


class InstanceNamespaces:
    """One pass's view of what the namespaces of this host are, built on first use: what instances may not use."""

    def __init__(self, host: str, instances: Iterable[dict[str, Any]], plugged: Iterable[str] = ()) -> None:
        """`plugged`: instances the driver has already plugged (they keep their namespace, whatever came later)."""
        self.host = host
        plugged = set(plugged)
        # Incumbents first, then by creation (the desired state's order: created_at has whole seconds, so two
        # instances of one second are ordered by id, which says nothing about which came first).
        # (a VM has no namespace: its NICs are taps in the host's)
        self.instances = sorted((i for i in instances if i.get("netns")), key=lambda i: i["id"] not in plugged)
        self._built = False
        self._special: dict[Identity, str] = {}  # the host's and the agent's own: why not
        self._made: dict[Identity, str] = {}  # namespaces cloudnet made: their names
        self._claimed: dict[Identity, str] = {}  # namespace -> the instance that has it

    def _build(self) -> None:
        for name in netns.names(namespaces.RESERVED_NS_PREFIX):
            ident = _identity(str(netns.RUN_DIR / name))
            if ident is not None:
                self._made[ident] = name
        for path, why in (("/proc/1/ns/net", "the host's network namespace (PID 1's)"),
                          (netns.AGENT_NS, "the agent's own network namespace")):  # fmt: skip
            ident = _identity(path)  # (PID 1's is unreadable in some sandboxes: then the agent's stands for it)
            if ident is not None:
                self._special[ident] = why
        for inst in self.instances:  # the first naming a namespace keeps it
            ident = _named_identity(inst["netns"])
            if ident is not None:
                self._claimed.setdefault(ident, inst["id"])
        self._built = True  # (last: a view that failed half-way is built again, never used half-empty)

    def made(self, name: str) -> None:
        """A namespace cloudnet made during this pass (after the view was built)."""
        if self._built and (ident := _identity(str(netns.RUN_DIR / name))) is not None:
            self._made[ident] = name

    def open(self, inst: dict[str, Any], claim: bool = True) -> int:
        """A checked descriptor of the instance's namespace (the caller closes it). `claim` False: a device is only
        being taken back out of it (a released VF or pool device), which the instance living there does not
        prevent."""
        if not self._built:
            self._build()
        fd = open_network_namespace(inst["netns"])
        try:
            ident = Identity.of(os.fstat(fd))
            if ident in self._special:
                raise NamespaceRefused(f"{inst['netns']} is {self._special[ident]}")
            made = self._made.get(ident)
            # Only a namespace cloudnet provided for this very instance (it is named after it), never another.
            if made is not None and not (made == inst["netns"] and namespaces.is_managed_ns(self.host, made)):
                raise NamespaceRefused(f"{inst['netns']} is a namespace cloudnet made ({made})")
            holder = self._claimed.setdefault(ident, inst["id"]) if claim else inst["id"]
            if holder != inst["id"]:
                raise NamespaceRefused(f"{inst['netns']} is the network namespace of instance {holder}")
        except BaseException:
            os.close(fd)
            raise
        return fd

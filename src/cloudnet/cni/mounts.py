"""A host directory bind-mounted, read-only, into another process's mount namespace with the new mount API
(open_tree, mount_setattr, move_mount: Linux 5.12+), without following anything the container's image holds.

The tree is cloned in the host's namespace (where the directory is), made read-only, nosuid, nodev and noexec
while still detached, then attached from inside the container's mount namespace (setns) on a directory reached
one component at a time with O_NOFOLLOW from the container's root: an image whose path is a symlink (to a host
path, before pivot_root) gets an error, not a mount somewhere else.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Iterator

LIBC = ctypes.CDLL(None, use_errno=True)
# The same numbers on every architecture (added after the syscall tables were unified).
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE = 1
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x04, 0x40
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 0x1, 0x2, 0x4, 0x8
CLONE_NEWNS = 0x00020000


class MountError(Exception):
    """The mount could not be made (the message says which step and why)."""


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]  # fmt: skip


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise MountError(f"{what}: {os.strerror(err)}")
    return result


@contextlib.contextmanager
def _closing(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def clone_read_only(directory_fd: int) -> int:
    """A detached copy of the mount tree at `directory_fd` (an O_PATH directory), read-only, nosuid, nodev, noexec;
    the caller closes it (closing an unattached tree unmounts it)."""
    flags = OPEN_TREE_CLONE | os.O_CLOEXEC | AT_EMPTY_PATH
    tree = _check(LIBC.syscall(SYS_OPEN_TREE, directory_fd, b"", flags), "open_tree")
    attr = MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, 0, 0, 0)
    try:
        _check(LIBC.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr)),
               "mount_setattr")  # fmt: skip
    except BaseException:
        os.close(tree)
        raise
    return tree


def enter_mount_namespace(ns_fd: int) -> None:
    """Join the mount namespace (the calling process must have no other thread: Python's none here)."""
    _check(LIBC.setns(ns_fd, CLONE_NEWNS), "entering the container's mount namespace")


def directory_beneath(root: str, parts: tuple[str, ...]) -> int:
    """An O_PATH descriptor of root/parts..., each part made (0755) when missing and opened with O_NOFOLLOW: a
    symlink or a non-directory on the way is refused."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    for part in parts:
        if part in ("", ".", "..") or "/" in part:
            os.close(fd)
            raise MountError(f"bad path component {part!r}")
        with _closing(fd):
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise MountError(f"cannot make {part} in the container: {exc.strerror}") from None
            try:
                fd = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                kind = "a symlink" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror
                raise MountError(f"{part} in the container's image is {kind}: refusing to mount there") from None
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise MountError("mount point is not a directory")
    return fd


def attach(tree: int, target_fd: int) -> None:
    flags = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
    _check(LIBC.syscall(SYS_MOVE_MOUNT, tree, b"", target_fd, b"", flags), "move_mount")

"""Where the SmartOS metadata sockets live, and how one is put in place (RFD 69, reference/metadata.md §3.5).

One socket per instance, at <state>/zonecontrol/<uuid>/metadata.sock. The directory lives outside any instance
root, and a runtime bind-mounts it read-only into the instance (e.g. at /.zonecontrol), so a guest can neither
plant symlinks the agent would follow nor carry a stale socket in a snapshot. The socket file is created under
a temporary name and renamed into place, so the path never points at nothing while it is replaced, and a
directory already bind-mounted sees the new socket. A VM's serial socket (mdata_serial) is put in place the same
way, with the VMM's group instead of the whole world.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from cloudnet.wire.mdata_paths import SOCKET_NAME

log = logging.getLogger("cloudnet.mdata")

BACKLOG = 64


@dataclass(frozen=True)
class Access:
    """Who may reach a socket: its directory's and its own mode, and their group (None: the agent's)."""

    dir_mode: int
    socket_mode: int
    gid: int | None = None


# A zone socket: any process of the instance connects through the read-only bind mount of its directory.
ZONE = Access(0o755, 0o666)


def bind(
    directory: Path, serial: int, name: str = SOCKET_NAME, *, access: Access = ZONE
) -> tuple[socket.socket, tuple[int, int]]:
    """A listening socket renamed into place at `directory`/`name`, and its file's (st_dev, st_ino).

    Bound under a temporary name through an O_NOFOLLOW descriptor of the directory (also short enough for
    sun_path whatever the state directory), then renamed over the final name: atomic for clients. `serial`
    makes the temporary name unique within this process."""
    ensure_directory(directory, access)
    tmp = f".{name}.{os.getpid()}.{serial}"
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        sock.bind(f"/proc/self/fd/{dfd}/{tmp}")
        if access.gid is not None:
            os.chown(tmp, -1, access.gid, dir_fd=dfd, follow_symlinks=False)
        os.chmod(tmp, access.socket_mode, dir_fd=dfd)  # the directory is ours (O_NOFOLLOW): tmp is our socket
        st = os.stat(tmp, dir_fd=dfd, follow_symlinks=False)
        sock.listen(BACKLOG)
        sock.setblocking(False)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    finally:
        os.close(dfd)
    return sock, (st.st_dev, st.st_ino)


def lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None


def listening(path: Path) -> bool:
    """Whether a server accepts connections on the socket file at `path` (a stale file: nobody does)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(str(path))
        return True
    except BlockingIOError:  # backlog full: someone listens, but is busy
        return True
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            log.debug("probing %s: %s", path, exc)
        return False
    finally:
        probe.close()


def ensure_directory(directory: Path, access: Access = ZONE) -> None:
    """A real directory (never a symlink: one planted there is removed, not followed) with `access`'s mode
    and group."""
    st = lstat(directory)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        directory.unlink()
        st = None
    if st is None:
        directory.mkdir(mode=access.dir_mode)
    if access.gid is not None:
        os.chown(directory, -1, access.gid, follow_symlinks=False)
    os.chmod(directory, access.dir_mode, follow_symlinks=False)


def remove_directory(directory: Path, socket_name: str = SOCKET_NAME) -> None:
    try:
        for name in os.listdir(directory):
            if name.startswith(f".{socket_name}."):  # a temporary name left by a crash mid-bind
                with contextlib.suppress(OSError):
                    os.unlink(directory / name)
        directory.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        # Still bind-mounted by a runtime (EBUSY), or holding something else: leave it, say so.
        log.warning("cannot remove %s: %s", directory, exc)

"""The API's listening socket, bound before anything else starts: a second `cloudnet up` on the same address is
told in one line which process already serves it, instead of failing deep inside the server."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path


class AddressInUse(OSError):
    pass


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (OSError: cannot; AddressInUse: another process holds it)."""
    family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT of a previous run is no obstacle
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(exc.errno, in_use_message(host, port)) from None
        raise
    return sock


def in_use_message(host: str, port: int) -> str:
    url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
    pid = listener_pid(port)
    if pid is None:
        return f"{url} is in use by another process"
    argv = _argv(pid)
    if any(os.path.basename(arg) == "cloudnet" for arg in argv[:2]):  # the script, or python running it
        return f"cloudnet already runs (pid {pid}, {url})"
    return f"{url} is in use by another process (pid {pid}, {' '.join(argv)[:200] or '?'})"


def listener_pid(port: int, proc: Path = Path("/proc")) -> int | None:
    """The process holding a TCP socket listening on `port` (None: unknown, e.g. not ours to see)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local address HEX:PORT, state 0A = LISTEN, inode
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(entry.name)
        except OSError:  # gone, or not ours to look into
            continue
    return None


def _argv(pid: int) -> list[str]:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []

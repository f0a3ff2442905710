"""What the metadata socket tests share (tests/integration/test_mdata.py, test_mdata_serial.py): services that
stop with the test, a bare SmartOS metadata protocol connection (for what real clients never send), small waits."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.wire.mdata_protocol import new_reqid, parse_v2_response, v2_request


@contextmanager
def mdata_services(
    state_dir: Path, client: ApiClient, desired: Callable[[], dict[str, Any]], **defaults: Any
) -> Iterator[Callable[..., MdataService]]:
    """A function that starts an MdataService following `desired()` as the agent would (options over
    `defaults`); every one started is closed on leaving."""
    started: list[MdataService] = []

    def start(**options: Any) -> MdataService:
        svc = MdataService(state_dir, client, **{**defaults, **options})
        started.append(svc)
        svc.update(desired())
        return svc

    try:
        yield start
    finally:
        for svc in started:
            svc.close()


class Raw:
    """A bare protocol connection, for what real clients never send."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self, timeout: float = 5.0) -> bytes | None:
        """The next line, or None if nothing arrives within `timeout`."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return None
            assert data, "the service closed the connection"
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def request(self, op: str, arg: bytes | None = None) -> tuple[str, bytes | None]:
        rid = new_reqid()
        self.send(v2_request(rid, op, arg))
        line = self.line()
        assert line is not None, f"no answer to {op}"
        answer = parse_v2_response(line, rid)
        assert answer is not None, line
        return answer.code, answer.value


def stored(api: httpx.Client, instance_id: str) -> dict[str, Any]:
    return dict(api.get(f"/instances/{instance_id}/metadata").json())


def wait_for(check: Callable[[], bool], timeout: float = 10, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # polling the socket path the service is expected to recreate


def closed_by_peer(raw: Raw, timeout: float = 5) -> bool:
    raw.sock.settimeout(timeout)
    try:
        return raw.sock.recv(100) == b""
    except ConnectionResetError:  # aborted, unread data and all
        return True


def deleted_with_its_instance(svc: MdataService, api: httpx.Client, instance_id: str, path: Path) -> None:
    """Delete the instance whose socket is `path`: once the service follows, the socket's directory is gone
    and a connection held on it is closed."""
    held = Raw(str(path))
    try:
        assert api.delete(f"/instances/{instance_id}").status_code == 204
        svc.update(svc.client.desired_state())
        assert not path.parent.exists()
        assert closed_by_peer(held)
    finally:
        held.close()


def stale_socket(path: Path) -> None:
    """A socket file nobody listens on at `path` (its directory made), as a crashed service leaves one."""
    path.parent.mkdir(exist_ok=True)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()


def connectable(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True

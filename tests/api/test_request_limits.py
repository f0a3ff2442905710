"""What a request may cost before it is refused: auth before the body, body size, JSON nesting, /events bounds."""

from __future__ import annotations

import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.api.test_errors import neutron_error
from tests.support.server import RunningServer

LIMIT = 1 << 20


def _connect(server: RunningServer) -> socket.socket:
    url = urlsplit(server.url)
    return socket.create_connection((url.hostname, url.port), timeout=10)


def _head_of_answer(sock: socket.socket, data: bytes = b"") -> bytes:
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _raw(server: RunningServer, head: bytes) -> tuple[socket.socket, bytes]:
    """Send `head` on a fresh connection; the status line and headers of the answer."""
    sock = _connect(server)
    sock.sendall(head)
    return sock, _head_of_answer(sock)


def _post_head(path: str, length: int | None, token: str | None) -> bytes:
    lines = [f"POST /v2.0/{path} HTTP/1.1", "Host: x", "Content-Type: application/json"]
    if token:
        lines.append(f"X-Auth-Token: {token}")
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_auth_is_checked_before_the_body_is_read(server: RunningServer, tokens: dict[str, Any]) -> None:
    # A 200 MB body is announced and none of it sent: the answer comes anyway, so nothing waited for (or read) it.
    sock, head = _raw(server, _post_head("ports", 200 << 20, None))
    with sock:
        assert head.startswith(b"HTTP/1.1 401"), head
        assert b"connection: close" in head.lower()
    sock, head = _raw(server, _post_head("ports", 200 << 20, "no-such-token"))
    with sock:
        assert head.startswith(b"HTTP/1.1 401"), head


def test_an_announced_body_over_the_limit_is_413_unread(server: RunningServer, tokens: dict[str, Any]) -> None:
    sock, head = _raw(server, _post_head("ports", LIMIT + 1, "alice-token"))
    with sock:
        assert head.startswith(b"HTTP/1.1 413"), head
    with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "alice-token"}) as alice:
        neutron_error(alice.post("/networks", content=b" " * (LIMIT + 1)), 413, "RequestEntityTooLarge")
        # Up to the limit, a body is read as usual (here: whitespace around a valid body).
        body = b'{"network": {"name": "n"}}'
        r = alice.post("/networks", content=body + b" " * (LIMIT - len(body)))
        assert r.status_code == 201, r.text


def test_a_chunked_body_is_cut_off_at_the_limit(server: RunningServer, tokens: dict[str, Any]) -> None:
    with _connect(server) as sock:
        sock.sendall(_post_head("networks", None, "alice-token"))
        chunk = b" " * 65536
        sent, answer = 0, b""
        sock.settimeout(0.05)
        deadline = time.monotonic() + 20
        while not answer and time.monotonic() < deadline and sent < 8 * LIMIT:
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                answer = sock.recv(65536)
            except TimeoutError:
                continue
        sock.settimeout(10)
        answer = _head_of_answer(sock, answer)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent <= 4 * LIMIT  # refused once past the limit, not after reading everything sent


def test_json_nesting_is_bounded(api: httpx.Client) -> None:
    deep: Any = "x"
    for _ in range(40):
        deep = {"a": deep}
    message = neutron_error(api.post("/ports", json={"port": {"network_id": "n", "binding:profile": deep}}), 400)
    assert "nested" in message
    # orjson's own limit (1024) is a 400 too, never a RecursionError.
    neutron_error(api.post("/networks", content=b"[" * 5000 + b"]" * 5000), 400, "HTTPBadRequest")
    shallow = {"a": {"b": [{"c": [1, 2]}]}}
    r = api.post("/networks", json={"network": {"name": "n", "description": "d"}, "x": shallow})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(
    "params",
    [{"since": "inf"}, {"since": "nan"}, {"since": "1e30"}, {"since": "-1"}, {"since": str(2**64)}, {"limit": "inf"},
     {"limit": "nan"}, {"limit": "10001"}, {"limit": "-5"}, {"timeout": "nan"}, {"timeout": "inf"},
     {"timeout": "-1"}, {"timeout": "1e999"}, {"timeout": "x"}],
)  # fmt: skip
def test_events_parameters_are_finite_and_bounded(api: httpx.Client, params: dict[str, str]) -> None:
    started = time.monotonic()
    neutron_error(api.get("/events", params=params), 400, "HTTPBadRequest")
    assert time.monotonic() - started < 5  # (timeout=nan used to hang)


def test_events_check_the_caller_before_the_parameters(users: dict[str, httpx.Client]) -> None:
    for params in ({"since": "nan"}, {"timeout": "inf"}, {}):  # another project's events: refused whatever else
        neutron_error(users["alice"].get("/events", params={**params, "project_id": "bob"}), 403, "PolicyNotAuthorized")
    for params in ({"since": "nan"}, {"timeout": "inf"}):  # her own: the parameters are checked
        neutron_error(users["alice"].get("/events", params=params), 400, "HTTPBadRequest")
    r = users["admin"].get("/events", params={"since": "0", "limit": "5", "timeout": "0"})
    assert r.status_code == 200, r.text
    assert len(r.json()["events"]) <= 5

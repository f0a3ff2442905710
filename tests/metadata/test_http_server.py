"""The metadata API's HTTP/1.1 server on its own (wire/http_server.py), over real sockets.

Most tests serve `EchoApp`, a real application of the HTTP layer that answers with what it was asked, so what
is checked is the server: framing, keep-alive, pipelining and answer order, HTTP/1.0, limits, bad requests,
timeouts, Unix sockets and stopping. The last ones pipeline through the metadata application itself."""

from __future__ import annotations

import asyncio
import json
import select
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.metadata import service
from cloudnet.wire.http1 import MAX_HEAD, Request, Response
from cloudnet.wire.http_server import MAX_BODY
from tests.metadata.conftest import SECRET
from tests.support.metadata import RunningMetadata, identity
from tests.support.process import free_port, serve

BIG = 256 * 1024


class EchoApp:
    """Answers every request with a JSON account of it. Paths under /async/ are answered by the coroutine,
    those under /gate/ once `gate` opens; /big answers BIG bytes."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = self.stopped = False
        self.answered = 0

    def answer_now(self, request: Request) -> Response | None:
        if request.path.startswith(("/async/", "/gate/")):
            return None
        self.answered += 1
        if request.path == "/big":
            return Response(200, [("Content-Type", "application/octet-stream")], b"b" * BIG)
        return self._echo(request)

    async def answer(self, request: Request) -> Response:
        self.answered += 1
        if request.path.startswith("/gate/"):
            await asyncio.to_thread(self.gate.wait, 10)
        else:
            await asyncio.sleep(0)
        return self._echo(request)

    def _echo(self, request: Request) -> Response:
        seen = {"method": request.method, "target": request.target, "path": request.path, "version": request.version,
                "headers": request.headers, "body": request.body.decode("latin-1")}  # fmt: skip
        return Response(200, [("Content-Type", "application/json"), ("X-Echo", "1")], json.dumps(seen).encode())

    def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True


class Client:
    """A raw HTTP/1.1 client connection: the test writes bytes, reads whole answers in order."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(address)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def head(self) -> tuple[int, dict[str, str]]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"connection closed before a whole answer: {self.buffer!r}"
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        version, status, _reason = status_line.split(" ", 2)
        assert version == "HTTP/1.1"
        headers: dict[str, str] = {}
        for line in lines:
            name, _sep, value = line.partition(":")
            assert name.lower() not in headers, f"repeated header {name}"
            headers[name.lower()] = value.strip()
        return int(status), headers

    def answer(self, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        status, headers = self.head()
        length = 0 if method == "HEAD" else int(headers["content-length"])
        while len(self.buffer) < length:
            assert self._fill(), "connection closed in the middle of a body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def echo(self) -> dict[str, Any]:
        status, headers, body = self.answer()
        assert status == 200 and headers["x-echo"] == "1", (status, body)
        return dict(json.loads(body))

    def closed(self) -> bool:
        """Whether the server closed the connection (waits for it, up to the socket's timeout)."""
        try:
            return self.buffer == b"" and not self._fill()
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def get(path: str, *headers: str, version: str = "HTTP/1.1") -> bytes:
    return "\r\n".join([f"GET {path} {version}", "Host: metadata", *headers, "", ""]).encode()


def port_of(running: RunningMetadata[Any]) -> int:
    return int(running.url.rsplit(":", 1)[1])


@pytest.fixture
def echo() -> Iterator[RunningMetadata[EchoApp]]:
    running = RunningMetadata.start(EchoApp())
    yield running
    running.stop()


@pytest.fixture
def client(echo: RunningMetadata[EchoApp]) -> Iterator[Client]:
    c = Client(("127.0.0.1", port_of(echo)))
    yield c
    c.close()


# -- requests and answers ---------------------------------------------------------------------------


def test_a_request_as_the_application_sees_it(echo: RunningMetadata[EchoApp], client: Client) -> None:
    assert echo.app.started
    client.send(get("/openstack/latest/meta%5Fdata.json?x=1", "X-Instance-ID: abc  ", "X-Two: a", "x-two: b"))
    seen = client.echo()
    assert seen["method"] == "GET" and seen["version"] == "HTTP/1.1"
    assert seen["target"] == "/openstack/latest/meta%5Fdata.json?x=1"
    assert seen["path"] == "/openstack/latest/meta_data.json"  # decoded, without the query
    # Names lower-cased, values without surrounding white space, repeated headers kept in order.
    assert seen["headers"] == [["host", "metadata"], ["x-instance-id", "abc"], ["x-two", "a"], ["x-two", "b"]]
    client.send(b"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: x\r\n\r\n")
    assert client.echo()["path"] == "/latest/meta-data/"  # absolute-form


def test_answers_are_framed_and_the_connection_kept(client: Client) -> None:
    for n in range(3):
        client.send(get(f"/n/{n}"))
        status, headers, body = client.answer()
        assert status == 200 and json.loads(body)["path"] == f"/n/{n}"
        assert headers["content-length"] == str(len(body)) and headers["content-type"] == "application/json"
        assert headers["connection"] == "keep-alive"


def test_head_gives_the_length_without_the_body(client: Client) -> None:
    client.send(b"HEAD /big HTTP/1.1\r\nHost: x\r\n\r\n" + get("/after"))
    status, headers, body = client.answer("HEAD")
    assert status == 200 and headers["content-length"] == str(BIG) and body == b""
    assert client.echo()["path"] == "/after"  # still in step


def test_pipelined_requests_are_answered_in_order(client: Client) -> None:
    # Sync, async, sync, async, sync in one write: the ones behind an asynchronous answer wait their turn.
    paths = ["/a", "/async/b", "/c", "/async/d", "/e"]
    client.send(b"".join(get(p) for p in paths))
    assert [client.echo()["path"] for _ in paths] == paths
    client.send(get("/f"))  # and the connection reads again afterwards
    assert client.echo()["path"] == "/f"


def test_a_connection_waits_for_a_slow_answer_without_blocking_others(echo: RunningMetadata[EchoApp]) -> None:
    slow, fast = Client(("127.0.0.1", port_of(echo))), Client(("127.0.0.1", port_of(echo)))
    slow.send(get("/gate/1") + get("/after-gate"))
    fast.send(get("/fast"))
    assert fast.echo()["path"] == "/fast"
    echo.app.gate.set()
    assert [slow.echo()["path"], slow.echo()["path"]] == ["/gate/1", "/after-gate"]
    slow.close()
    fast.close()


def test_request_bodies(client: Client) -> None:
    client.send(b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhel")
    client.send(b"lo" + get("/next"))  # the body arrives in two reads, the next request right behind it
    assert client.echo()["body"] == "hello"
    assert client.echo()["path"] == "/next"
    client.send(b"POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert client.echo()["body"] == "abcde"
    client.send(b"PUT /async/p HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok")
    seen = client.echo()
    assert seen["method"] == "PUT" and seen["body"] == "ok"


def test_expect_100_continue(client: Client) -> None:
    client.send(b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
    assert client.head() == (100, {})  # before the body is sent
    client.send(b"body")
    assert client.echo()["body"] == "body"


def test_http_1_0(client: Client, echo: RunningMetadata[EchoApp]) -> None:
    client.send(get("/old", version="HTTP/1.0"))
    status, headers, body = client.answer()
    assert status == 200 and json.loads(body)["version"] == "HTTP/1.0" and headers["connection"] == "close"
    assert client.closed()
    kept = Client(("127.0.0.1", port_of(echo)))
    for _ in range(2):
        kept.send(get("/old", "Connection: keep-alive", version="HTTP/1.0"))
        _status, headers, _body = kept.answer()
        assert headers["connection"] == "keep-alive"
    kept.close()


def test_connection_close_is_honoured(client: Client) -> None:
    client.send(get("/last", "Connection: close") + get("/never"))
    status, headers, _body = client.answer()
    assert status == 200 and headers["connection"] == "close"
    assert client.closed()


def test_half_closed_client_gets_its_queued_answers(client: Client, echo: RunningMetadata[EchoApp]) -> None:
    client.send(get("/gate/1") + get("/2"))
    client.sock.shutdown(socket.SHUT_WR)  # the end of the input comes while the first answer is being worked out
    echo.app.gate.set()
    assert [client.echo()["path"], client.echo()["path"]] == ["/gate/1", "/2"]
    assert client.closed()


# -- what is refused --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"NONSENSE\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",  # space before the colon
        b"GET / HTTP/1.1\r\nX-Instance-ID : spoof\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",  # a space in a name
        b"GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n",
        b"GET /a b HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\nHost: x\n\n",  # bare LF
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_a_malformed_request_is_a_400_and_the_end_of_the_connection(client: Client, request_bytes: bytes) -> None:
    client.send(get("/before") + request_bytes)
    assert client.echo()["path"] == "/before"  # what came before is answered
    status, headers, body = client.answer()
    assert status == 400 and headers["connection"] == "close" and body.startswith(b"Bad request")
    assert client.closed()


def test_an_error_behind_a_pending_answer_waits_its_turn(client: Client) -> None:
    client.send(get("/async/first") + b"NONSENSE\r\n\r\n")
    assert client.echo()["path"] == "/async/first"
    assert client.answer()[0] == 400
    assert client.closed()


@pytest.mark.parametrize("request_bytes", [get("/", version="HTTP/2.0"), b"GET /\r\n\r\n"])  # HTTP/0.9 too
def test_unsupported_http_version(client: Client, request_bytes: bytes) -> None:
    client.send(request_bytes)
    assert client.answer()[0] == 505
    assert client.closed()


def test_an_oversized_head_is_refused(echo: RunningMetadata[EchoApp]) -> None:
    port = port_of(echo)
    fits = Client(("127.0.0.1", port))
    fits.send(get("/", f"X-Pad: {'a' * (MAX_HEAD - 200)}"))
    assert fits.echo()["path"] == "/"
    fits.close()
    for head in (
        get("/", f"X-Pad: {'a' * (MAX_HEAD + 1)}"),
        get("/", *(f"X-Pad-{i}: {'a' * 1000}" for i in range(70))),
    ):
        c = Client(("127.0.0.1", port))
        c.send(head)
        status, headers, body = c.answer()
        assert status == 431 and headers["connection"] == "close" and body == b"Request head too large."
        assert c.closed()
        c.close()


def test_an_unfinished_head_is_refused_once_it_is_too_large(echo: RunningMetadata[EchoApp]) -> None:
    c = Client(("127.0.0.1", port_of(echo)))
    c.send(b"GET / HTTP/1.1\r\nX-Pad: ")
    sent = 0
    while not select.select([c.sock], [], [], 0.01)[0]:  # a header value that never ends, 16 kB at a time
        c.send(b"a" * 16384)
        sent += 16384
        assert sent < 4 * 1024 * 1024, "no answer to an endless head"
    assert c.answer()[0] == 431
    # Within the limit, give or take one read of the server (what the kernel hands over at once).
    assert sent <= MAX_HEAD + 256 * 1024 + 16384
    assert c.closed()
    c.close()


def test_the_refusal_of_a_head_still_being_sent_is_not_lost(echo: RunningMetadata[EchoApp]) -> None:
    """Closing with unread input would reset the connection, and the reset could destroy the 431 on its way:
    the server reads and drops the rest, after its answer and the end of its stream."""
    c = Client(("127.0.0.1", port_of(echo)))
    c.send(b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * (8 * 1024 * 1024) + b"\r\n\r\n")  # fails on a reset
    assert c.answer()[0] == 431
    assert c.buffer == b"" and c.sock.recv(1) == b""  # an orderly end of the stream
    c.close()


def test_an_oversized_body_is_refused(client: Client, echo: RunningMetadata[EchoApp]) -> None:
    client.send(f"POST / HTTP/1.1\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode())
    assert client.answer()[0] == 413  # from the header alone, before any body is sent
    assert client.closed()
    chunked = Client(("127.0.0.1", port_of(echo)))
    chunk = b"a" * 4096
    chunked.send(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunked.send(b"".join(b"1000\r\n" + chunk + b"\r\n" for _ in range(MAX_BODY // len(chunk) + 1)))
    assert chunked.answer()[0] == 413
    assert chunked.closed()
    chunked.close()


# -- slow and idle clients --------------------------------------------------------------------------


@pytest.fixture
def impatient() -> Iterator[RunningMetadata[EchoApp]]:
    running = RunningMetadata.start(EchoApp(), idle_timeout=0.3)
    yield running
    running.stop()


def test_idle_and_slow_clients_are_disconnected(impatient: RunningMetadata[EchoApp]) -> None:
    port = port_of(impatient)
    idle = Client(("127.0.0.1", port))
    idle.send(get("/"))
    idle.echo()
    slow = Client(("127.0.0.1", port))
    slow.send(b"GET / HTTP/1.1\r\nHost: x\r\n")  # a head that never ends
    silent = Client(("127.0.0.1", port))  # never sends anything
    for c in (idle, slow, silent):
        started = time.monotonic()
        assert c.closed()  # the server hangs up (recv waits for it, within the socket timeout)
        assert time.monotonic() - started < 5
        c.close()


def test_a_client_that_does_not_read_is_not_read_from_and_is_dropped(impatient: RunningMetadata[EchoApp]) -> None:
    c = Client(("127.0.0.1", port_of(impatient)))
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    requests = 100
    c.send(get("/big") * requests)  # 25 MB of answers, and the client reads none of them for now
    # The server answers until the client's window and its own buffer are full, then reads and answers no
    # more, and drops the connection once it has waited `idle_timeout` for the client to read.
    deadline = time.monotonic() + 10
    while not impatient.server.connections:  # accepted by the server (the kernel completes connects itself)
        assert time.monotonic() < deadline, "the connection was not accepted"
        time.sleep(0.005)
    while impatient.server.connections:
        assert time.monotonic() < deadline, "the connection was not dropped"
        time.sleep(0.02)
    received = 0
    try:
        while chunk := c.sock.recv(1 << 20):
            received += len(chunk)
    except ConnectionResetError:
        pass
    assert impatient.app.answered < requests / 4 and received < requests * BIG / 4
    c.close()


# -- listening and stopping -------------------------------------------------------------------------


def test_unix_socket(tmp_path: Path) -> None:
    listen = service.parse_listen(f"unix:{tmp_path / 'md.sock'}")
    assert listen is not None
    running = RunningMetadata.start(EchoApp(), service.bind(listen))
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(listen.path))) as http:
            r = http.post("http://metadata/x", content=b"over unix")
            assert r.status_code == 200 and r.json()["body"] == "over unix"
            assert http.get("http://metadata/y").json()["path"] == "/y"  # kept alive
    finally:
        running.stop()


def test_stop_finishes_answers_in_progress_and_closes_idle_connections() -> None:
    running = RunningMetadata.start(EchoApp())
    busy, idle = Client(("127.0.0.1", port_of(running))), Client(("127.0.0.1", port_of(running)))
    busy.send(get("/gate/1"))
    idle.send(get("/"))
    idle.echo()
    stopper = threading.Thread(target=running.stop)
    stopper.start()
    assert idle.closed()  # closed at once, while the answer in progress is still being waited for
    assert not running.app.stopped
    running.app.gate.set()
    status, headers, body = busy.answer()
    assert status == 200 and json.loads(body)["path"] == "/gate/1" and headers["connection"] == "close"
    assert busy.closed()
    stopper.join(10)
    assert not stopper.is_alive() and running.app.stopped
    with pytest.raises(OSError):
        Client(("127.0.0.1", port_of(running)))


# -- the metadata application behind it -----------------------------------------------------------


def test_pipelined_requests_to_the_metadata_api(metadata: RunningMetadata[Any], instance: dict[str, Any]) -> None:
    """The first request loads the instance's view (an asynchronous answer), the others queue behind it."""
    signed = [f"{k}: {v}" for k, v in identity(SECRET, instance["id"], instance["project_id"]).items()]
    c = Client(("127.0.0.1", port_of(metadata)))
    paths = ["/latest/meta-data/instance-id", "/openstack/latest/meta_data.json", "/latest/meta-data/local-ipv4"]
    c.send(b"".join(get(p, *signed) for p in paths) + get("/openstack/latest/user_data", *signed[:2]))
    instance_id, meta, ip = (c.answer()[2] for _ in paths)
    assert instance_id == b"i-" + instance["id"].replace("-", "")[:8].encode()
    assert json.loads(meta)["uuid"] == instance["id"] and ip == b"10.70.0.10"
    status, _headers, body = c.answer()
    assert status == 400 and body == b"X-Instance-ID-Signature header is missing from request."
    c.close()


def test_sigterm_with_open_metadata_connections_exits_cleanly(tmp_path: Path) -> None:
    md_port = free_port()
    with serve(tmp_path / "state", "--metadata-listen", f"127.0.0.1:{md_port}") as (proc, _url):
        c = Client(("127.0.0.1", md_port))
        c.send(get("/"))
        assert c.answer()[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert c.closed()  # the idle keep-alive connection is closed, not waited for
        assert proc.wait(timeout=15) == 0


# -- admission, and what the application is asked -------------------------------------------------------


class OnlyTwo:
    """A Gate admitting two connections at a time; it records what it was told."""

    def __init__(self) -> None:
        self.open: list[Any] = []
        self.released: list[Any] = []

    def admit(self, peer: Any) -> Response | None:
        self.open.append(peer)
        if len(self.open) > 2:
            return Response(429, [("Retry-After", "1")], b"Too many connections.")
        return None

    def release(self, peer: Any) -> None:
        self.open.remove(peer)
        self.released.append(peer)


def test_a_gate_refuses_connections_and_requests_carry_the_peer() -> None:
    gate = OnlyTwo()
    running = RunningMetadata.start(EchoApp(), gate=gate)
    try:
        first, second = Client(("127.0.0.1", port_of(running))), Client(("127.0.0.1", port_of(running)))
        for c in (first, second):
            c.send(get("/x"))
            assert c.echo()["path"] == "/x"
        third = Client(("127.0.0.1", port_of(running)))
        status, headers, body = third.answer()
        assert status == 429 and headers["retry-after"] == "1" and headers["connection"] == "close"
        assert body == b"Too many connections." and third.closed()
        assert third.sock.getsockname() in gate.released  # told about the refused one too
        first.close()
        deadline = time.monotonic() + 10
        while len(gate.open) > 1:
            assert time.monotonic() < deadline, "the gate was not told about the closed connection"
            time.sleep(0.01)
        fourth = Client(("127.0.0.1", port_of(running)))  # room again
        fourth.send(get("/y"))
        assert fourth.echo()["path"] == "/y"
        assert [peer[0] for peer in gate.open] == ["127.0.0.1", "127.0.0.1"]
        for c in (second, third, fourth):
            c.close()
    finally:
        running.stop()


class Counting(EchoApp):
    """Counts the calls of `answer_now`, per path."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: dict[str, int] = {}
        self.peers: list[Any] = []

    def answer_now(self, request: Request) -> Response | None:
        self.asked[request.path] = self.asked.get(request.path, 0) + 1
        self.peers.append(request.peer)
        return super().answer_now(request)


def test_answer_now_is_asked_once_per_request() -> None:
    # An application may count what it is asked (the proxy's rate limit): a request it hands to `answer`
    # is not put to `answer_now` again, alone or pipelined behind others.
    running = RunningMetadata.start(Counting())
    try:
        c = Client(("127.0.0.1", port_of(running)))
        c.send(get("/async/one"))
        assert c.echo()["path"] == "/async/one"
        c.send(get("/async/two") + get("/async/three") + get("/now"))
        assert [c.echo()["path"] for _ in range(3)] == ["/async/two", "/async/three", "/now"]
        assert running.app.asked == {"/async/one": 1, "/async/two": 1, "/async/three": 1, "/now": 1}
        assert {peer for peer in running.app.peers} == {c.sock.getsockname()}
        c.close()
    finally:
        running.stop()


class Prerendered(EchoApp):
    """Answers /wire with a response rendered ahead whose `wire` differs from what rendering would give, so
    a test can tell which one went out."""

    BODY = b"the body"
    WIRE = b"HTTP/1.1 200 OK\r\nX-Wire: 1\r\nContent-Length: 8\r\nConnection: keep-alive\r\n\r\nthe body"

    def answer_now(self, request: Request) -> Response | None:
        if request.path == "/wire":
            return Response(200, [("X-Rendered", "1")], self.BODY, wire=self.WIRE)
        return super().answer_now(request)


def test_a_response_rendered_ahead_goes_out_as_it_is_on_a_kept_alive_get() -> None:
    running = RunningMetadata.start(Prerendered())
    try:
        c = Client(("127.0.0.1", port_of(running)))
        # Pipelined: the answers of one read go out together, and in order.
        c.send(get("/wire") + get("/other") + get("/wire"))
        for _ in range(2):
            status, headers, body = c.answer()
            assert status == 200 and headers["x-wire"] == "1" and body == Prerendered.BODY
            if _ == 0:
                assert c.echo()["path"] == "/other"
        # HEAD, HTTP/1.0 and a last answer are rendered from status, headers and body instead.
        c.send(b"HEAD /wire HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, body = c.answer("HEAD")
        assert headers["x-rendered"] == "1" and headers["content-length"] == "8" and body == b""
        c.send(get("/wire", "Connection: close"))
        status, headers, body = c.answer()
        assert headers["x-rendered"] == "1" and headers["connection"] == "close" and body == Prerendered.BODY
        assert c.closed()
        c.close()
    finally:
        running.stop()


def test_expect_100_continue_behind_an_answer_in_progress(echo: RunningMetadata[EchoApp], client: Client) -> None:
    # The interim answer must not overtake the answer still due before it: it follows that one.
    client.send(get("/gate/1") + b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
    time.sleep(0.2)
    assert select.select([client.sock], [], [], 0)[0] == []  # nothing yet: neither the answer nor the 100
    echo.app.gate.set()
    assert client.echo()["path"] == "/gate/1"
    while b"\r\n\r\n" not in client.buffer:
        assert client._fill()
    assert client.buffer == b"HTTP/1.1 100 Continue\r\n\r\n"
    client.buffer = b""
    client.send(b"abc")
    assert client.echo()["body"] == "abc"

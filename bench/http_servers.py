"""The HTTP/1.1 server decision of issue 19: the hand-written server (wire/http_server.py) against uvicorn with
httptools running a plain ASGI callable, and against h11 (bench/http_candidates.py), side by side.

Speed: the metadata API itself (MetadataApp over the store of a real `cloudnet serve`, one instance) behind each
server in turn, in a child pinned to core 0; GET /openstack/latest/meta_data.json signed as a proxy signs it,
from wrk (or bench/metadata.py's Python client) pinned to core 1, at 1 and 32 connections, as bench/metadata.py
measures "metadata API alone". Hostile input: the refusals tests/metadata/test_http_server.py requires of the
server (smuggling, malformed heads, head and body limits, idle and slow clients), sent raw to each server.

The issue's rule: keep the hand-written server only if it is at least twice as fast at p99 and passes every
hostile-input probe. Usage: .venv/bin/python bench/http_servers.py [--duration 5] [--rounds 3] [--only speed|hostile]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import uvloop
from common import ROOT, free_port, median, ms
from http_candidates import serve_h11, serve_uvicorn

from cloudnet.config import ServerConfig
from cloudnet.metadata.server import MetadataApp
from cloudnet.store.db import Store
from cloudnet.wire import signing
from cloudnet.wire.http1 import MAX_HEAD, Request, Response
from cloudnet.wire.http_server import MAX_BODY, HttpServer
from metadata import PATH, cpu_seconds, python_load, server, wrk

KINDS = ("hand-written", "uvicorn+httptools", "h11")
PROBE_IDLE = 0.5  # the idle timeout of the servers the probes talk to (seconds)


# -- the server child -------------------------------------------------------------------------------------


class EchoApp:
    """What the probes talk to: 200 with the path; `/big` 256 kB; `/count` how many requests were answered."""

    def __init__(self) -> None:
        self.answered = 0

    def answer_now(self, request: Request) -> Response | None:
        if request.path == "/count":
            return Response(200, [], str(self.answered).encode())
        self.answered += 1
        body = b"b" * 262144 if request.path == "/big" else request.path.encode()
        return Response(200, [("Content-Type", "text/plain")], body)

    async def answer(self, request: Request) -> Response:
        return self.answer_now(request) or Response(500, [], b"")

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


def child(args: argparse.Namespace) -> None:
    if args.app == "echo":
        app: Any = EchoApp()
        idle = PROBE_IDLE
    else:
        config = ServerConfig(state_dir=Path(args.state))
        app = MetadataApp(Store(config.database_url), signing.read_secret(config.metadata_secret_file))
        idle = 30.0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    sock.setblocking(False)
    if args.kind == "hand-written":
        server_ = HttpServer(app, idle_timeout=idle)
        signal.signal(signal.SIGTERM, lambda *_: server_.stop())
        main = server_.serve(sock)
    elif args.kind == "uvicorn+httptools":
        main = serve_uvicorn(app, sock, idle)
    else:
        main = serve_h11(app, sock, idle)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


@contextmanager
def running(kind: str, app: str, state: Path | None = None) -> Iterator[tuple[int, int]]:
    port = free_port()
    cmd = ["taskset", "-c", "0", sys.executable, __file__, "--child", kind, "--app", app, "--port", str(port),
           "--state", str(state or "")]  # fmt: skip
    proc = subprocess.Popen(cmd)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the {kind} server did not start") from None
                time.sleep(0.02)  # waiting for the child to listen: polled, with a deadline
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- hostile-input probes -----------------------------------------------------------------------------------


def _get(path: str, *headers: str) -> bytes:
    return "".join([f"GET {path} HTTP/1.1\r\nHost: x\r\n", *(h + "\r\n" for h in headers), "\r\n"]).encode()


class Raw:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return 0, {}, b""
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(self.buf) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        body, self.buf = self.buf[:length], self.buf[length:]
        parts = lines[0].split()
        return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1), headers, body

    def closed(self, within: float = 5.0) -> bool:
        self.sock.settimeout(within)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


MALFORMED = {
    "space before the colon": b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
    "folded header line": b"GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n",
    "space in the target": b"GET /a b HTTP/1.1\r\n\r\n",
    "bare LF line ends": b"GET / HTTP/1.1\nHost: x\n\n",
    "Content-Length and chunked (smuggling)":
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "two Content-Lengths (smuggling)": b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    "negative Content-Length": b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    "malformed chunk size": b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
}  # fmt: skip


def _refused(port: int, data: bytes, status: int, before: bool = False) -> str:
    c = Raw(port)
    try:
        c.sock.sendall(_get("/before") + data if before else data)
        if before and (first := c.answer()[0]) != 200:
            return f"answered {first} to the request before"
        got = c.answer()[0]
        if got != status:
            return f"answered {got or 'nothing'}"
        return "ok" if c.closed() else "kept the connection"
    except OSError as exc:
        return f"error {exc.__class__.__name__}"
    finally:
        c.close()


def _endless_head(port: int) -> str:
    c = Raw(port)
    try:
        c.sock.sendall(b"GET / HTTP/1.1\r\nX-Pad: ")
        sent = 0
        c.sock.setblocking(False)
        while sent < 8 * MAX_HEAD:
            try:
                c.sock.send(b"a" * 16384)
                sent += 16384
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break
            try:
                if c.sock.recv(1, socket.MSG_PEEK):
                    break
            except BlockingIOError:
                pass
        c.sock.setblocking(True)
        c.sock.settimeout(2)
        try:
            got = c.answer()[0]
        except (OSError, TimeoutError):
            got = 0
        return "ok" if got == 431 else f"read {sent // 1024} kB of one head, answered {got or 'nothing'}"
    finally:
        c.close()


def _oversized_chunked(port: int) -> str:
    c = Raw(port)
    try:
        c.sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"1000\r\n" + b"a" * 4096 + b"\r\n"
        with suppress(OSError):
            c.sock.sendall(chunk * (MAX_BODY // 4096 + 1))
        got = c.answer()[0]
        return "ok" if got == 413 and c.closed() else f"answered {got or 'nothing'}"
    except OSError as exc:
        return f"error {exc.__class__.__name__}"
    finally:
        c.close()


def _timed_out(port: int, first: bytes) -> str:
    c = Raw(port)
    try:
        if first:
            c.sock.sendall(first)
        return "ok" if c.closed(within=PROBE_IDLE * 2 + 2) else f"still open after {PROBE_IDLE * 2 + 2:g} s"
    finally:
        c.close()


def _not_reading(port: int) -> str:
    """A client that asks for 25 MB of answers and reads none: the server must stop reading and drop it."""
    before = int(httpx.get(f"http://127.0.0.1:{port}/count", timeout=5).text)
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect(("127.0.0.1", port))
    c.settimeout(10)
    with suppress(OSError):
        c.sendall(_get("/big") * 100)
    time.sleep(PROBE_IDLE * 3 + 1)  # the client's part of the probe: it reads nothing for this long
    answered = int(httpx.get(f"http://127.0.0.1:{port}/count", timeout=5).text) - before
    c.close()
    return "ok" if answered < 25 else f"answered {answered} of 100 to a client that read none"


def probes(port: int) -> dict[str, str]:
    out = {name: _refused(port, data, 400) for name, data in MALFORMED.items()}
    out["pipelined request before a bad one answered"] = _refused(port, MALFORMED["folded header line"], 400, True)
    out["HTTP/2.0 request line: 505"] = _refused(port, _get("/").replace(b"HTTP/1.1", b"HTTP/2.0"), 505)
    out["head over MAX_HEAD: 431"] = _refused(port, _get("/", f"X-Pad: {'a' * (MAX_HEAD + 1)}"), 431)
    out["70 x 1 kB headers: 431"] = _refused(port, _get("/", *(f"X-P{i}: {'a' * 1000}" for i in range(70))), 431)
    out["endless head: 431 near MAX_HEAD"] = _endless_head(port)
    out["Content-Length over MAX_BODY: 413"] = _refused(port, f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "
                                                              f"{MAX_BODY + 1}\r\n\r\n".encode(), 413)  # fmt: skip
    out["chunked body over MAX_BODY: 413"] = _oversized_chunked(port)
    out["idle kept-alive client dropped"] = _timed_out(port, _get("/"))
    out["unfinished head dropped"] = _timed_out(port, b"GET / HTTP/1.1\r\nHost: x\r\n")
    out["silent client dropped"] = _timed_out(port, b"")
    out["client not reading: not read from"] = _not_reading(port)
    return out


# -- the run ---------------------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> None:
    load = wrk if shutil.which("wrk") else python_load
    state = Path(tempfile.mkdtemp(prefix="cloudnet-httpbench-"))
    runs: dict[str, list[dict[int, dict[str, float]]]] = {kind: [] for kind in KINDS}
    try:
        with server(state) as (api_url, _md_url, _pid):
            c = httpx.Client(base_url=api_url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60)
            net = c.post("/networks", json={"network": {"name": "bench"}}).json()["network"]
            c.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.202.0.0/24"}}).raise_for_status()
            c.put("/hosts/httpbench", json={"host": {}}).raise_for_status()
            inst = c.post("/instances", json={"instance": {"name": "vm", "netns": "cnhttpbench", "host": "httpbench",
                                                           "nets": [{"network": net["id"]}]}})  # fmt: skip
            inst.raise_for_status()
            first = inst.json()["instance"]
            secret = signing.read_secret(state / "metadata_secret")
            signed = {"X-Instance-ID": first["id"], "X-Tenant-ID": first["project_id"],
                      "X-Instance-ID-Signature": signing.sign(secret, first["id"])}  # fmt: skip
            for _round in range(args.rounds):  # the servers take turns, so each meets the machine's other work
                for kind in KINDS:
                    with running(kind, "metadata", state) as (port, pid):
                        url = f"http://127.0.0.1:{port}{PATH}"
                        load(url, signed, 1, 1.0, None)  # warm-up: the view loaded, connections made
                        figures_of_round = {}
                        for n in (1, 32):
                            used = cpu_seconds(pid)
                            figures_of_round[n] = load(url, signed, n, args.duration, None)
                            # CPU time per request: what other work on the machine hardly changes
                            requests = figures_of_round[n]["rps"] * args.duration
                            figures_of_round[n]["cpu"] = (cpu_seconds(pid) - used) / requests
                        runs[kind].append(figures_of_round)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    # The median over the rounds of each figure: p99 on a shared machine is mostly other people's work.
    figures = {kind: {n: {key: median([r[n][key] for r in rs]) for key in rs[0][n]} for n in (1, 32)}
               for kind, rs in runs.items()}  # fmt: skip
    print(
        f"GET {PATH} from the metadata API alone ({'wrk' if load is wrk else 'python client'}, medians of "
        f"{args.rounds} rounds of {args.duration:g} s, load average {_load()}):"
    )
    columns = ("1c p50", "1c p99", "1c req/s", "1c CPU/req", "32c p50", "32c p99", "32c req/s", "32c CPU/req")
    print(f"  {'server':<20}" + "".join(f"{c:>12}" for c in columns))
    for kind, f in figures.items():
        cells = [f"{ms(f[n]['p50'])}|{ms(f[n]['p99'])}|{f[n]['rps']:,.0f}|{f[n]['cpu'] * 1e6:.0f} us" for n in (1, 32)]
        print(f"  {kind:<20}" + "".join(f"{c:>12}" for c in "|".join(cells).split("|")))
    hand = figures["hand-written"]
    for kind in KINDS[1:]:
        ratios = [figures[kind][n][key] / hand[n][key] for key in ("p99", "cpu") for n in (1, 32)]
        print(f"  {kind} / hand-written: p99 {ratios[0]:.2f}x at 1 connection, {ratios[1]:.2f}x at 32; "
              f"CPU per request {ratios[2]:.2f}x, {ratios[3]:.2f}x")  # fmt: skip
    for kind, rs in runs.items():
        rounds = ", ".join(f"{ms(r[1]['p99'])} / {ms(r[32]['p99'])}" for r in rs)
        print(f"  p99 per round, 1 / 32 connections, {kind}: {rounds}")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def hostile() -> None:
    results = {}
    for kind in KINDS:
        with running(kind, "echo") as (port, _pid):
            results[kind] = probes(port)
    print(f"hostile input (each server with a {PROBE_IDLE:g} s idle timeout):")
    width = max(len(name) for name in results[KINDS[0]]) + 2
    print(f"  {'probe':<{width}}" + "".join(f"{kind:<24}" for kind in KINDS))
    for name in results[KINDS[0]]:
        print(f"  {name:<{width}}" + "".join(f"{results[kind][name][:23]:<24}" for kind in KINDS))
    for kind in KINDS:
        failed = sum(outcome != "ok" for outcome in results[kind].values())
        print(f"  {kind}: {len(results[kind]) - failed} of {len(results[kind])} probes passed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("speed", "hostile"))
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--app", choices=("echo", "metadata"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.kind = args.child
        return child(args)
    if args.only != "hostile":
        measure(args)
    if args.only != "speed":
        hostile()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    main()

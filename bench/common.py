"""Shared helpers for the benchmarks: start a real `cloudnet serve`, time things, print figures."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.postgres import PostgresServer  # noqa: E402
from tests.support.process import free_port  # noqa: E402

# `cloudnet serve` (as cloudnet_server's `command`) with the request-id middleware a pass-through: the "off" side of
# the overhead figures of request ids (event_stream.py) and of metrics and request ids together (api_metrics.py).
WITHOUT_REQUEST_IDS = [
    str(ROOT / ".venv/bin/python"),
    "-c",
    "import sys\n"
    "from cloudnet.api import request_ids\n"
    "async def through(self, scope, receive, send):\n"
    "    await self.app(scope, receive, send)\n"
    "request_ids.RequestIds.__call__ = through\n"
    "from cloudnet.cli.main import app\n"
    "sys.argv[0] = 'cloudnet'\n"
    "app()\n",
]


@contextmanager
def postgres_url() -> Iterator[str]:
    pg = PostgresServer.start()
    try:
        pg.psql("CREATE DATABASE bench")
        yield pg.url("bench")
    finally:
        pg.stop()


# Benchmarks measure speed at scale, not the per-project limits: every quota off.
LIMITED = ("network", "subnet", "port", "router", "security_group", "security_group_rule", "floatingip", "forward",
           "rbac_policy")  # fmt: skip
UNLIMITED = [arg for resource in LIMITED for arg in ("--quota", f"{resource}=-1")]


@contextmanager
def cloudnet_server(db_url: str | None = None, server_cpu: int | None = 0, command: list[str] | None = None,
                    extra: Sequence[str] = (), tokens: dict[str, Any] | None = None) -> Iterator[str]:  # fmt: skip
    """`cloudnet serve` in its own process (pinned to one core, like a real deployment's worker); `command`: what
    runs instead of the `cloudnet` executable (a variant of it), `extra`: more options of serve; `tokens`: its
    tokens file's (without: every token is an admin's, on loopback)."""
    state = Path(tempfile.mkdtemp(prefix="cloudnet-bench-"))
    if tokens is not None:
        (state / "tokens.json").write_text(json.dumps({"tokens": tokens}))
    port = free_port()
    cmd = [*(command or [str(ROOT / ".venv/bin/cloudnet")]), "serve", "--state-dir", str(state), "--port", str(port),
           *UNLIMITED, *extra]  # fmt: skip
    if db_url:
        cmd += ["--db", db_url]
    if server_cpu is not None and os.cpu_count() and os.cpu_count() > 1:  # type: ignore[operator]
        cmd = ["taskset", "-c", str(server_cpu), *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(state / "server.log", "w"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((state / "server.log").read_text()) from None
                time.sleep(0.05)  # waiting for the child to bind: polled, with a deadline
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(state, ignore_errors=True)


def analyze(db_url: str) -> None:
    """PostgreSQL planner statistics, as autovacuum gathers them within a minute on a live server."""
    engine = create_engine(db_url)
    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        conn.commit()
    engine.dispose()


def machine_load() -> None:
    """Print the load average: figures taken while other work runs on this 2-core machine are not comparable."""
    one, five, _fifteen = os.getloadavg()
    print(f"load average {one:.2f} (1 min), {five:.2f} (5 min)")


def http_floor(client: httpx.Client, n: int = 300) -> float:
    """p50 of `GET /` (no database, no body) with the client a benchmark uses: what any request costs here, to
    read the other figures against (on this VM it has varied 2x between runs)."""
    root = str(client.base_url.copy_with(path="/"))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.get(root).raise_for_status()
        times.append(time.perf_counter() - t0)
    return percentile(times, 50)


def pin_client(cpu: int = 1) -> None:
    if os.cpu_count() and os.cpu_count() > 1:  # type: ignore[operator]
        os.sched_setaffinity(0, {cpu})


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def row(name: str, value: str, target: str, ok: bool | None = None) -> None:
    mark = "" if ok is None else ("  ok" if ok else "  MISSED")
    print(f"  {name:<44} {value:>14}   target {target}{mark}")


def median(values: list[float]) -> float:
    return statistics.median(values)


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_registered(client: httpx.Client, host: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the agent of `host` registered it (server and agent up); its log as the error if it never does."""
    deadline = time.monotonic() + 60
    while True:
        try:
            if client.get(f"/hosts/{host}").status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(log.read_text())
        time.sleep(0.05)  # waiting for the child to start: polled, with a deadline


def timed_creates(client: httpx.Client, network_id: str, n: int) -> list[float]:
    """Seconds each of `n` single port creates took, one after another."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.post("/ports", json={"port": {"network_id": network_id}})
        times.append(time.perf_counter() - t0)
        r.raise_for_status()
    return times


def alternated(on_url: str, off_url: str, n: int, batch: int = 20) -> tuple[list[float], list[float], list[float]]:
    """Single port creates on two servers (a feature on, and off), `n` on each, in alternating batches so that the
    machine's drift hits both alike: each side's times, and each batch pair's p50 ratio (on / off: steadier than the
    ratio of the two p50s while other work comes and goes)."""
    with (httpx.Client(base_url=on_url + "/v2.0", headers={"X-Auth-Token": "bench"}, timeout=120) as on,
          httpx.Client(base_url=off_url + "/v2.0", headers={"X-Auth-Token": "bench"}, timeout=120) as off):  # fmt: skip
        sides = {"on": on, "off": off}
        nets = {}
        for side, client in sides.items():
            nets[side] = client.post("/networks", json={"network": {"name": "bench"}}).json()["network"]["id"]
            client.post("/subnets", json={"subnet": {"network_id": nets[side], "cidr": "10.128.0.0/14"}}
                        ).raise_for_status()  # fmt: skip
            timed_creates(client, nets[side], 100)  # warm-up: connections, caches, the default security group
        return alternate({side: (client, nets[side]) for side, client in sides.items()}, n, batch)


def alternate(sides: dict[str, tuple[httpx.Client, str]], n: int, batch: int = 20
              ) -> tuple[list[float], list[float], list[float]]:  # fmt: skip
    """`alternated`'s rounds, on clients and networks made ready: `sides` names ("on", "off") each's (client,
    network)."""
    times: dict[str, list[float]] = {"on": [], "off": []}
    ratios: list[float] = []
    for i in range(n // batch):
        got = {}
        for side in ("on", "off") if i % 2 else ("off", "on"):
            got[side] = timed_creates(*sides[side], batch)
            times[side] += got[side]
        ratios.append(median(got["on"]) / median(got["off"]))
    return times["on"], times["off"], ratios


def on_backends(doc: str, run: Callable[..., None], singles: int) -> None:
    """A bench's main that times `run(url, singles, after_preload=...)` against a cloudnet on SQLite, PostgreSQL or
    both (`--backend`); on PostgreSQL the preload is followed by ANALYZE (steady state at scale includes planner
    statistics, which autovacuum gathers within a minute on a live server; a bench loads faster than that)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--singles", type=int, default=singles)
    args = parser.parse_args()
    pin_client(1)
    machine_load()
    if args.backend in ("sqlite", "both"):
        print("SQLite (WAL, synchronous=NORMAL):")
        with cloudnet_server() as url:
            run(url, args.singles)
    if args.backend in ("postgresql", "both"):
        print("PostgreSQL (throwaway server on a Unix socket, fsync off as in the tests):")
        with postgres_url() as db, cloudnet_server(db) as url:
            run(url, args.singles, after_preload=lambda: analyze(db))

"""Port pool benchmark (issue 6, control-plane half). Prints figures beside their targets; asserts nothing.

  claim API latency (POST /v2.0/port-pools/claim on a warm pool, sequential): p50/p99, with httpx and with a
  lean keep-alive client (http.client, one persistent connection), each beside its own HTTP floor
  50 simultaneous claims (threads, one connection each): time until all are served
  refill of a batch of 10 (pool_refill.refill: one transaction, one bulk create), in process: median

  instance attach (POST /v2.0/instances -> ping gateway, `cloudnet up`, root): pools disabled vs a warm
  pool vs a warm pool with parked devices, in namespaces the caller makes and in namespaces cloudnet provides
  (bench/attach.py), p50/p99 over --attach instances (0 skips it)

Usage: .venv/bin/python bench/pools.py [--backend sqlite|postgresql|both] [--claims N] [--attach N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from common import (
    analyze,
    cloudnet_server,
    http_floor,
    machine_load,
    median,
    ms,
    percentile,
    pin_client,
    postgres_url,
    row,
)
from sqlalchemy import select, update

from cloudnet.services.context import Context
from cloudnet.services.hosts import hosts
from cloudnet.services.networks import networks, subnets
from cloudnet.services.pools import pool_model, pool_refill
from cloudnet.services.ports import ports
from cloudnet.store import tables as t
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade

HOST = "bench-host"


def _setup(c: httpx.Client, cidr: str) -> str:
    c.put(f"/hosts/{HOST}", json={"host": {"agent_version": "bench"}}).raise_for_status()
    net = c.post("/networks", json={"network": {"name": "bench"}}).json()["network"]["id"]
    c.post("/subnets", json={"subnet": {"network_id": net, "cidr": cidr}}).raise_for_status()
    return str(net)


def _claim(c: httpx.Client, net: str, i: int) -> float:
    t0 = time.perf_counter()
    r = c.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": net, "device_id": f"d{i}"}})
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    return elapsed


class Lean:
    """A keep-alive HTTP/1.1 client with next to no overhead of its own (http.client on one connection): a
    claim's latency as the server gives it, which httpx's own ~0.5 ms per request hides."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)
        self.headers = {"X-Auth-Token": "bench", "Content-Type": "application/json"}

    def request(self, method: str, path: str, body: bytes | None = None) -> bytes:
        self.conn.request(method, path, body=body, headers=self.headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 400:
            raise RuntimeError(f"{method} {path}: {r.status} {data!r}")
        return data

    def claim(self, net: str, i: int) -> float:
        body = json.dumps({"claim": {"host": HOST, "network_id": net, "device_id": f"lean{i}"}}).encode()
        t0 = time.perf_counter()
        self.request("POST", "/v2.0/port-pools/claim", body)
        return time.perf_counter() - t0

    def floor(self, n: int = 300) -> float:
        """p50 of `GET /` (no database, no body) through this client."""
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.request("GET", "/")
            times.append(time.perf_counter() - t0)
        return percentile(times, 50)

    def close(self) -> None:
        self.conn.close()


def _claim_rows(label: str, times: list[float], floor: float) -> None:
    p50, p99 = percentile(times, 50), percentile(times, 99)
    row(f"claim p50 ({len(times)} in a row, {label})", ms(p50), "<= 1 ms", p50 <= 0.001)
    row(f"claim p99 ({label})", ms(p99), "<= 5 ms", p99 <= 0.005)
    row(f"  (HTTP floor: GET / p50, {label})", ms(floor), "-")


def _wait_ready(c: httpx.Client, n: int) -> None:
    deadline = time.monotonic() + 120
    while c.get("/port-pools").json()["port_pools"][0]["ready"] < n:
        if time.monotonic() > deadline:
            raise RuntimeError("pool did not fill")
        time.sleep(0.05)


def run_api(url: str, claims: int, analyze: Callable[[], None] | None = None) -> None:
    with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "bench"}, timeout=120) as c:
        net = _setup(c, "10.128.0.0/14")
        _claim(c, net, -1)
        pool_id = c.get("/port-pools").json()["port_pools"][0]["id"]
        # Warm: enough ready ports that the sequential claims (both clients) never wait for a refill.
        want = 2 * claims + 80
        c.put(f"/port-pools/{pool_id}", json={"port_pool": {"min": want, "batch": want}}).raise_for_status()
        _wait_ready(c, want)
        c.put(f"/port-pools/{pool_id}", json={"port_pool": {"min": 0}}).raise_for_status()
        if analyze is not None:
            analyze()
        for i in range(20):  # warm-up of connections and caches
            _claim(c, net, 10_000 + i)
        times = [_claim(c, net, i) for i in range(claims)]
        _claim_rows("httpx", times, http_floor(c))
        lean = Lean(url)
        try:
            for i in range(20):
                lean.claim(net, 10_000 + i)
            times = [lean.claim(net, i) for i in range(claims)]
            _claim_rows("lean client", times, lean.floor())
        finally:
            lean.close()

        c.put(f"/port-pools/{pool_id}", json={"port_pool": {"min": 60, "batch": 60}}).raise_for_status()
        _wait_ready(c, 60)
        c.put(f"/port-pools/{pool_id}", json={"port_pool": {"min": 0}}).raise_for_status()
        clients = [httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "bench"}, timeout=120)
                   for _ in range(50)]  # fmt: skip
        for cl in clients:
            cl.get("/port-pools")  # connect before the clock starts
        start = threading.Barrier(51)
        done: list[float] = []

        def one(i: int) -> None:
            start.wait()
            _claim(clients[i], net, 20_000 + i)
            done.append(time.perf_counter())

        threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
        for th in threads:
            th.start()
        start.wait()
        t0 = time.perf_counter()
        for th in threads:
            th.join()
        all_served = max(done) - t0
        for cl in clients:
            cl.close()
        row("50 simultaneous claims, all served", ms(all_served), "<= 100 ms", all_served <= 0.100)


def run_refill(db_url: str, rounds: int = 20) -> None:
    """pool_refill.refill of a batch of 10 into an empty pool, in process (no HTTP)."""
    store = Store(db_url)
    upgrade(store)
    ctx = Context.admin("bench")
    hosts.heartbeat(store, ctx, HOST, {"agent_version": "bench"}, 30.0)
    (net,) = networks.create_networks(store, ctx, [{"name": "refill"}], 1500)
    subnets.create_subnets(store, ctx, [{"network_id": net["id"], "cidr": "10.64.0.0/16"}])
    with store.write() as tx:
        pool = pool_model.ensure_pool(tx, HOST, "bench", net["id"], ())
        tx.conn.execute(update(t.port_pools).where(t.port_pools.c.id == pool.id).values(min=10, batch=10))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        made = pool_refill.refill(store, pool.id)
        times.append(time.perf_counter() - t0)
        assert made == 10, made
        with store.write() as tx:
            ids = select(t.pool_ports.c.port_id).where(t.pool_ports.c.pool_id == pool.id)
            for r in tx.conn.execute(select(t.ports).where(t.ports.c.id.in_(ids))).all():
                ports.delete_in_tx(tx, r)
    store.dispose()
    row(f"refill of a batch of 10 (median of {rounds})", ms(median(times)), "<= 20 ms", median(times) <= 0.020)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--attach", type=int, default=50, help="instances per attach mode (0: skip)")
    args = parser.parse_args()
    pin_client(1)
    machine_load()
    if args.backend in ("sqlite", "both"):
        print("SQLite (WAL, synchronous=NORMAL):")
        with cloudnet_server() as url:
            run_api(url, args.claims)
        with tempfile.TemporaryDirectory() as d:
            run_refill(f"sqlite:///{Path(d) / 'refill.db'}")
    if args.backend in ("postgresql", "both"):
        print("PostgreSQL (throwaway server on a Unix socket, fsync off as in the tests):")
        with postgres_url() as db:
            with cloudnet_server(db) as url:
                # Steady state includes planner statistics (autovacuum gathers them within a minute on a
                # live server; the benchmark fills its pool faster than that, so it asks for them).
                run_api(url, args.claims, analyze=lambda: analyze(db))
            run_refill(db)
    if args.attach:
        import attach  # bench/attach.py: needs root (namespaces)

        modes = ("unpooled", "pool", "park", "unpooled+made", "park+made")
        attach.report(attach.measure(modes, args.attach), args.attach)


if __name__ == "__main__":
    main()

"""Subnet pool allocation benchmark (issue 31). Prints figures beside their targets; asserts nothing.

  a subnet from a pool (prefixlen only: the server picks the prefix) with 10,000 prefixes already allocated from
  it: p50 and p99, sequential, beside the same with an empty pool and the plain-CIDR subnet create
  the same after a release (a subnet deleted: its prefix is given back to the server's cached free space of the
  pool), and after a change of the pool (its name: the cached free space is stale, so the allocation reads the
  pool's 10,000 allocations)

Usage: .venv/bin/python bench/subnet_pool_alloc.py [--backend sqlite|postgresql|both] [--singles N]
"""

from __future__ import annotations

import time

import httpx
from common import http_floor, ms, on_backends, percentile, row

PRELOAD = 10_000
PER_NETWORK = 100  # preloaded subnets per network (a network's own subnets are checked for overlap on each create)


def _timed(client: httpx.Client, body: dict[str, object]) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = client.post("/subnets", json={"subnet": body})
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    return elapsed, str(r.json()["subnet"]["id"])


def _singles(client: httpx.Client, pool: str, n: int, release: bool = False, rename: bool = False) -> list[float]:
    """`n` subnets from the pool, each on a network of its own; with `release`, one deleted before each; with
    `rename`, the pool renamed before each."""
    times = []
    for i in range(n):
        net = client.post("/networks", json={"network": {"name": "m"}}).json()["network"]["id"]
        if rename:
            client.put(f"/subnetpools/{pool}", json={"subnetpool": {"name": f"bench{i}"}}).raise_for_status()
        if release:
            gone = client.post("/subnets", json={"subnet": {"network_id": net, "subnetpool_id": pool, "ip_version": 4,
                                                            "prefixlen": 28}}).json()["subnet"]["id"]  # fmt: skip
            client.delete(f"/subnets/{gone}").raise_for_status()
        elapsed, _sid = _timed(client, {"network_id": net, "subnetpool_id": pool, "ip_version": 4, "prefixlen": 28})
        times.append(elapsed)
    return times


def run(url: str, singles: int, after_preload: object = None) -> None:
    with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "bench"}, timeout=300) as c:
        pool = c.post("/subnetpools", json={"subnetpool": {"prefixes": ["10.0.0.0/8"], "default_prefixlen": 28,
                                                             "name": "bench"}}).json()["subnetpool"]["id"]  # fmt: skip
        _singles(c, pool, 20)  # warm-up
        empty = _singles(c, pool, singles)
        plain = []
        for i in range(singles):
            net = c.post("/networks", json={"network": {"name": "p"}}).json()["network"]["id"]
            plain.append(_timed(c, {"network_id": net, "cidr": f"172.{16 + i // 256}.{i % 256}.0/28"})[0])
        t0 = time.perf_counter()
        made = 20 + singles
        while made < PRELOAD:
            net = c.post("/networks", json={"network": {"name": "pre"}}).json()["network"]["id"]
            n = min(PER_NETWORK, PRELOAD - made)
            body = [{"network_id": net, "subnetpool_id": pool, "ip_version": 4, "prefixlen": 28}] * n
            c.post("/subnets", json={"subnets": body}).raise_for_status()
            made += n
        preload = time.perf_counter() - t0
        if callable(after_preload):
            after_preload()
        loaded = _singles(c, pool, singles)
        released = _singles(c, pool, max(20, singles // 5), release=True)
        stale = _singles(c, pool, max(20, singles // 5), rename=True)
        floor = http_floor(c)
    row(f"subnet from a pool p50, {PRELOAD:,} allocated", ms(percentile(loaded, 50)), "<= 5 ms",
        percentile(loaded, 50) <= 0.005)  # fmt: skip
    row(f"subnet from a pool p99, {PRELOAD:,} allocated", ms(percentile(loaded, 99)), "-")
    row("subnet from a pool p50, empty pool", ms(percentile(empty, 50)), "-")
    row("subnet with a CIDR (no pool) p50", ms(percentile(plain, 50)), "-")
    extra = percentile(loaded, 50) - percentile(plain, 50)
    row(f"  pool at {PRELOAD:,} over a plain create, p50", ms(extra), "-")
    row("after a release (given back to the cache) p50", ms(percentile(released, 50)), "-")
    row(f"after a pool change (cache stale: {PRELOAD:,} read) p50", ms(percentile(stale, 50)), "-")
    row(f"  (preload: {PRELOAD:,} subnets in bulks of {PER_NETWORK})", ms(preload), "-")
    row("  (HTTP floor: GET / p50, same client)", ms(floor), "-")


def main() -> None:
    on_backends(__doc__, run, 200)


if __name__ == "__main__":
    main()

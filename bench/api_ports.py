"""Port API benchmark (issue: control plane core). Prints figures beside their targets; asserts nothing.

  single port create, sequential: p50/p99 with 0 and with 10,000 ports already present
  bulk create of 1,000 ports in one request
  list of 10,000 ports with `fields`

Usage: .venv/bin/python bench/api_ports.py [--backend sqlite|postgresql|both] [--singles N]
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from common import (
    http_floor,
    median,
    ms,
    on_backends,
    percentile,
    row,
    timed_creates,
)

PRELOAD = 10_000
BULK = 1_000


def _bulk(client: httpx.Client, network_id: str, n: int) -> float:
    t0 = time.perf_counter()
    r = client.post("/ports", json={"ports": [{"network_id": network_id} for _ in range(n)]})
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    return elapsed


def run(url: str, singles: int, after_preload: Callable[[], None] | None = None) -> None:
    with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "bench"}, timeout=120) as c:
        net = c.post("/networks", json={"network": {"name": "bench"}}).json()["network"]["id"]
        c.post("/subnets", json={"subnet": {"network_id": net, "cidr": "10.128.0.0/14"}}).raise_for_status()
        timed_creates(c, net, 50)  # warm-up: connections, caches, the default security group
        empty = timed_creates(c, net, singles)
        bulk_times = []
        while len(bulk_times) < PRELOAD // BULK:
            bulk_times.append(_bulk(c, net, BULK))
        if after_preload is not None:
            after_preload()
        loaded = timed_creates(c, net, singles)
        list_times = []
        count = 0
        for _ in range(5):
            t0 = time.perf_counter()
            r = c.get("/ports", params=[("network_id", net), ("fields", "id"), ("fields", "mac_address"),
                                        ("fields", "fixed_ips"), ("fields", "status")])  # fmt: skip
            list_times.append(time.perf_counter() - t0)
            count = len(r.json()["ports"])
        floor = http_floor(c)
    p50_0, p99_0 = percentile(empty, 50), percentile(empty, 99)
    p50_10k, p99_10k = percentile(loaded, 50), percentile(loaded, 99)
    row(f"single create p50, 0 ports ({singles} creates)", ms(p50_0), "<= 3 ms", p50_0 <= 0.003)
    row("single create p99, 0 ports", ms(p99_0), "<= 15 ms", p99_0 <= 0.015)
    row(f"single create p50, {PRELOAD:,}+ ports", ms(p50_10k), "<= 3 ms", p50_10k <= 0.003)
    row(f"single create p99, {PRELOAD:,}+ ports", ms(p99_10k), "<= 15 ms", p99_10k <= 0.015)
    row("  (HTTP floor: GET / p50, same client)", ms(floor), "-")
    ratio = p50_10k / p50_0
    row("p50 at 10,000 / p50 at 0", f"{ratio:.2f}x", "<= 1.2x", ratio <= 1.2)
    b = median(bulk_times)
    row(f"bulk create of {BULK:,} ports (median of {len(bulk_times)})", ms(b), "<= 150 ms", b <= 0.150)
    lst = median(list_times)
    row(f"list {count:,} ports with fields (median of 5)", ms(lst), "<= 300 ms", lst <= 0.300)


def main() -> None:
    on_backends(__doc__, run, 500)


if __name__ == "__main__":
    main()

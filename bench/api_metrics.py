"""Metrics benchmark (issue 30). Prints figures beside their targets; asserts nothing.

  API p50 overhead of metrics and request ids on port create: two servers in one run, one as shipped (metrics and
  request ids on) and one with --no-metrics and its request-id middleware a pass-through (common.WITHOUT_REQUEST_IDS),
  both pinned to the same core, fed alternating batches of single creates (drift hits both alike)
  a scrape of GET /metrics at 10,000 ports and 100 hosts whose agents reported a full set of samples

Usage: .venv/bin/python bench/api_metrics.py [--singles N]
"""

from __future__ import annotations

import argparse
import time

import httpx
from common import (  # noqa: F401  (ROOT: sys.path for tests.support)
    ROOT,
    WITHOUT_REQUEST_IDS,
    alternated,
    cloudnet_server,
    machine_load,
    median,
    ms,
    percentile,
    pin_client,
    row,
)

from cloudnet import metrics

PORTS = 10_000
HOSTS = 100
BATCH = 20
# What an agent that has run for a while has counted: every kind, tree, status and command it meets.
KINDS = ("instance", "vm", "network", "router", "metadata", "uplink", "pool-port", "garbage")
TREES = ("openstack", "ec2", "root", "other")
STATUSES = ("200", "404", "429", "503")
COMMANDS = ("GET", "KEYS", "PUT", "DELETE", "negotiate", "invalid")


def agent_samples() -> list[list[object]]:
    for kind in ("full", "incremental"):
        metrics.PASS_DURATION.labels(kind).observe(0.02)
        for result in ("ok", "failed"):
            metrics.PASSES.labels(kind, result).inc()
    for kind in KINDS:
        metrics.OBJECTS_APPLIED.labels(kind).inc(100)
        metrics.OBJECTS_FAILED.labels(kind).set(1)
    for tree in TREES:
        metrics.METADATA_DURATION.labels(tree).observe(0.002)
        for status in STATUSES:
            metrics.METADATA_REQUESTS.labels(tree, status).inc()
    for command in COMMANDS:
        metrics.MDATA_REQUESTS.labels(command, "answered").inc()
    metrics.LAST_PASS.set(time.time())
    metrics.DNSMASQ_RESTARTS.inc()
    return metrics.samples()


def overhead(on: str, off: str, n: int) -> None:
    with_both, without, paired = alternated(on, off, n, BATCH)
    p_on, p_off = percentile(with_both, 50), percentile(without, 50)
    row(f"port create p50, metrics and ids on ({len(with_both)} creates)", ms(p_on), "-")
    row(f"port create p50, both off ({len(without)} creates)", ms(p_off), "-")
    extra = p_on / p_off - 1
    row("API p50 overhead of metrics and request ids", f"{extra * 100:+.1f} %", "<= 5 %", extra <= 0.05)
    row(f"  (median of {len(paired)} rounds' p50 ratios)", f"{(median(paired) - 1) * 100:+.1f} %", "-")


def scrape(url: str) -> None:
    samples = agent_samples()
    with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "bench"}, timeout=300) as c:
        report = {"agent_version": "bench", "report": {"metrics": samples}}
        for h in range(HOSTS):
            c.put(f"/hosts/bench-{h:03d}", json={"host": report}).raise_for_status()
        projects = [f"project-{p}" for p in range(10)]
        for p in projects:
            net = c.post("/networks", json={"network": {"name": "b", "project_id": p}}).json()["network"]["id"]
            c.post("/subnets", json={"subnet": {"network_id": net, "cidr": "10.0.0.0/16", "project_id": p}})
            for _ in range(PORTS // len(projects) // 1000):
                body = {"ports": [{"network_id": net, "project_id": p} for _ in range(1000)]}
                c.post("/ports", json=body).raise_for_status()
        for h in range(5):  # a few pools with ready ports
            c.post("/port-pools/claim", json={"claim": {"host": f"bench-{h:03d}", "network_id": net}})
        total = len(c.get("/ports", params={"fields": "id"}).json()["ports"])
        times, size = [], 0
        for _ in range(20):
            t0 = time.perf_counter()
            r = httpx.get(url + "/metrics", headers={"X-Auth-Token": "bench"}, timeout=60)
            times.append(time.perf_counter() - t0)
            r.raise_for_status()
            size = len(r.content)
    series = sum(1 for line in r.text.splitlines() if line and not line.startswith("#"))
    took = median(times)
    row(f"scrape at {total:,} ports, {HOSTS} hosts ({series:,} series, {size // 1024} KiB; median of 20)", ms(took),
        "<= 100 ms", took <= 0.100)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--singles", type=int, default=3000)
    args = parser.parse_args()
    pin_client(1)
    machine_load()
    quiet = ["--metadata-listen", "off"]
    with (
        cloudnet_server(extra=quiet) as on,
        cloudnet_server(command=WITHOUT_REQUEST_IDS, extra=[*quiet, "--no-metrics"]) as off,
    ):
        overhead(on, off, args.singles)
        scrape(on)


if __name__ == "__main__":
    main()

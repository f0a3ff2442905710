"""Network forward benchmark (issue: forwards and SNAT). Prints figures beside targets; asserts nothing.

Builds client | router | target namespaces joined by veths, applies N listen ports to the router's
NAT through the driver's NatTables (libnftables in process, one transaction), then times one more
forward added and removed with all of them present, and TCP connect+answer latency to the first and
the last forward. Forwards are 250 ports each, index-wise (250 map elements a forward: the worst case
for the maps); the same load with port-preserving ranges (1 element a forward) is shown too.

Usage (root): .venv/bin/python bench/forwards.py [--sizes 10000,100000]
"""

from __future__ import annotations

import argparse
import ipaddress
import subprocess
import sys
import time
import uuid
from pathlib import Path

from common import ms, percentile, row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.netserve import Responder, tcp_ask

from cloudnet.dataplane.linux import nat, netns

PORTS = 250
TARGET = "10.250.0.10"


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def topology(suffix: str) -> tuple[str, str, str]:
    client, router, target = (f"cnbf-{n}-{suffix}" for n in ("c", "r", "t"))
    for ns in (client, router, target):
        netns.ensure(ns)
    sh("ip", "link", "add", "c0", "netns", client, "type", "veth", "peer", "name", "qg", "netns", router)
    sh("ip", "link", "add", "t0", "netns", target, "type", "veth", "peer", "name", "qr", "netns", router)
    for ns, dev, addr in ((client, "c0", "203.0.113.2/24"), (router, "qg", "203.0.113.1/24"),
                          (router, "qr", "10.250.0.1/24"), (target, "t0", f"{TARGET}/24")):  # fmt: skip
        sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
    sh("ip", "-n", client, "route", "add", "198.18.0.0/15", "via", "203.0.113.1")
    sh("ip", "-n", target, "route", "add", "default", "via", "10.250.0.1")
    netns.write_sysctl(router, "net/ipv4/ip_forward", "1")
    return client, router, target


def forwards(count: int, keep_ports: bool) -> list[dict[str, object]]:
    base = int(ipaddress.ip_address("198.18.0.1"))
    out = []
    for i in range(count):
        port = {"protocol": "tcp", "listen_port": f"10000-{10000 + PORTS - 1}", "target_address": TARGET,
                "target_port": "" if keep_ports else f"20000-{20000 + PORTS - 1}"}  # fmt: skip
        out.append({"id": f"f{i}", "revision_number": 0, "listen_address": str(ipaddress.ip_address(base + i)),
                    "config": {}, "ports": [port]})  # fmt: skip
    return out


def run(size: int, keep_ports: bool, client: str, router: str) -> None:
    count = size // PORTS
    structure = {
        4: nat.Structure(4, "qg", ("10.250.0.0/24",), (), "203.0.113.1"),
        6: nat.Structure(6, "qg", (), (), None),
    }
    tables = nat.NatTables()
    fwds = forwards(count, keep_ports)
    t0 = time.perf_counter()
    tables.apply(router, structure, fwds)
    full = time.perf_counter() - t0
    adds, removes = [], []
    for k in range(50):
        fwds.append({"id": f"x{k}", "revision_number": 0, "listen_address": f"198.19.255.{k + 1}",
                     "config": {"target_address": TARGET}, "ports": []})  # fmt: skip
        t0 = time.perf_counter()
        tables.apply(router, structure, fwds)
        adds.append(time.perf_counter() - t0)
        fwds.pop()
        t0 = time.perf_counter()
        tables.apply(router, structure, fwds)
        removes.append(time.perf_counter() - t0)
    first, last = fwds[0]["listen_address"], fwds[-1]["listen_address"]
    tport = 20000 if not keep_ports else 10000
    latency = {}
    for label, addr in (("first", first), ("last", last)):
        samples = []
        for _ in range(50):
            t0 = time.perf_counter()
            answer = tcp_ask(client, str(addr), 10000 + PORTS - 1)
            samples.append(time.perf_counter() - t0)
            assert answer.endswith(str(tport + PORTS - 1)), answer
        latency[label] = percentile(samples, 50)
    kind = "port-preserving ranges" if keep_ports else "index-wise, one element a port"
    target_full = "<= 0.25 s" if size <= 10_000 else "<= 2 s"
    print(f"{size:,} listen ports ({count} forwards x {PORTS}, {kind}):")
    row("apply all, one transaction", f"{full:.3f} s", target_full, full <= (0.25 if size <= 10_000 else 2.0))
    p99a, p99r = percentile(adds, 99), percentile(removes, 99)
    row("add one forward, p99 of 50", ms(p99a), "<= 10 ms", p99a <= 0.010)
    row("remove one forward, p99 of 50", ms(p99r), "<= 10 ms", p99r <= 0.010)
    row("connect+answer, first forward, p50", ms(latency["first"]), "same as last")
    row("connect+answer, last forward, p50", ms(latency["last"]), "same as first")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    args = parser.parse_args()
    suffix = uuid.uuid4().hex[:6]
    client, router, target = topology(suffix)
    responder = Responder.start(target, "T", tcp=(10000 + PORTS - 1, 20000 + PORTS - 1))
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            for keep in (False, True):
                run(size, keep, client, router)
    finally:
        responder.stop()
        for ns in (client, router, target):
            netns.remove(ns)


if __name__ == "__main__":
    main()

"""Network forward benchmark (issues: forwards and SNAT; 17: removal at 100k). Prints figures beside targets;
asserts nothing.

Builds client | router | target namespaces joined by veths and applies N listen ports to the router's NAT through
the driver's NatTables (libnftables in process, one transaction a change), as the agent does. Forwards are 250
ports each: index-wise (250 map elements a forward, the worst case) or port-preserving ranges (a range is a few
aligned port blocks: 25 elements). With all of them present it times, --samples times each: adding and removing a
forward (ports 80, 443, 8000-8999/tcp and 53/udp), and removing and adding back one port of an existing forward (a
PUT with one port specification less). Then a check (everything read back and compared), and TCP connect+answer
latency to the first and the last forward. Figures vary with whatever else runs on this 2-core machine: the load
average is printed first; repeat to see the noise. Candidate shapes are compared in bench/forward_shapes.py.

Usage (root): .venv/bin/python bench/forwards.py [--sizes 1000,10000,100000] [--samples 200]
"""

from __future__ import annotations

import argparse
import ipaddress
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from common import machine_load, ms, percentile, row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.netserve import Responder, tcp_ask

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import nat, nft

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


def forwards(count: int, keep_ports: bool) -> list[dict[str, Any]]:
    base = int(ipaddress.ip_address("198.18.0.1"))
    out = []
    for i in range(count):
        port = {"protocol": "tcp", "listen_port": f"10000-{10000 + PORTS - 1}", "target_address": TARGET,
                "target_port": "" if keep_ports else f"20000-{20000 + PORTS - 1}"}  # fmt: skip
        spare = {"protocol": "udp", "listen_port": "5353", "target_address": TARGET}
        out.append({"id": f"f{i}", "revision_number": 0, "listen_address": str(ipaddress.ip_address(base + i)),
                    "config": {}, "ports": [port, spare]})  # fmt: skip
    return out


def extra(k: int) -> dict[str, Any]:
    ports = [{"protocol": "tcp", "listen_port": "80,443,8000-8999", "target_address": TARGET},
             {"protocol": "udp", "listen_port": "53", "target_address": TARGET}]  # fmt: skip
    return {"id": f"x{k}", "revision_number": 0, "listen_address": f"198.19.255.{k % 250 + 1}", "config": {},
            "ports": ports}  # fmt: skip


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(size: int, keep_ports: bool, client: str, router: str, samples: int) -> None:
    count = size // PORTS
    structure = {
        4: nat.Structure(4, "qg", ("10.250.0.0/24",), (), "203.0.113.1"),
        6: nat.Structure(6, "qg", (), (), None),
    }
    nft.run(
        router, "table ip cloudnet {}\ndelete table ip cloudnet\ntable ip6 cloudnet {}\ndelete table ip6 cloudnet\n"
    )
    tables = nat.NatTables()
    tables.forget(router, new=True)  # (emptied just above: nothing to read back)
    fwds = forwards(count, keep_ports)
    full = timed(lambda: tables.apply(router, structure, fwds))
    adds, removes, port_removes, port_adds = [], [], [], []
    middle = count // 2
    for k in range(samples):
        fwds.append(extra(k))
        adds.append(timed(lambda: tables.apply(router, structure, fwds)))
        fwds.pop()
        removes.append(timed(lambda: tables.apply(router, structure, fwds)))
        whole = fwds[middle]
        fwds[middle] = {**whole, "revision_number": 2 * k + 1, "ports": whole["ports"][:1]}  # 5353/udp removed
        port_removes.append(timed(lambda: tables.apply(router, structure, fwds)))
        fwds[middle] = {**whole, "revision_number": 2 * k + 2}
        port_adds.append(timed(lambda: tables.apply(router, structure, fwds)))
    check = timed(lambda: tables.apply(router, structure, fwds, check=True))
    first, last = fwds[0]["listen_address"], fwds[-1]["listen_address"]
    tport = 20000 if not keep_ports else 10000
    latency = {}
    for label, addr in (("first", first), ("last", last)):
        samples_ = []
        for _ in range(50):
            t0 = time.perf_counter()
            answer = tcp_ask(client, str(addr), 10000 + PORTS - 1)
            samples_.append(time.perf_counter() - t0)
            assert answer.endswith(str(tport + PORTS - 1)), answer
        latency[label] = percentile(samples_, 50)
    kind = "port-preserving ranges, 25 elements a forward" if keep_ports else "index-wise, one element a port"
    target_full = "<= 0.25 s" if size <= 10_000 else "<= 2 s"
    print(f"{size:,} listen ports ({count} forwards x {PORTS}, {kind}), {samples} samples:")
    row("apply all, one transaction", f"{full:.3f} s", target_full, full <= (0.25 if size <= 10_000 else 2.0))
    figures = (("add a forward", adds), ("remove a forward", removes), ("remove one port of a forward", port_removes),
               ("add one port to a forward", port_adds))  # fmt: skip
    for label, values in figures:
        p50, p99 = percentile(values, 50), percentile(values, 99)
        row(f"{label}, p50 / p99", f"{ms(p50)} / {ms(p99)}", "p99 <= 10 ms", p99 <= 0.010)
    row("check: read back and compare everything", f"{check:.3f} s", "(start, on demand)")
    row("connect+answer, first forward, p50", ms(latency["first"]), "same as last")
    row("connect+answer, last forward, p50", ms(latency["last"]), "same as first")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    machine_load()
    suffix = uuid.uuid4().hex[:6]
    client, router, target = topology(suffix)
    responder = Responder.start(target, "T", tcp=(10000 + PORTS - 1, 20000 + PORTS - 1))
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            for keep in (False, True):
                run(size, keep, client, router, args.samples)
    finally:
        responder.stop()
        for ns in (client, router, target):
            netns.remove(ns)


if __name__ == "__main__":
    main()

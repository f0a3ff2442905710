"""What a forward's VIPs cost OVN by where their Load_Balancer is linked (issue 20): on the router and the
network's switch (what the northbound writer does), on the router only, on the switch only. Prints figures; asserts
nothing.

The site of bench/ovn_forwards.py (real OVN daemons, one chassis with the target port bound). One forward of
`--ports` listen ports is written by the server's writer, which is then stopped; the bench links and unlinks that
load balancer itself (`ovn-nbctl`, one transaction each) and measures, for each placement:
  - logical flows per stage (`ovn-sbctl lflow-list`) and OpenFlow flows per br-int table it adds, per VIP;
  - linking: NB commit -> br-int flow count settled (unchanged for 1.5 s), and the CPU each OVN daemon used;
  - one more load balancer of 2 VIPs beside it, linked the same way: to its flows, and ovn-northd's CPU.
Why the writer links both: the switch skips load balancing for traffic that enters it from a router port
(ls_in_pre_lb), so traffic from outside needs the router's copy; an instance reaching a listen address of its own
network needs the switch's (the router's copy DNATs it with no SNAT, the backend answers it directly, and the reply
is never un-DNATed; lb_force_snat_ip works on gateway routers only, and would hide every client's address).

Usage (root): .venv/bin/python bench/ovn_lb_placement.py [--ports 10000]
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter

import ovn_common
from common import machine_load
from ovn_common import OvnCloud, cpu_seconds, cpu_used, ovn_cloud, plug, router_site, settled_flows, wait_quiet

STAGE = re.compile(r"table=\s*\d+\s*\((\w+)\s*\)")
TABLE = re.compile(r"\btable=(\d+)")


def lflows(cloud: OvnCloud) -> Counter[str]:
    return Counter(m.group(1) for m in STAGE.finditer(cloud.ovn.sbctl("lflow-list")))


def openflows(cloud: OvnCloud) -> Counter[str]:
    out = cloud.ofctl(cloud.ovn.chassis[0], "dump-flows", "br-int")
    return Counter(m.group(1) for line in out.splitlines() if (m := TABLE.search(line)))  # (a flow's own table)


def per_vip(before: Counter[str], after: Counter[str], vips: int) -> str:
    """The keys that grew by at least one a VIP, with how much a VIP."""
    grown = {k: (after[k] - before[k]) / vips for k in after if after[k] - before[k] >= vips}
    return ", ".join(f"{k} {v:g}" for k, v in sorted(grown.items())) or "none"


def link(cloud: OvnCloud, verb: str, lb: str, targets: list[tuple[str, str]]) -> None:
    """One NB transaction: `ovn-nbctl lr-lb-<verb>` / `ls-lb-<verb>` for each (kind, row)."""
    args: list[str] = []
    for kind, row in targets:
        args += ["--", f"{kind}-lb-{verb}", row, lb]
    cloud.ovn.nbctl(*args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ports", type=int, default=10_000)
    args = parser.parse_args()
    machine_load()
    with ovn_cloud(chassis=1) as cloud:
        net = router_site(cloud)["net"]["id"]
        target = cloud.create("ports", "port", network_id=net, name="target")
        plug(cloud, cloud.ovn.chassis[0], target["id"], "cnb-target")
        address = target["fixed_ips"][0]["ip_address"]
        forward = ""
        for listen, ports in (("192.0.2.8", "80"), ("192.0.2.50", f"10000-{10000 + args.ports - 1}")):
            r = cloud.api.post(f"/networks/{net}/forwards", json={"listen_address": listen, "ports": [
                {"protocol": "tcp", "listen_port": ports, "target_address": address}]})  # fmt: skip
            if r.status_code != 201:
                raise SystemExit(f"forward: {r.status_code} {r.text[:300]}")
            forward = r.json()["forward"]["id"]
        cloud.sync.wait_synced(timeout=120)
        cloud.sync.stop()  # (from here on NB is the bench's)
        nb = cloud.ovn.nbctl
        big = nb("--bare", "--columns=_uuid", "find", "Load_Balancer", f"name=cn-fwd-{forward}-tcp").strip()
        switch = nb("--bare", "--columns=_uuid", "find", "Logical_Switch",
                    f"external_ids:cloudnet\\:network_id={net}").strip()  # fmt: skip
        router = nb("--bare", "--columns=_uuid", "list", "Logical_Router").strip()
        vips = [f'vips:"192.0.2.77:{p}"="{address}:{p}"' for p in (80, 443)]
        small = nb("create", "Load_Balancer", "name=placement-small", "protocol=tcp", *vips).strip()
        link(cloud, "del", big, [("lr", router), ("ls", switch)])
        cloud.wait_hv()
        wait_quiet(cloud)
        base_lf, base_of = lflows(cloud), openflows(cloud)
        print(f"{ovn_common.versions()}: load balancer placement, {args.ports:,} VIPs of one forward "
              f"({sum(base_lf.values()):,} logical / {sum(base_of.values()):,} OpenFlow flows without it)")  # fmt: skip
        placements = {"router + switch": [("lr", router), ("ls", switch)], "router only": [("lr", router)],
                      "switch only": [("ls", switch)]}  # fmt: skip
        for label, targets in placements.items():
            cpu, flows = cpu_seconds(cloud), cloud.flow_total()
            t0 = time.monotonic()
            link(cloud, "add", big, targets)
            took = settled_flows(cloud, lambda n, b=flows: n != b, quiet=1.5)[0] - t0
            used = cpu_used(cpu, cpu_seconds(cloud))
            cloud.wait_hv()
            lf, of = lflows(cloud), openflows(cloud)
            print(f"{label}:")
            print(f"    logical flows a VIP:  {per_vip(base_lf, lf, args.ports)}")
            print(f"    OpenFlow flows a VIP: {per_vip(base_of, of, args.ports)} (br-int tables)")
            print(f"    linked -> flows settled: {took:.2f} s; OVN daemons meanwhile: {used}")
            more = []
            for _ in range(3):
                wait_quiet(cloud)
                cpu, flows = cpu_seconds(cloud), cloud.flow_total()
                t0 = time.monotonic()
                link(cloud, "add", small, targets)
                more.append(settled_flows(cloud, lambda n, b=flows: n != b, quiet=1.0)[0] - t0)
                northd = cpu_seconds(cloud)["ovn-northd"] - cpu["ovn-northd"]
                link(cloud, "del", small, targets)
                wait_quiet(cloud)
            print(f"    one more 2-VIP load balancer -> its flows: {', '.join(f'{t:.2f}' for t in more)} s "
                  f"(ovn-northd {northd:.2f} s CPU for the last, both of its recomputes)")  # fmt: skip
            link(cloud, "del", big, targets)
            cloud.wait_hv()
            wait_quiet(cloud)


if __name__ == "__main__":
    main()

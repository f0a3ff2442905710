"""Network forwards on OVN (issue 20): 10,000 forward ports to NB and into OpenFlow, then one more forward end to end.
Prints figures beside targets; asserts nothing.

Real OVN daemons (NB, SB, ovn-northd, one chassis: ovs-vswitchd on the userspace datapath + ovn-controller in a
namespace of its own, the routers' gateway chassis), the cloudnet API and the server's northbound writer in this
process (bench/ovn_common.py). The site: an external network, a router, a tenant network with one port bound on the
chassis (so that ovn-controller computes the flows of that switch and router).

Two shapes of 10,000 listen ports:
  one forward   one POST of a forward with one 10,000-port range (a Load_Balancer with 10,000 VIPs)
  40 forwards   40 forwards x 250 ports on 40 addresses, posted while the server's writer was stopped: the first
                pass of a started writer writes them all (40 Load_Balancers), as after a server restart
"Committed to NB" is the writer's own timing of the pass that wrote them (pass start: reading cloudnet's
database, diff, NB commit; Status.took). "Realised in OpenFlow": from that commit until the last change of the
chassis' br-int flow count (its tables' counters, `ovs-ofctl dump-tables`, polled every 20 ms) once it has grown
by at least 5 flows a VIP and then stayed for 2 s; a `ovn-nbctl --wait=hv sync` afterwards checks that no flow
came later (its own timing, --print-wait-time, is printed for information). Polled rather than waited for with
`--wait=hv`: ovn-northd 23.03 recomputes everything on an nb_cfg bump, which would add a whole recompute to each
figure. The CPU time each OVN daemon used meanwhile is printed too: on this shared 2-core machine wall-clock
figures vary with the load. The one more forward's flows are known exactly: a warm-up forward of the same shape
is measured first (and a 1-port warm-up forward stays: a datapath's first load balancer brings flows of its own).
Then `--samples` times, beside the 40 forwards: one more forward (2 ports) from POST to its flows installed, and its
removal until its flows are gone, each from settled OVN: ovn-northd 23.03 recomputes everything twice for each
change (the second time when its own southbound writes come back), and a change made during that second pass
waits for it; the same done back to back is printed too, for information. bench/ovn_lb_placement.py shows what
each VIP costs and why forwards need their load balancer on both the router and the switch.

Usage (root): .venv/bin/python bench/ovn_forwards.py [--samples 10]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from common import machine_load, ms, percentile, row
from ovn_common import (
    OvnCloud,
    cpu_seconds,
    cpu_used,
    ovn_cloud,
    plug,
    router_site,
    settled_flows,
    versions,
    wait_for,
    wait_quiet,
)

PORTS = 10_000
SPREAD = 40  # forwards of the second shape, PORTS / SPREAD ports each


def post_forward(cloud: OvnCloud, network_id: str, body: dict[str, Any]) -> None:
    r = cloud.api.post(f"/networks/{network_id}/forwards", json=body)
    if r.status_code != 201:
        raise SystemExit(f"forward: {r.status_code} {r.text[:300]}")


def delete_forward(cloud: OvnCloud, network_id: str, listen: str) -> None:
    r = cloud.api.delete(f"/networks/{network_id}/forwards/{listen}")
    if r.status_code not in (200, 204):
        raise SystemExit(f"forward delete: {r.status_code} {r.text[:300]}")


def two_ports(listen: str, target: str) -> dict[str, Any]:
    return {"listen_address": listen, "ports": [{"protocol": "tcp", "listen_port": "80,443", "target_address": target}]}


def flows(cloud: OvnCloud, addresses: list[str]) -> int:
    return sum(cloud.flows_to(a) for a in addresses)


def settle(cloud: OvnCloud) -> int:
    cloud.sync.wait_synced(timeout=120)
    cloud.wait_hv()
    return cloud.flow_total()


def measure_pass(cloud: OvnCloud, addresses: list[str], at_least: int, label: str, t_start: float,
                 cpu: dict[str, float]) -> None:  # fmt: skip
    """The pass that wrote them (the writer's own timing), then until their flows are all in OpenFlow."""
    status = cloud.sync.wait_synced(timeout=120)
    done, count = settled_flows(cloud, lambda n: n >= at_least, quiet=2.0)
    realised = done - status.committed_at
    used = cpu_used(cpu, cpu_seconds(cloud))
    cloud.wait_hv()
    final, named = cloud.flow_total(), flows(cloud, addresses)
    print(f"{label}: the pass wrote [{status.last_report[:90]}]")
    row("committed to NB (pass start -> NB commit)", f"{status.took:.3f} s", "<= 0.2 s", status.took <= 0.2)
    row("  of which reading cloudnet's database", f"{status.read_took:.3f} s", "(info)")
    row("realised in OpenFlow (NB commit -> flows in)", f"{realised:.3f} s", "<= 3 s", realised <= 3.0)
    row("  start -> flows in, all of it", f"{done - t_start:.3f} s", "(info)")
    print(f"    OVN daemons meanwhile: {used}")
    row("  br-int flows then, and after hv sync", f"{count:,} / {final:,}", "equal", count == final)
    row("  of which matching the listen addresses", f"{named:,}", "(info)")
    print(f"    then ovn-nbctl --wait=hv sync --print-wait-time: {cloud.waited}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args()
    machine_load()
    with ovn_cloud(chassis=1) as cloud:
        site = router_site(cloud)
        net = site["net"]["id"]
        target = cloud.create("ports", "port", network_id=net, name="target")
        plug(cloud, cloud.ovn.chassis[0], target["id"], "cnb-target")
        address = target["fixed_ips"][0]["ip_address"]
        # Warm-up: the flows a VIP and a listen address add here, once everything has settled. The first load
        # balancer of a datapath brings flows of its own: a 1-port forward stays for that.
        post_forward(cloud, net, {**two_ports("192.0.2.8", address), "ports": [
            {"protocol": "tcp", "listen_port": "80", "target_address": address}]})  # fmt: skip
        base = settle(cloud)
        post_forward(cloud, net, {**two_ports("192.0.2.9", address), "ports": [
            {"protocol": "tcp", "listen_port": "80", "target_address": address}]})  # fmt: skip
        one = settle(cloud) - base
        post_forward(cloud, net, two_ports("192.0.2.10", address))
        two = settle(cloud) - base - one
        per_vip = two - one
        for listen in ("192.0.2.9", "192.0.2.10"):
            delete_forward(cloud, net, listen)
        base = settle(cloud)
        if per_vip < 1:
            raise SystemExit(f"no OpenFlow flows for VIPs ({base}, {one}, {two}): is the target port bound?")
        print(f"OVN forwards ({versions()}): {PORTS:,} listen ports (real NB/SB/ovn-northd, 1 chassis, userspace "
              f"datapath; {base:,} flows before; a 2-port forward adds {two})")  # fmt: skip

        # Shape 1: one POST, one forward, one range.
        body = {"listen_address": "192.0.2.50", "ports": [
            {"protocol": "tcp", "listen_port": f"10000-{10000 + PORTS - 1}", "target_address": address}]}  # fmt: skip
        cpu, t0 = cpu_seconds(cloud), time.monotonic()
        post_forward(cloud, net, body)
        label = f"one forward of {PORTS:,} ports (one POST)"
        measure_pass(cloud, ["192.0.2.50"], base + 5 * PORTS, label, t0, cpu)
        delete_forward(cloud, net, "192.0.2.50")
        settle(cloud)

        # Shape 2: 40 forwards written by the first pass of a (re)started writer.
        cloud.sync.stop()
        per = PORTS // SPREAD
        listens = [f"192.0.2.{100 + i}" for i in range(SPREAD)]
        for listen in listens:
            post_forward(cloud, net, {"listen_address": listen, "ports": [
                {"protocol": "tcp", "listen_port": f"20000-{20000 + per - 1}", "target_address": address,
                 "target_port": "8080"}]})  # fmt: skip
        sync = cloud.restart_sync()
        cpu, t0 = cpu_seconds(cloud), time.monotonic()
        sync.start()
        label = f"{SPREAD} forwards x {per} ports (first pass of a started writer)"
        measure_pass(cloud, listens, base + 5 * PORTS, label, t0, cpu)
        base = cloud.flow_total()

        # One more forward, end to end, and its removal.
        adds, removes, passes, tails, busy = [], [], [], [], []
        more = base + two
        cpu = cpu_seconds(cloud)
        for k in range(args.samples):
            listen = f"192.0.2.{200 + k % 50}"
            tails.append(wait_quiet(cloud))
            t0 = time.monotonic()
            post_forward(cloud, net, two_ports(listen, address))
            adds.append(wait_for(lambda: cloud.flow_total() >= more, 60, "the flows", step=0.005) - t0)
            passes.append(cloud.sync.wait_synced(timeout=60).took)
            wait_quiet(cloud)
            t0 = time.monotonic()
            delete_forward(cloud, net, listen)
            removes.append(wait_for(lambda: cloud.flow_total() <= base, 60, "no flows", step=0.005) - t0)
        for k in range(args.samples):  # the same, back to back: each change meets the previous one's tail
            listen = f"192.0.2.{200 + k % 50}"
            t0 = time.monotonic()
            post_forward(cloud, net, two_ports(listen, address))
            busy.append(wait_for(lambda: cloud.flow_total() >= more, 60, "the flows", step=0.005) - t0)
            delete_forward(cloud, net, listen)
            wait_for(lambda: cloud.flow_total() <= base, 60, "no flows", step=0.005)
        print(f"one more forward (2 ports) beside {PORTS:,} forward ports, {args.samples} samples from settled OVN "
              f"(its daemons idle for 0.25 s first; p50 of the wait {percentile(tails, 50):.2f} s):")  # fmt: skip
        print(f"    OVN daemons, for all samples (adds and removals, both series): {cpu_used(cpu, cpu_seconds(cloud))}")
        p50 = percentile(adds, 50)
        row("POST -> its flows installed, p50", ms(p50), "<= 0.5 s", p50 <= 0.5)
        row("POST -> its flows installed, max", ms(max(adds)), "(info)")
        row("  its NB pass (start -> commit), p50", ms(percentile(passes, 50)), "(info)")
        row("DELETE -> its flows gone, p50", ms(percentile(removes, 50)), "(info)")
        row("POST -> flows, back to back (add, delete), p50", ms(percentile(busy, 50)), "(info)")


if __name__ == "__main__":
    main()

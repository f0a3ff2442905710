"""VM taps on OVN (issue 28): a VM instance's NIC plugged -> ACTIVE. Prints figures; asserts nothing.

Real OVN daemons (NB, SB, ovn-northd, one chassis: ovs-vswitchd on the userspace datapath + ovn-controller in a
namespace of its own), the cloudnet API and the server's northbound writer in this process, and the chassis' real
agent (Agent + OvnDataplane) on a thread of its own. A network with a router; after a warm-up VM (the network's
first on the chassis also brings up its metadata namespace), `--vms` VM instances (`"kind": "vm"`) are created one
after the other and timed:
  plugged -> ACTIVE  from the tap's appearance in the chassis' namespace (seen by a netlink poller on a thread of
                     its own, every millisecond) to the instance reading ACTIVE in the API (ovn-controller bound the
                     port in SB, the agent reported it): what a VMM waits once the device is there
  POST -> ACTIVE     the whole attach as a compute service sees it
  ACTIVE -> DHCP     a DHCPDISCOVER written on the tap (as its VMM would) until OVN's offer comes back, one every
                     200 ms (the tap is on its bridge, hybrid plug: a frame written within the first ~20 ms after
                     a VMM attaches can be lost while the bridge takes in the tap's carrier, as measured here, so
                     this is often one retry; a guest's first frame comes far later than that)

Usage (root): .venv/bin/python bench/vm_taps_ovn.py [--vms 30]
"""

from __future__ import annotations

import argparse
import random
import threading
import time

import httpx
from common import machine_load, median, ms, percentile, row
from ovn_common import OvnCloud, ovn_cloud, versions
from tests.ovn import tapio
from tests.support.cloud import running_agent

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn import tapdev
from cloudnet.dataplane.ovn.driver import OvnDataplane
from cloudnet.wire.guest_net import vm_device


def wait_active(api: httpx.Client, instance_id: str, timeout: float = 30) -> float:
    deadline = time.monotonic() + timeout
    while api.get(f"/instances/{instance_id}").json()["instance"]["status"] != "ACTIVE":
        if time.monotonic() > deadline:
            raise SystemExit(f"instance {instance_id} not ACTIVE in {timeout:g} s")
        time.sleep(0.002)  # (polled: readiness, with a deadline)
    return time.perf_counter()


class TapWatch:
    """Notes when each named tap appears in the namespace (netlink, polled every millisecond on its own thread)."""

    def __init__(self, ns: str) -> None:
        self.ns = ns
        self.wanted: set[str] = set()
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with netns.iproute(self.ns) as ipr:
            while not self.stop.is_set():
                for name in list(self.wanted - set(self.seen)):
                    if tapdev.find(ipr, name) is not None:
                        self.seen[name] = time.perf_counter()
                time.sleep(0.001)


def dhcp_offer(ns: str, tap: str, mac: str, timeout: float = 10) -> float:
    end = tapio.TapEnd(ns, tap)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            xid = random.getrandbits(32)
            end.send(tapio.dhcp(tapio.DISCOVER, mac, xid))
            if end.wait_for(lambda f, x=xid: tapio.dhcp_reply(f, x) is not None, 0.2) is not None:
                return time.perf_counter()
        raise SystemExit(f"no DHCP offer on {tap} in {timeout:g} s")
    finally:
        end.close()


def measure(cloud: OvnCloud, vms: int) -> dict[str, list[float]]:
    chassis = cloud.ovn.chassis[0]
    assert chassis.netns is not None
    net = cloud.create("networks", "network", name="bench")
    sub = cloud.create("subnets", "subnet", network_id=net["id"], cidr="10.202.0.0/22")
    router = cloud.create("routers", "router", name="bench")
    cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).raise_for_status()
    dataplane = OvnDataplane(chassis.name, chassis.ovs_url, cloud.ovn.sb_url, host_ns=chassis.netns)
    watch = TapWatch(chassis.netns)
    out: dict[str, list[float]] = {"plugged": [], "active": [], "dhcp": []}
    try:
        with running_agent(cloud.server.url, chassis.name, dataplane):
            for i in range(vms + 1):
                port = cloud.create("ports", "port", network_id=net["id"])
                tap = vm_device(port["id"])
                watch.wanted.add(tap)
                body = {"instance": {"name": f"vm{i}", "kind": "vm", "host": chassis.name,
                                     "nets": [{"port": port["id"]}]}}  # fmt: skip
                t0 = time.perf_counter()
                r = cloud.api.post("/instances", json=body)
                r.raise_for_status()
                active = wait_active(cloud.api, r.json()["instance"]["id"])
                offered = dhcp_offer(chassis.netns, tap, port["mac_address"])
                if i == 0:
                    continue  # the warm-up: the network's metadata namespace came up with it
                out["plugged"].append(active - watch.seen[tap])
                out["active"].append(active - t0)
                out["dhcp"].append(offered - active)
            for inst in cloud.api.get("/instances").json()["instances"]:
                cloud.api.delete(f"/instances/{inst['id']}")
    finally:
        watch.stop.set()
        watch.thread.join()
        dataplane.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vms", type=int, default=30)
    args = parser.parse_args()
    machine_load()
    with ovn_cloud(chassis=1) as cloud:
        fig = measure(cloud, args.vms)
    print(f"VM taps on OVN, {args.vms} VMs one after the other, one NIC each ({versions()}; real NB/SB/ovn-northd, "
          "1 chassis with its agent, userspace datapath):")  # fmt: skip
    p50 = percentile(fig["plugged"], 50)
    row("tap plugged -> ACTIVE p50", ms(p50), "<= 200 ms (OVN)", p50 <= 0.2)
    row("tap plugged -> ACTIVE p99", ms(percentile(fig["plugged"], 99)), "(info)")
    row("POST /v2.0/instances (kind vm) -> ACTIVE p50", ms(percentile(fig["active"], 50)), "(info)")
    row("ACTIVE -> first DHCP offer on the tap, median", ms(median(fig["dhcp"])), "(info)")


if __name__ == "__main__":
    main()

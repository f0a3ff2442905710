"""VM taps on OVN (issue 28): a VM instance's NIC plugged -> ACTIVE. Prints figures; asserts nothing.

Real OVN daemons (NB, SB, ovn-northd, one chassis: ovs-vswitchd on the userspace datapath + ovn-controller in a
namespace of its own), the cloudnet API and the server's northbound writer in this process, and the chassis' real
agent (Agent + OvnDataplane) on a thread of its own. A network with a router; after a warm-up VM (the network's
first on the chassis also brings up its metadata namespace), `--vms` VM instances (`"kind": "vm"`) are created one
after the other and timed:
  plugged -> ACTIVE  from the tap's appearance in the chassis' namespace (the kernel's link event, read by a process
                     of its own: TapWatch) to the instance reading ACTIVE in the API (ovn-controller bound the port
                     in SB, the agent reported it): what a VMM waits once the device is there. The agent makes the
                     tap last (its bridge and veth, qvo on br-int, then the tap: hybrid.py), so this is the tap's
                     enslave and link up, what is left of ovn-controller's binding, and the report
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
import socket
import struct
import subprocess
import sys
import threading
import time

import httpx
from common import machine_load, median, ms, percentile, row
from ovn_common import OvnCloud, ovn_cloud, versions
from tests.ovn import tapio
from tests.support.cloud import running_agent

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn.driver import OvnDataplane
from cloudnet.wire.guest_net import VM_DEVICE_PREFIX, vm_device


def wait_active(api: httpx.Client, instance_id: str, timeout: float = 30) -> float:
    deadline = time.monotonic() + timeout
    while api.get(f"/instances/{instance_id}").json()["instance"]["status"] != "ACTIVE":
        if time.monotonic() > deadline:
            raise SystemExit(f"instance {instance_id} not ACTIVE in {timeout:g} s")
        time.sleep(0.002)  # (polled: readiness, with a deadline)
    return time.monotonic()


class TapWatch:
    """Notes when each tap appears in the namespace: the kernel's own link events (RTM_NEWLINK, rtnetlink's link
    group) read by a process of its own, which stamps each new tap's name with CLOCK_MONOTONIC as it arrives
    (time.monotonic here reads the same clock). Not a thread of this process polling: the agent and the API run
    in this process, and a poller competing with them for the interpreter lock slowed what it timed."""

    def __init__(self, ns: str) -> None:
        self.seen: dict[str, float] = {}
        self.proc = subprocess.Popen([sys.executable, __file__, "--watch-taps", ns], stdout=subprocess.PIPE,
                                     text=True)  # fmt: skip
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("the tap watcher did not start")
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            name, at = line.split()
            self.seen.setdefault(name, float(at))

    def when(self, name: str, timeout: float = 5) -> float:
        deadline = time.monotonic() + timeout
        while name not in self.seen:
            if time.monotonic() > deadline:
                raise SystemExit(f"the tap watcher never saw {name}")
            time.sleep(0.01)  # (polled: the watcher's line may trail the API's answer)
        return self.seen[name]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()
        self.thread.join()


RTMGRP_LINK, RTM_NEWLINK, IFLA_IFNAME = 1, 16, 3


def watch_taps(ns: str) -> None:
    """The watcher process: one line `name monotonic-time` per tap the first time a link event names it (a plain
    rtnetlink socket subscribed to the link group, made in the namespace; the messages parsed here: nlmsghdr,
    ifinfomsg, then the attributes for the name)."""
    with netns.entered(ns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    sock.bind((0, RTMGRP_LINK))
    print("ready", flush=True)
    seen: set[str] = set()
    while True:
        data = sock.recv(1 << 16)
        at = time.monotonic()
        offset = 0
        while offset + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, offset)
            name = _ifname(data[offset + 32 : offset + length]) if kind == RTM_NEWLINK else None
            if name and name.startswith(VM_DEVICE_PREFIX) and name not in seen:
                seen.add(name)
                print(name, repr(at), flush=True)
            offset += (length + 3) & ~3 or len(data)


def _ifname(attrs: bytes) -> str | None:
    offset = 0
    while offset + 4 <= len(attrs):
        length, kind = struct.unpack_from("=HH", attrs, offset)
        if length < 4:
            return None
        if kind == IFLA_IFNAME:
            return attrs[offset + 4 : offset + length].split(b"\0", 1)[0].decode()
        offset += (length + 3) & ~3
    return None


def dhcp_offer(ns: str, tap: str, mac: str, timeout: float = 10) -> float:
    end = tapio.TapEnd(ns, tap)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            xid = random.getrandbits(32)
            end.send(tapio.dhcp(tapio.DISCOVER, mac, xid))
            if end.wait_for(lambda f, x=xid: tapio.dhcp_reply(f, x) is not None, 0.2) is not None:
                return time.monotonic()
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
                body = {"instance": {"name": f"vm{i}", "kind": "vm", "host": chassis.name,
                                     "nets": [{"port": port["id"]}]}}  # fmt: skip
                t0 = time.monotonic()
                r = cloud.api.post("/instances", json=body)
                r.raise_for_status()
                active = wait_active(cloud.api, r.json()["instance"]["id"])
                offered = dhcp_offer(chassis.netns, tap, port["mac_address"])
                if i == 0:
                    continue  # the warm-up: the network's metadata namespace came up with it
                out["plugged"].append(active - watch.when(tap))
                out["active"].append(active - t0)
                out["dhcp"].append(offered - active)
            for inst in cloud.api.get("/instances").json()["instances"]:
                cloud.api.delete(f"/instances/{inst['id']}")
    finally:
        watch.close()
        dataplane.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vms", type=int, default=30)
    parser.add_argument("--watch-taps", metavar="NS", help=argparse.SUPPRESS)  # (TapWatch's own process)
    args = parser.parse_args()
    if args.watch_taps:
        watch_taps(args.watch_taps)
        return
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

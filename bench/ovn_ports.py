"""Port create to ACTIVE on OVN (issue 20), beside the Linux dataplane's figure. Prints figures; asserts nothing.

Real OVN daemons (NB, SB, ovn-northd, one chassis: ovs-vswitchd on the userspace datapath + ovn-controller in a
namespace of its own), the cloudnet API, the server's northbound writer and the metadata API in this process, and
the chassis' real agent (Agent + OvnDataplane + metadata proxy, as `cloudnet agent --dataplane ovn` runs them) on a
thread of its own. A network with a router; after a warm-up instance (the network's first on the chassis also brings
up its metadata namespace), `--instances` instances are created one after the other, each through
POST /v2.0/instances with a namespace made before (as a container runtime does), and timed until:
  ACTIVE       the instance reads ACTIVE in the API (the agent reports a port ACTIVE only once ovn-controller has
               bound it in SB and the network's metadata proxy answers)
  ping         the instance's first ICMP echo answered by its gateway (the OVN logical router)
The Linux dataplane's figure is bench/attach.py's "pools disabled" mode (`cloudnet up`, POST -> ping gateway),
run here too unless --no-linux.

Usage (root): .venv/bin/python bench/ovn_ports.py [--instances 30] [--no-linux]
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

import httpx
from attach import _wait_pingable
from attach import run as linux_attach
from common import machine_load, median, ms, percentile, row
from ovn_common import OvnCloud, ovn_cloud
from tests.support.cloud import running_agent
from tests.support.metadata import RunningMetadata

from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn.driver import OvnDataplane
from cloudnet.metadata.model import Settings
from cloudnet.metadata.server import MetadataApp

SECRET = "ovn-bench-secret"


def wait_active(api: httpx.Client, instance_id: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while api.get(f"/instances/{instance_id}").json()["instance"]["status"] != "ACTIVE":
        if time.monotonic() > deadline:
            raise SystemExit(f"instance {instance_id} not ACTIVE in {timeout:g} s")
        time.sleep(0.002)  # (polled: readiness, with a deadline)


def measure(cloud: OvnCloud, instances: int, namespaces: list[str]) -> dict[str, list[float]]:
    chassis = cloud.ovn.chassis[0]
    suffix = uuid.uuid4().hex[:6]
    net = cloud.create("networks", "network", name="bench")
    sub = cloud.create("subnets", "subnet", network_id=net["id"], cidr="10.201.0.0/22")
    router = cloud.create("routers", "router", name="bench")
    cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).raise_for_status()
    metadata = RunningMetadata.start(MetadataApp(cloud.server.store, SECRET, Settings(), poll_interval=0.05))
    proxy = MetadataProxy(chassis.name, metadata.url, SECRET, retry_interval=0.1, burst=200)
    dataplane = OvnDataplane(chassis.name, chassis.ovs_url, cloud.ovn.sb_url, host_ns=chassis.netns)
    out: dict[str, list[float]] = {"active": [], "ping": [], "api": []}
    try:
        with running_agent(cloud.server.url, chassis.name, dataplane, observers=[proxy]):
            for i in range(instances + 1):
                ns = f"cnbo-{suffix}-{i}"
                netns.ensure(ns)
                namespaces.append(ns)
                body = {"instance": {"name": f"i{i}", "host": chassis.name, "netns": ns,
                                     "nets": [{"network": net["id"]}]}}  # fmt: skip
                t0 = time.perf_counter()
                r = cloud.api.post("/instances", json=body)
                answered = time.perf_counter() - t0
                r.raise_for_status()
                wait_active(cloud.api, r.json()["instance"]["id"])
                active = time.perf_counter() - t0
                _wait_pingable(ns, sub["gateway_ip"], 30)
                if i == 0:
                    continue  # the warm-up: the network's metadata namespace came up with it
                out["api"].append(answered)
                out["active"].append(active)
                out["ping"].append(time.perf_counter() - t0)
            for inst in cloud.api.get("/instances").json()["instances"]:
                cloud.api.delete(f"/instances/{inst['id']}")
    finally:
        proxy.close()
        metadata.stop()
        dataplane.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=30)
    parser.add_argument("--no-linux", action="store_true")
    args = parser.parse_args()
    machine_load()
    namespaces: list[str] = []
    try:
        with ovn_cloud(chassis=1) as cloud:
            fig = measure(cloud, args.instances, namespaces)
    finally:
        for ns in namespaces:
            netns.remove(ns)
    linux = None
    if not args.no_linux:
        cleanups: list[Callable[[], None]] = []
        try:
            linux = linux_attach("unpooled", args.instances, cleanups)
        finally:
            for cleanup in cleanups:
                cleanup()
    print(f"Port create -> ACTIVE on OVN, {args.instances} instances one after the other, one port each "
          "(real NB/SB/ovn-northd, 1 chassis with its agent, userspace datapath):")  # fmt: skip
    row("OVN: POST /v2.0/instances -> ACTIVE, p50", ms(percentile(fig["active"], 50)), "(report)")
    row("OVN: POST -> ACTIVE, p99", ms(percentile(fig["active"], 99)), "(info)")
    row("OVN: POST -> ping gateway, p50", ms(percentile(fig["ping"], 50)), "(report)")
    row("OVN: POST answer, median", ms(median(fig["api"])), "(info)")
    if linux is not None:
        row("Linux dataplane (bench/attach.py unpooled): POST -> ping gateway, p50", ms(linux["p50"]), "(compare)")
        row("  OVN / Linux, POST -> ping gateway p50", f"{percentile(fig['ping'], 50) / linux['p50']:.1f}x", "(info)")


if __name__ == "__main__":
    main()

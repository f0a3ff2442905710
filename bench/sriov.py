"""SR-IOV direct-port attach and release benchmark, at the driver level (dataplane/sriov/driver.py).

No SR-IOV hardware: a sysfs tree in tmp with one PF and N VFs, a veth pair standing in for the PF and for
each VF netdev, one namespace per instance. The PF-side VF MAC/VLAN request is recorded, not sent (it needs
hardware). Attach = apply() of the state with one more instance (alias, move into the namespace, rename
eth0, MAC, MTU, address, default route); release = apply() of the state without it (PF reset, netdev back
to the host namespace). Prints p50/p90 over N; asserts nothing.

Usage (root): .venv/bin/python bench/sriov.py [--instances 50]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from common import ms, percentile, row
from tests.support.sriov_tree import add_pf

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.sriov.driver import SriovDataplane


def _state(instances: list[dict[str, Any]], res: list[dict[str, Any]], ports: dict[str, Any]) -> dict[str, Any]:
    net = {"id": "net", "mtu": 1500, "network_type": "vlan", "physical_network": "physnet2", "segmentation_id": 100,
           "metadata_port": None, "admin_state_up": True, "router_external": False}  # fmt: skip
    sub = {"id": "sub", "network_id": "net", "cidr": "10.20.0.0/16", "ip_version": 4, "gateway_ip": "10.20.0.1",
           "host_routes": [], "dns_nameservers": []}  # fmt: skip
    return {"revision": 1, "host": "bench", "instances": instances, "ports": ports, "networks": {"net": net},
            "subnets": {"sub": sub}, "routers": [], "sriov": res}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=50)
    n = parser.parse_args().instances
    sfx = uuid.uuid4().hex[:5]
    tmp = Path(tempfile.mkdtemp(prefix="cloudnet-sriov-"))
    pf, vfs = f"cnbp{sfx}", [f"cnbv{sfx}{i:02d}" for i in range(n)]
    slots = add_pf(tmp / "sys", pf, list(vfs))
    links, namespaces = [pf, *vfs], [f"cntest-srb-{sfx}-{i}" for i in range(n)]
    try:
        for name in links:
            subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"], check=True)
        for ns in namespaces:
            netns.ensure(ns)
        requests: list[dict[str, Any]] = []
        dp = SriovDataplane("bench", tmp / "state", mappings={"physnet2": [pf]}, sysfs_root=tmp / "sys",
                            set_vf=requests.append)  # fmt: skip
        instances, res, ports = [], [], {}
        attach, release = [], []
        for i in range(n):
            pid = f"port-{i}"
            ports[pid] = {"id": pid, "network_id": "net", "mac_address": f"fa:16:3e:00:{i // 256:02x}:{i % 256:02x}",
                          "admin_state_up": True, "fixed_ips": [{"subnet_id": "sub", "ip_address": f"10.20.1.{i + 2}",
                                                                 "prefixlen": 16}]}  # fmt: skip
            instances.append({"id": f"inst-{i}", "netns": namespaces[i], "ports": [pid]})
            res.append({"port_id": pid, "pci_slot": slots[i], "pf": pf, "vf_index": i, "vlan": 100,
                        "physical_network": "physnet2", "mac_address": ports[pid]["mac_address"]})  # fmt: skip
            t0 = time.perf_counter()
            reports = dp.apply(_state(instances, res, ports))
            attach.append(time.perf_counter() - t0)
            assert reports[-1].status == "ACTIVE", reports[-1]
        for _ in range(n):
            instances.pop(0)
            res.pop(0)
            t0 = time.perf_counter()
            dp.apply(_state(instances, res, ports))
            release.append(time.perf_counter() - t0)
        print(f"SR-IOV direct ports, driver level, {n} instances (veth stand-ins; PF request recorded):")
        row("attach (apply with one more instance) p50", ms(percentile(attach, 50)), "-")
        row("attach p90", ms(percentile(attach, 90)), "-")
        row("release (apply without it) p50", ms(percentile(release, 50)), "-")
        row("release p90", ms(percentile(release, 90)), "-")
        print(f"  PF requests recorded: {len(requests)} (expected {2 * n})")
    finally:
        for ns in namespaces:
            netns.remove(ns)
        for name in links:
            subprocess.run(["ip", "link", "del", name], capture_output=True)


if __name__ == "__main__":
    main()

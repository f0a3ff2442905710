"""Zun's `direct` case through the real dockerd: a pre-created SR-IOV port joined by a container, its VF netdev
handed to the container, kept across an agent restart, and back on the host, clean, after Leave.

The VF is a FAKE: there is no SR-IOV hardware (no VF) on the test machines. The sysfs tree is built in tmp
(tests/support/sriov_tree.py) and the PF and VF netdevs are veth devices; everything done to the VF netdev (moves,
renames, MAC, alias) is real, and the PF-side request (`ip link set <pf> vf ...`, which a veth PF refuses) is
recorded instead of sent (as tests/integration/test_sriov_dataplane.py does)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.dataplane.sriov import inventory as inv
from cloudnet.dataplane.sriov.driver import SriovDataplane
from tests.integration.test_docker_driver import IMAGE, RUN, docker, dockerd
from tests.support.cloud import running_agent
from tests.support.docker_driver import driver_for
from tests.support.server import RunningServer
from tests.support.sriov_cloud import direct_port, vlan_network
from tests.support.sriov_tree import add_pf

__all__ = ["dockerd", "driver_for"]


def link(name: str) -> dict[str, Any] | None:
    r = subprocess.run(["ip", "-j", "link", "show", name], capture_output=True, text=True)
    return dict(json.loads(r.stdout)[0]) if r.returncode == 0 else None


class FakeSriovHost:
    def __init__(self, tmp: Path, server: RunningServer) -> None:
        sfx = uuid.uuid4().hex[:6]
        self.host, self.pf, self.vf = f"sd-{sfx}", f"cnpf{sfx}", f"cnv{sfx}0"
        self.sysfs, self.state_dir, self.url = tmp / "sys", tmp / "agent", server.url
        add_pf(self.sysfs, self.pf, [self.vf])
        for name in (self.pf, self.vf):
            subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"], check=True)
        self.requests: list[dict[str, Any]] = []  # the PF-side requests (sending them needs hardware)

    def agent(self) -> AbstractContextManager[Any]:
        report = {"sriov": inv.inventory_report(inv.read_inventory({"physnet2": [self.pf]}, None, self.sysfs))}
        sriov = SriovDataplane(self.host, self.state_dir, mappings={"physnet2": [self.pf]}, sysfs_root=self.sysfs,
                               set_vf=self.requests.append, report=report)  # fmt: skip
        return running_agent(self.url, self.host, LinuxDataplane(self.host, binders=[sriov]), report)

    def cleanup(self) -> None:
        LinuxDataplane(self.host).teardown()
        for name in (self.pf, self.vf):
            subprocess.run(["ip", "link", "del", name], capture_output=True)


@pytest.fixture
def rig(tmp_path: Path, server: RunningServer) -> Iterator[FakeSriovHost]:
    r = FakeSriovHost(tmp_path, server)
    try:
        yield r
    finally:
        r.cleanup()


def test_direct_port_through_join(dockerd: dict[str, str], rig: FakeSriovHost, driver_for: Any,
                                  api: httpx.Client) -> None:  # fmt: skip
    net_id = vlan_network(api)
    (subnet,) = api.get("/subnets", params={"network_id": net_id}).json()["subnets"]
    port = direct_port(api, net_id)  # Zun's pre-created port, joined by its address
    address = port["fixed_ips"][0]["ip_address"]
    name, box = f"cns-{uuid.uuid4().hex[:6]}", f"cns-{uuid.uuid4().hex[:6]}-c"
    with contextlib.ExitStack() as cleanup:
        agent = contextlib.ExitStack()
        cleanup.callback(agent.close)
        agent.enter_context(rig.agent())
        d = driver_for("admin", rig.host)
        docker(dockerd, "network", "create", "-d", d.name, "--ipam-driver", d.name, "--subnet", subnet["cidr"],
               "-o", f"cloudnet.network={net_id}", "--ipam-opt", f"cloudnet.subnet={subnet['id']}", name)  # fmt: skip
        cleanup.callback(docker, dockerd, "network", "rm", name, check=False)
        cleanup.callback(docker, dockerd, "rm", "-f", box, check=False)
        docker(dockerd, "run", "-d", *RUN, "--network", name, "--ip", address, "--name", box, IMAGE, "sleep", "300")
        eth0 = docker(dockerd, "exec", box, "ip", "-o", "link", "show", "eth0").stdout
        assert port["mac_address"] in eth0  # the VF netdev, with the port's MAC, is the container's eth0
        assert link(rig.vf) is None  # not on the host any more
        bound = api.get(f"/ports/{port['id']}").json()["port"]
        assert bound["status"] == "ACTIVE" and bound["binding:vif_type"] == "hw_veb"
        assert rig.requests[-1]["vf"]["mac"] == port["mac_address"]
        agent.close()  # the agent stops (the container stays); restarted, nothing in memory, it finds the
        agent.enter_context(rig.agent())  # handed-off VF: the NIC stays in place, the port ACTIVE
        assert docker(dockerd, "exec", box, "ip", "-o", "link", "show", "eth0").stdout == eth0
        assert api.get(f"/ports/{port['id']}").json()["port"]["status"] == "ACTIVE"
        docker(dockerd, "rm", "-f", box)
        # Leave: the VF comes home under its own name, its alias cleared, reset on the PF, the port free
        wait_for(lambda: (found := link(rig.vf)) is not None and not found.get("ifalias"), "the VF home, clean")
        wait_for(lambda: rig.requests[-1]["vf"]["mac"] == "00:00:00:00:00:00", "the VF reset on its PF")
        freed = api.get(f"/ports/{port['id']}").json()["port"]
        assert freed["device_id"] == "" and freed["status"] == "DOWN"
        assert not list((rig.state_dir / "sriov").glob("*.json"))  # no record left of the plug
        docker(dockerd, "network", "rm", name)


def wait_for(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)

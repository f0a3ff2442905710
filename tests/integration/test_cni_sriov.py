"""cloudnet-cni with `physnet`: the container gets an SR-IOV VF (a `direct` port on that physical network) under
the runtime's interface name, and the VF goes home when the container goes.

The VF is a FAKE, as in tests/integration/test_docker_sriov.py: the sysfs tree is built in tmp
(tests/support/sriov_tree.py) and the PF and VF netdevs are veth devices; everything done to the VF netdev (move,
rename, MAC) is real, and the PF-side request (which a veth PF refuses) is recorded instead of sent."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.dataplane.sriov import inventory as inv
from cloudnet.dataplane.sriov.driver import SriovDataplane
from tests.support.cloud import ns_run
from tests.support.cni import CniCloud, cni_cloud, invoke
from tests.support.sriov_tree import add_pf

PHYSNET = "physnet2"


def link(name: str) -> dict[str, Any] | None:
    r = subprocess.run(["ip", "-j", "link", "show", name], capture_output=True, text=True)
    return dict(json.loads(r.stdout)[0]) if r.returncode == 0 else None


class Rig:
    def __init__(self, tmp: Path) -> None:
        sfx = uuid.uuid4().hex[:6]
        self.pf, self.vf, self.sysfs = f"cnpf{sfx}", f"cnv{sfx}0", tmp / "sys"
        add_pf(self.sysfs, self.pf, [self.vf])
        for name in (self.pf, self.vf):
            subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"], check=True)
        self.requests: list[dict[str, Any]] = []  # the PF-side requests (sending them needs hardware)
        self.tmp = tmp

    def dataplane(self, host: str) -> tuple[LinuxDataplane, dict[str, Any]]:
        mappings = {PHYSNET: [self.pf]}
        report = {"sriov": inv.inventory_report(inv.read_inventory(mappings, None, self.sysfs))}
        sriov = SriovDataplane(host, self.tmp / "agent", mappings=mappings, sysfs_root=self.sysfs,
                               set_vf=self.requests.append, report=report)  # fmt: skip
        return LinuxDataplane(host, binders=[sriov]), report

    def cleanup(self) -> None:
        for name in (self.pf, self.vf):
            subprocess.run(["ip", "link", "del", name], capture_output=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[tuple[CniCloud, Rig, str]]:
    work = tmp_path_factory.mktemp("cnisriov")
    rig = Rig(work)
    try:
        with cni_cloud(work / "cloud", sqlite_template, dataplane=rig.dataplane) as cloud:
            net = cloud.cloud.create("networks", "network", {
                "name": f"vf-net-{cloud.cloud.suffix}", "project_id": "alice", "provider:network_type": "vlan",
                "provider:physical_network": PHYSNET, "provider:segmentation_id": 100})  # fmt: skip
            cloud.cloud.create("subnets", "subnet", {"network_id": net["id"], "cidr": "10.79.0.0/24",
                                                     "project_id": "alice"})  # fmt: skip
            yield cloud, rig, net["name"]
    finally:
        rig.cleanup()


def wait_for(check: Any, what: str, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_vf_under_the_runtimes_name_and_home_again(site: tuple[CniCloud, Rig, str]) -> None:
    cloud, rig, network = site
    conf = cloud.conf(network=network, args={"cloudnet": {"physnet": PHYSNET}})
    name = cloud.cloud.namespace("vf")
    cid, path = uuid.uuid4().hex, f"/run/netns/{name}"
    code, res = invoke("ADD", conf, cid, path, ifname="net1")
    assert code == 0, res
    assert res is not None and [i["name"] for i in res["interfaces"]] == ["net1"]
    (inst,) = [i for i in cloud.instances() if i["netns"] == path]
    (nic,) = inst["nets"]
    assert nic["binding:vnic_type"] == "direct" and nic["binding:vif_type"] == "hw_veb" and nic["ifname"] == "net1"
    assert res["interfaces"][0]["mac"] == nic["mac_address"] == rig.requests[-1]["vf"]["mac"]
    inside = json.loads(ns_run(name, "ip", "-j", "link", "show", "net1").stdout)[0]
    assert inside["address"] == nic["mac_address"] and link(rig.vf) is None  # the VF itself, moved and renamed
    assert res["ips"][0]["address"] in ns_run(name, "ip", "-o", "addr", "show", "net1").stdout
    assert invoke("CHECK", {**conf, "prevResult": res}, cid, path, ifname="net1") == (0, None)
    other = f"/run/netns/{cloud.cloud.namespace('vf2')}"  # the host's only VF is taken: refused, nothing left
    code, err = invoke("ADD", conf, uuid.uuid4().hex, other)
    assert code == 1 and err is not None and err["code"] == 100, err
    assert not [i for i in cloud.instances() if i["netns"] == other]
    assert [p["id"] for p in cloud.api.get("/ports", params={"network_id": nic["network_id"]}).json()["ports"]
            if str(p["description"]).startswith("cloudnet-cni")] == [nic["port_id"]]  # fmt: skip

    assert invoke("DEL", conf, cid, path, ifname="net1") == (0, None)
    assert not [i for i in cloud.instances() if i["netns"] == path]
    assert cloud.api.get(f"/ports/{nic['port_id']}").status_code == 404  # the plugin's own port goes with it
    wait_for(lambda: link(rig.vf) is not None, "the VF home")
    wait_for(lambda: rig.requests[-1]["vf"]["mac"] == "00:00:00:00:00:00", "the VF reset on its PF")


def test_a_physnet_the_network_is_not_on(site: tuple[CniCloud, Rig, str]) -> None:
    cloud, _rig, network = site
    path = f"/run/netns/{cloud.cloud.namespace('vfbad')}"
    for conf in (cloud.conf(network=network, physnet="physnet9"), cloud.conf(physnet=PHYSNET),  # a veth network
                 cloud.conf(network=network, physnet="phys/net")):  # fmt: skip
        code, err = invoke("ADD", conf, uuid.uuid4().hex, path)
        assert code == 1 and err is not None and err["code"] == 7, err
    assert not [i for i in cloud.instances() if i["netns"] == path]
    assert not [p for p in cloud.api.get("/ports", params={"binding:vnic_type": "direct"}).json()["ports"]
                if str(p["description"]).startswith("cloudnet-cni")]  # fmt: skip

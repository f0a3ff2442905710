"""Kuryr's nested mode through cloudnet-cni (root): the "VM" is an instance of alice's whose port is a trunk's parent
(a namespace with its eth0, as the Linux agent plugs it); the plugin, told `nested: {link: eth0}` and the VM's
namespace, makes the pod's port a subport of that trunk on a free VLAN and gives the pod that VLAN on the VM's device.
The pod then reaches an instance on its network; DEL takes it all away again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudnet.cni.errors import INVALID_CONFIG
from tests.support.cloud import ns_run, ping
from tests.support.cni import CniCloud, cni_cloud, invoke


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[CniCloud]:
    with cni_cloud(tmp_path_factory.mktemp("cni-nested"), sqlite_template) as c:
        yield c


def alices_instance(rig: CniCloud, name: str, network_id: str) -> dict[str, Any]:
    port = rig.cloud.create("ports", "port", {"network_id": network_id, "project_id": "alice"})
    made = rig.cloud.create(
        "instances",
        "instance",
        {
            "name": name,
            "host": rig.cloud.host,
            "project_id": "alice",
            "netns": rig.cloud.namespace(name),
            "nets": [{"port": port["id"]}],
        },
    )
    return rig.cloud.wait_active(made["id"])


def test_a_pod_nested_in_a_vm_gets_a_subport_vlan(rig: CniCloud) -> None:
    cloud, api = rig.cloud, rig.api
    vm_net = cloud.create("networks", "network", {"name": f"vm-{cloud.suffix}", "project_id": "alice"})
    cloud.create("subnets", "subnet", {"network_id": vm_net["id"], "cidr": "10.79.0.0/24", "project_id": "alice"})
    vm = alices_instance(rig, "nvm", vm_net["id"])
    vm_port_id = vm["nets"][0]["port_id"]
    trunk = cloud.create("trunks", "trunk", {"port_id": vm_port_id, "project_id": "alice"})
    peer = alices_instance(rig, "npeer", rig.network["id"])  # (alice's: her default group lets her pods in)
    peer_ip = peer["nets"][0]["fixed_ips"][0]["ip_address"]
    pod = cloud.namespace("pod")
    conf = rig.conf(nested={"link": "eth0", "netns": f"/var/run/netns/{vm['netns']}"})

    code, out = invoke("ADD", conf, "pod-1", f"/var/run/netns/{pod}")
    assert code == 0, out
    assert out is not None
    (sub,) = api.get(f"/trunks/{trunk['id']}").json()["trunk"]["sub_ports"]
    assert sub["segmentation_id"] == 1  # the lowest free VLAN
    port = api.get(f"/ports/{sub['port_id']}").json()["port"]
    assert port["network_id"] == rig.network["id"] and port["project_id"] == "alice"
    assert out["interfaces"][0]["mac"] == port["mac_address"]
    own = port["fixed_ips"][0]["ip_address"]
    assert out["ips"][0]["address"] == f"{own}/24"
    assert f" {own}/24 " in ns_run(pod, "ip", "-o", "-4", "addr", "show", "eth0").stdout
    assert ping(pod, peer_ip, count=3), "the pod does not reach its network through the VM's trunk"
    assert ping(peer["netns"], own, count=1)
    assert ns_run(vm["netns"], "ip", "link", "show", "cnk-1").returncode == 0
    assert invoke("CHECK", {**conf, "prevResult": out}, "pod-1", f"/var/run/netns/{pod}") == (0, None)

    # a second pod takes the next VLAN; GC (the runtime lists only the second) takes the first away
    pod2 = cloud.namespace("pod2")
    code, out2 = invoke("ADD", conf, "pod-2", f"/var/run/netns/{pod2}")
    assert code == 0, out2
    assert sorted(s["segmentation_id"] for s in api.get(f"/trunks/{trunk['id']}").json()["trunk"]["sub_ports"]) == [
        1,
        2,
    ]
    valid = [{"containerID": "pod-2", "ifname": "eth0"}]
    assert invoke("GC", {**conf, "cni.dev/valid-attachments": valid}) == (0, None)
    (left,) = api.get(f"/trunks/{trunk['id']}").json()["trunk"]["sub_ports"]
    assert left["segmentation_id"] == 2
    assert api.get(f"/ports/{port['id']}").status_code == 404
    assert ns_run(vm["netns"], "ip", "link", "show", "cnk-1").returncode != 0
    assert not ping(pod, peer_ip, count=1, wait=0.5)
    assert ping(pod2, peer_ip, count=2)

    code, out = invoke("DEL", conf, "pod-2", f"/var/run/netns/{pod2}")
    assert code == 0, out
    assert api.get(f"/trunks/{trunk['id']}").json()["trunk"]["sub_ports"] == []
    assert ns_run(vm["netns"], "ip", "link", "show", "cnk-2").returncode != 0
    assert invoke("DEL", conf, "pod-2", f"/var/run/netns/{pod2}")[0] == 0  # a second DEL finds nothing to do


def test_a_link_whose_port_is_no_trunk_parent_is_refused(rig: CniCloud) -> None:
    cloud = rig.cloud
    plain = alices_instance(rig, "nplain", rig.network["id"])
    pod = cloud.namespace("pod2")
    conf = rig.conf(nested={"link": "eth0", "netns": f"/var/run/netns/{plain['netns']}"})
    code, out = invoke("ADD", conf, "pod-2", f"/var/run/netns/{pod}")
    assert code != 0 and out is not None and out["code"] == INVALID_CONFIG, out
    assert "no trunk's parent" in out["msg"], out
    for bad in ({"link": "eth0;x"}, {"link": "eth0", "netns": "relative"}, {"link": "eth0", "other": 1}, "eth0"):
        code, out = invoke("ADD", rig.conf(nested=bad), "pod-3", f"/var/run/netns/{pod}")
        assert code != 0 and out is not None and out["code"] == INVALID_CONFIG, (bad, out)

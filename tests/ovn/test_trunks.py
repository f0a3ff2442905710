"""Trunks on OVN (one chassis, userspace datapath), with real traffic: the server writes each subport as a container
port (parent_name = the parent's port, tag = its VLAN), as Neutron's OVN trunk driver does; the agent reports it
ACTIVE once ovn-controller bound it. Inside the parent's instance a VLAN interface with the subport's id, MAC and
address (made in user space: this kernel has no 8021q, tests/support/vlan_guest.py) reaches an instance on the
subport's network; the subport's VLAN reaches that network and nothing else; another VLAN reaches nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import frames
from tests.support.cloud import Cloud, ns_run, ping
from tests.support.ovn import OvnSandbox
from tests.support.ovn_site import ovn_site
from tests.support.vlan_guest import VlanIface

VID, OTHER_VID = 101, 102


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[tuple[OvnSandbox, Cloud]]:
    with ovn_site(tmp_path_factory.mktemp("ovn-trunks") / "state", sqlite_template) as site, site.agent():
        yield site.sandbox, site.cloud


def address(port: dict[str, Any]) -> str:
    return str(port["fixed_ips"][0]["ip_address"])


def marker() -> bytes:
    return b"cloudnet-ovn-trunk-" + uuid.uuid4().hex.encode()


def broadcast(src_mac: str, src_ip: str, dst_ip: str, mark: bytes, vlan: int | None) -> bytes:
    return frames.ethernet("ff:ff:ff:ff:ff:ff", src_mac, 0x0800, frames.ipv4_udp(src_ip, dst_ip, 40000, 5500, mark),
                           vlan)  # fmt: skip


def test_subports_are_container_ports_and_their_vlans_reach_their_network_only(
    world: tuple[OvnSandbox, Cloud], request: pytest.FixtureRequest
) -> None:
    sandbox, cloud = world
    api = cloud.api
    nets = {n: cloud.network(f"ot{n}", f"10.8{i}.0.0/24")[0] for i, n in enumerate("abc")}
    # (no port security on the peers: what reaches them is what OVN forwards, whatever its addresses)
    ports = {n: cloud.create("ports", "port", {"network_id": nets[n]["id"]}) for n in "abc"}
    trunked = cloud.instance("ottr", [{"network": nets["a"]["id"]}])
    peers = {n: cloud.instance(f"otp{n}", [{"port": ports[n]["id"]}]) for n in "abc"}
    parent = api.get(f"/ports/{trunked['nets'][0]['port_id']}").json()["port"]
    sub = cloud.create("ports", "port", {"network_id": nets["b"]["id"]})
    trunk = cloud.create("trunks", "trunk", {"port_id": parent["id"], "sub_ports": [
        {"port_id": sub["id"], "segmentation_type": "vlan", "segmentation_id": VID}]})  # fmt: skip
    cloud.wait_for(lambda: api.get(f"/trunks/{trunk['id']}").json()["trunk"]["status"] == "ACTIVE", timeout=30,
                   what="the trunk ACTIVE (its subport bound by ovn-controller)")  # fmt: skip
    lsp = json.loads(sandbox.nbctl("--format=json", "--columns=parent_name,tag", "find", "Logical_Switch_Port",
                                   f"name={sub['id']}"))["data"]  # fmt: skip
    assert lsp == [[parent["id"], VID]]

    ns = trunked["netns"]
    vlan = VlanIface(ns, "eth0", VID, f"eth0.{VID}", sub["mac_address"])
    request.addfinalizer(vlan.close)
    ns_run(ns, "ip", "addr", "add", f"{address(sub)}/24", "dev", f"eth0.{VID}", check=True)
    cloud.wait_for(lambda: ping(peers["b"]["netns"], address(sub), wait=1), timeout=20,
                   what="the subport's VLAN reaching its network")  # fmt: skip
    assert ping(ns, address(ports["a"]), count=1, wait=2)  # the parent, untagged, as before

    caught = {n: frames.Catcher.start(peers[n]["netns"]) for n in "abc"}
    try:
        on_vid, off_vid, plain = marker(), marker(), marker()
        frames.send(ns, broadcast(parent["mac_address"], address(parent), address(ports["a"]), off_vid, OTHER_VID))
        frames.send(ns, broadcast(sub["mac_address"], address(sub), address(ports["b"]), on_vid, VID))
        frames.send(ns, broadcast(parent["mac_address"], address(parent), address(ports["a"]), plain, None))
        assert caught["b"].seen(on_vid, 5) and caught["a"].seen(plain, 5)
        assert not any(c.seen(off_vid, 0) for c in caught.values()), "a VLAN that is no subport got through"
        assert not caught["a"].seen(on_vid, 0) and not caught["c"].seen(on_vid, 0), "the subport's VLAN leaked"
    finally:
        for c in caught.values():
            c.stop()

    # Out of the trunk: a plain port again in NB, and the VLAN reaches nothing
    r = api.put(f"/trunks/{trunk['id']}/remove_subports", json={"sub_ports": [{"port_id": sub["id"]}]})
    assert r.status_code == 200, r.text

    def plain_again() -> bool:
        found = json.loads(sandbox.nbctl("--format=json", "--columns=parent_name,tag", "find", "Logical_Switch_Port",
                                         f"name={sub['id']}"))["data"]  # fmt: skip
        return found == [[["set", []], ["set", []]]]

    cloud.wait_for(plain_again, what="the subport a plain port again")
    sandbox.nbctl("--wait=hv", "sync")
    assert not ping(peers["b"]["netns"], address(sub), count=1, wait=1)

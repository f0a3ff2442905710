"""Trunks on the Linux dataplane, with real traffic (root): an instance on a trunk's parent sees its subports as VLANs
on its one device. A VLAN interface made inside with a subport's id, MAC and address reaches an instance on the
subport's network; the subport's VLAN reaches that network and nothing else; a frame tagged with a VLAN that is no
subport reaches nothing. A container's parent (a veth) and a VM's (its tap, with tests/support/tap_guest.py as the
VMM: no guest to boot). This kernel has no 8021q, so the guest's VLAN interface is made in user space
(tests/support/vlan_guest.py)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from cloudnet.dataplane.linux import names
from tests.support import frames
from tests.support.cloud import Cloud, ns_run, ping
from tests.support.tap_guest import TapGuest
from tests.support.vlan_guest import VlanIface

VID, OTHER_VID = 101, 102


def marker() -> bytes:
    return b"cloudnet-trunk-" + uuid.uuid4().hex.encode()


def broadcast(src_mac: str, src_ip: str, dst_ip: str, mark: bytes, vlan: int | None) -> bytes:
    return frames.ethernet("ff:ff:ff:ff:ff:ff", src_mac, 0x0800, frames.ipv4_udp(src_ip, dst_ip, 40000, 5500, mark),
                           vlan)  # fmt: skip


def port_of(api: httpx.Client, inst: dict[str, Any]) -> dict[str, Any]:
    return dict(api.get(f"/ports/{inst['nets'][0]['port_id']}").json()["port"])


def address(port: dict[str, Any]) -> str:
    return str(port["fixed_ips"][0]["ip_address"])


def test_subport_vlans_reach_their_network_and_nothing_else(cloud: Cloud, request: pytest.FixtureRequest) -> None:
    cloud.start_agent()
    api = cloud.api
    net_a, _ = cloud.network("trunk-a", "10.71.0.0/24")
    net_b, _ = cloud.network("trunk-b", "10.72.0.0/24")
    net_c, _ = cloud.network("trunk-c", "10.73.0.0/24")
    trunked = cloud.instance("tr", [{"network": net_a["id"]}])
    peers = {n: cloud.instance(f"p{n}", [{"network": net["id"]}]) for n, net in (("a", net_a), ("b", net_b),
                                                                                   ("c", net_c))}  # fmt: skip
    parent = port_of(api, trunked)
    sub = api.post("/ports", json={"port": {"network_id": net_b["id"]}}).json()["port"]
    r = api.post("/trunks", json={"trunk": {"port_id": parent["id"], "sub_ports": [
        {"port_id": sub["id"], "segmentation_type": "vlan", "segmentation_id": VID}]}})  # fmt: skip
    assert r.status_code == 201, r.text
    trunk = r.json()["trunk"]
    # Realised: the subport reported ACTIVE by the agent (its VLAN device on the subport network's bridge)
    cloud.wait_for(lambda: api.get(f"/trunks/{trunk['id']}").json()["trunk"]["status"] == "ACTIVE",
                   what="the trunk ACTIVE")  # fmt: skip
    shown = api.get(f"/ports/{sub['id']}").json()["port"]
    assert shown["status"] == "ACTIVE" and shown["binding:host_id"] == cloud.host
    assert shown["binding:vif_details"]["tap"] == names.tap(sub["id"])
    # Inside: the guest's VLAN interface for the subport, with the subport's MAC and address
    ns = trunked["netns"]
    vlan = VlanIface(ns, "eth0", VID, f"eth0.{VID}", sub["mac_address"])
    request.addfinalizer(vlan.close)
    ns_run(ns, "ip", "addr", "add", f"{address(sub)}/24", "dev", f"eth0.{VID}", check=True)
    pa, pb = port_of(api, peers["a"]), port_of(api, peers["b"])
    assert ping(peers["b"]["netns"], address(sub), count=3), "the subport's VLAN does not reach its network"
    assert ping(ns, address(pb), count=1)
    assert ping(ns, address(pa), count=1)  # (the parent, untagged, as before)

    caught = {n: frames.Catcher.start(peers[n]["netns"]) for n in "abc"}
    try:
        on_vid, off_vid, plain = marker(), marker(), marker()
        # hostile first: a VLAN that is no subport; then the twins that must arrive
        frames.send(ns, broadcast(parent["mac_address"], address(parent), address(pa), off_vid, OTHER_VID))
        frames.send(ns, broadcast(sub["mac_address"], address(sub), address(pb), on_vid, VID))
        frames.send(ns, broadcast(parent["mac_address"], address(parent), address(pa), plain, None))
        assert caught["b"].seen(on_vid, 3) and caught["a"].seen(plain, 3)
        assert not any(c.seen(off_vid, 0) for c in caught.values()), "a VLAN that is no subport got through"
        assert not caught["a"].seen(on_vid, 0) and not caught["c"].seen(on_vid, 0), "the subport's VLAN leaked"
        assert not any(f[12:14] == b"\x81\x00" for c in caught.values() for f in c.frames), "a tagged frame arrived"
    finally:
        for c in caught.values():
            c.stop()
    assert not ping(peers["c"]["netns"], address(sub), count=1, wait=0.5)

    # Removed from the trunk: its VLAN device goes, and the VLAN reaches nothing any more
    r = api.put(f"/trunks/{trunk['id']}/remove_subports", json={"sub_ports": [{"port_id": sub["id"]}]})
    assert r.status_code == 200, r.text
    host_links = lambda: ns_run(names.host_ns(cloud.host), "ip", "-o", "link").stdout  # noqa: E731
    cloud.wait_for(lambda: names.tap(sub["id"]) + "@" not in host_links(), what="the subport's VLAN device to go")
    assert not ping(peers["b"]["netns"], address(sub), count=1, wait=0.5)


def test_a_vms_subport_vlan_reaches_its_network(cloud: Cloud, request: pytest.FixtureRequest) -> None:
    """The parent a VM's NIC (its tap: tests/support/tap_guest.py as the VMM, a namespace as the guest)."""
    cloud.start_agent()
    api = cloud.api
    net_a, _ = cloud.network("vtrunk-a", "10.74.0.0/24")
    net_b, _ = cloud.network("vtrunk-b", "10.75.0.0/24")
    box = cloud.instance("vpb", [{"network": net_b["id"]}])
    inst = cloud.create("instances", "instance", {"name": "vtr", "host": cloud.host, "kind": "vm",
                                                  "nets": [{"network": net_a["id"]}]})  # fmt: skip
    nic = cloud.wait_active(inst["id"])["nets"][0]
    sub = api.post("/ports", json={"port": {"network_id": net_b["id"]}}).json()["port"]
    trunk = api.post("/trunks", json={"trunk": {"port_id": nic["port_id"], "sub_ports": [
        {"port_id": sub["id"], "segmentation_type": "vlan", "segmentation_id": VID}]}}).json()["trunk"]  # fmt: skip
    cloud.wait_for(lambda: api.get(f"/trunks/{trunk['id']}").json()["trunk"]["status"] == "ACTIVE",
                   what="the VM's trunk ACTIVE")  # fmt: skip
    guest = cloud.namespace("vtrg")
    tap_guest = TapGuest(names.host_ns(cloud.host), nic["device"], guest, nic["mac_address"], 1500)
    request.addfinalizer(tap_guest.close)
    vlan = VlanIface(guest, "eth0", VID, f"eth0.{VID}", sub["mac_address"])
    request.addfinalizer(vlan.close)
    ns_run(guest, "ip", "addr", "add", f"{address(sub)}/24", "dev", f"eth0.{VID}", check=True)
    assert ping(guest, address(port_of(api, box)), count=3), "the VM's subport VLAN does not reach its network"
    caught = frames.Catcher.start(box["netns"])
    try:
        off_vid, on_vid = marker(), marker()
        tap_guest.inject(broadcast(sub["mac_address"], address(sub), address(port_of(api, box)), off_vid, OTHER_VID))
        tap_guest.inject(broadcast(sub["mac_address"], address(sub), address(port_of(api, box)), on_vid, VID))
        assert caught.seen(on_vid, 3) and not caught.seen(off_vid, 0)
    finally:
        caught.stop()

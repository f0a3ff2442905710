"""Trunks through the live API on both backends: Neutron's shapes (trunk, sub_ports, trunk_details on the parent),
its rules and its refusals word for word, and a member's hostile requests (another project's ports, VLAN ids out
of range or taken, too many subports in one call, a port already in use)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from cloudnet.services.ports.trunk_rules import MAX_SUBPORTS_PER_CALL
from tests.api.test_hosts import active, heartbeat, instance, port_ids, report
from tests.support.api import check_error, create, create_network, create_subnet

Json = dict[str, Any]


def port(client: httpx.Client, network_id: str, **attrs: Any) -> Json:
    return create(client, "ports", "port", network_id=network_id, **attrs)


def sub(port_id: str, vid: int) -> Json:
    return {"port_id": port_id, "segmentation_type": "vlan", "segmentation_id": vid}


def net_of(client: httpx.Client, cidr: str = "10.0.0.0/24") -> Json:
    network = create_network(client, name="n")
    create_subnet(client, network["id"], cidr)
    return network


def test_trunk_lifecycle(api: httpx.Client) -> None:
    net, other = net_of(api), net_of(api, "10.1.0.0/24")
    parent, a, b = port(api, net["id"]), port(api, other["id"]), port(api, other["id"])
    trunk = create(api, "trunks", "trunk", port_id=parent["id"], name="t1", sub_ports=[sub(a["id"], 100)])
    assert trunk["port_id"] == parent["id"] and trunk["name"] == "t1" and trunk["admin_state_up"] is True
    assert trunk["status"] == "DOWN"  # the parent is plugged nowhere yet
    assert trunk["sub_ports"] == [sub(a["id"], 100)]
    assert {"project_id", "tenant_id", "created_at", "updated_at", "revision_number", "tags"} <= trunk.keys()
    # The subport is the trunk's (Neutron's device attributes of a subport)
    got = api.get(f"/ports/{a['id']}").json()["port"]
    assert (got["device_owner"], got["device_id"]) == ("trunk:subport", trunk["id"])
    assert "trunk_details" not in got
    details = api.get(f"/ports/{parent['id']}").json()["port"]["trunk_details"]
    assert details == {"trunk_id": trunk["id"], "sub_ports": [{**sub(a["id"], 100), "mac_address": a["mac_address"]}]}
    r = api.put(f"/trunks/{trunk['id']}/add_subports", json={"sub_ports": [sub(b["id"], 200)]})
    assert r.status_code == 200, r.text
    assert r.json()["sub_ports"] == [sub(a["id"], 100), sub(b["id"], 200)]
    assert api.get(f"/trunks/{trunk['id']}/get_subports").json() == {"sub_ports": [sub(a["id"], 100),
                                                                                   sub(b["id"], 200)]}  # fmt: skip
    assert [t["id"] for t in api.get("/trunks", params={"port_id": parent["id"]}).json()["trunks"]] == [trunk["id"]]
    r = api.put(f"/trunks/{trunk['id']}", json={"trunk": {"name": "t2"}})
    assert r.status_code == 200 and r.json()["trunk"]["name"] == "t2", r.text
    check_error(api.put(f"/trunks/{trunk['id']}", json={"trunk": {"port_id": b["id"]}}), 400, "HTTPBadRequest")
    # The trunk's ports are not deleted under it
    check_error(api.delete(f"/ports/{parent['id']}"), 409, "PortInUseAsTrunkParent",
                f"Port {parent['id']} is currently a parent port for trunk {trunk['id']}.")  # fmt: skip
    check_error(api.delete(f"/ports/{a['id']}"), 409, "PortInUseAsSubPort",
                f"Port {a['id']} is currently a subport for trunk {trunk['id']}.")  # fmt: skip
    r = api.put(f"/trunks/{trunk['id']}/remove_subports", json={"sub_ports": [{"port_id": a["id"]}]})
    assert r.status_code == 200 and r.json()["sub_ports"] == [sub(b["id"], 200)], r.text
    assert api.get(f"/ports/{a['id']}").json()["port"]["device_owner"] == ""
    check_error(api.put(f"/trunks/{trunk['id']}/remove_subports", json={"sub_ports": [{"port_id": a["id"]}]}),
                404, "SubPortNotFound")  # fmt: skip
    # Disabled: its subports are not changed, nor is it deleted (TrunkDisabled)
    api.put(f"/trunks/{trunk['id']}", json={"trunk": {"admin_state_up": False}})
    check_error(api.put(f"/trunks/{trunk['id']}/add_subports", json={"sub_ports": [sub(a["id"], 5)]}), 409,
                "TrunkDisabled", f"Trunk {trunk['id']} is currently disabled.")  # fmt: skip
    check_error(api.delete(f"/trunks/{trunk['id']}"), 409, "TrunkDisabled")
    api.put(f"/trunks/{trunk['id']}", json={"trunk": {"admin_state_up": True}})
    # A trunk with subports is deleted with them (both dataplanes can untrunk a bound port); its ports stay
    assert api.delete(f"/trunks/{trunk['id']}").status_code == 204
    check_error(api.get(f"/trunks/{trunk['id']}"), 404, "TrunkNotFound", f"Trunk {trunk['id']} could not be found.")
    assert api.get(f"/ports/{b['id']}").json()["port"]["device_id"] == ""
    assert "trunk_details" not in api.get(f"/ports/{parent['id']}").json()["port"]
    assert api.delete(f"/ports/{parent['id']}").status_code == 204


def test_trunk_rules(api: httpx.Client) -> None:
    net = net_of(api)
    parent, a, b, c = (port(api, net["id"]) for _ in range(4))
    trunk = create(api, "trunks", "trunk", port_id=parent["id"], sub_ports=[sub(a["id"], 10)])
    add = lambda *s: api.put(f"/trunks/{trunk['id']}/add_subports", json={"sub_ports": list(s)})  # noqa: E731
    # one trunk per port, as parent or subport
    check_error(
        api.post("/trunks", json={"trunk": {"port_id": parent["id"]}}),
        409,
        "ParentPortInUse",
        f"Port {parent['id']} is currently in use and is not eligible for use as a parent port.",
    )
    check_error(api.post("/trunks", json={"trunk": {"port_id": a["id"]}}), 409, "TrunkPortInUse",
                f"Port {a['id']} is in use by another trunk.")  # fmt: skip
    check_error(add(sub(parent["id"], 11)), 409, "ParentPortInUse")
    other = create(api, "trunks", "trunk", port_id=b["id"])
    check_error(add(sub(b["id"], 12)), 409, "ParentPortInUse")
    check_error(api.put(f"/trunks/{other['id']}/add_subports", json={"sub_ports": [sub(a["id"], 10)]}), 409,
                "TrunkPortInUse")  # fmt: skip
    # segmentation ids: unique per trunk, 1-4094, vlan only, both given
    check_error(
        add(sub(c["id"], 10)),
        409,
        "DuplicateSubPort",
        f"segmentation_type vlan and segmentation_id 10 already in use on trunk {trunk['id']}.",
    )
    for vid in (0, 4095, -1, 70000):
        check_error(add(sub(c["id"], vid)), 400, "InvalidInput", f"Segmentation ID '{vid}' is not in range")
    check_error(add({**sub(c["id"], 5), "segmentation_type": "vxlan"}), 400, "InvalidInput",
                "Unknown segmentation_type 'vxlan'")  # fmt: skip
    check_error(add({"port_id": c["id"], "segmentation_id": 5}), 400, "InvalidInput", "missing segmentation")
    check_error(add(sub(c["id"], 7), sub(b["id"], 7)), 400, "InvalidInput", "is not unique")
    check_error(add({**sub(c["id"], 5), "segmentation_id": "five"}), 400, "InvalidInput", "is not an integer")
    check_error(add(sub("not-a-uuid", 5)), 400, "InvalidInput", "Invalid UUID for subport")
    check_error(api.post("/trunks", json={"trunk": {"port_id": c["id"], "sub_ports": [sub(a["id"], 4095)]}}),
                400, "InvalidInput")  # fmt: skip
    check_error(api.post("/trunks", json={"trunk": {"port_id": c["id"], "sub_ports": "x"}}), 400, "HTTPBadRequest",
                "Invalid input for sub_ports")  # fmt: skip
    # a port serving a device is no subport (PortInUse); one that does not exist is not found
    used = port(api, net["id"], device_id="vm-1", device_owner="compute:nova")
    check_error(add(sub(used["id"], 20)), 409, "PortInUse", "Port already has an attached device vm-1.")
    missing = "8a6c4cd4-5c4d-4b52-9a2d-7c6a7e0d1f00"
    check_error(add(sub(missing, 21)), 404, "PortNotFound")
    check_error(api.post("/trunks", json={"trunk": {"port_id": missing}}), 404, "PortNotFound")
    # (nothing of a refused call was kept)
    assert api.get(f"/trunks/{trunk['id']}/get_subports").json() == {"sub_ports": [sub(a["id"], 10)]}


def test_too_many_subports_in_one_call(api: httpx.Client) -> None:
    net = net_of(api)
    trunk = create(api, "trunks", "trunk", port_id=port(api, net["id"])["id"])
    many = [sub(f"00000000-0000-4000-8000-{i:012d}", 1 + i % 4094) for i in range(MAX_SUBPORTS_PER_CALL + 1)]
    check_error(api.put(f"/trunks/{trunk['id']}/add_subports", json={"sub_ports": many}), 400, "InvalidInput",
                f"At most {MAX_SUBPORTS_PER_CALL} subports")  # fmt: skip


def test_subport_mtu_within_the_parents(api: httpx.Client) -> None:
    small, big = create_network(api, name="s", mtu=1400), create_network(api, name="b", mtu=1500)
    parent, child = port(api, small["id"]), port(api, big["id"])
    check_error(api.post("/trunks", json={"trunk": {"port_id": parent["id"], "sub_ports": [sub(child["id"], 3)]}}),
                409, "SubPortMtuGreaterThanTrunkPortMtu")  # fmt: skip


@pytest.mark.usefixtures("tokens")
def test_another_projects_ports_are_refused(users: dict[str, httpx.Client]) -> None:
    alice, bob = users["alice"], users["bob"]
    a_net, b_net = net_of(alice), net_of(bob, "10.9.0.0/24")
    a_parent, a_sub = port(alice, a_net["id"]), port(alice, a_net["id"])
    b_parent, b_sub = port(bob, b_net["id"]), port(bob, b_net["id"])
    # bob names alice's port as his trunk's parent, or as a subport of his trunk: not found, as in Neutron
    check_error(bob.post("/trunks", json={"trunk": {"port_id": a_parent["id"]}}), 404, "PortNotFound")
    check_error(bob.post("/trunks", json={"trunk": {"port_id": b_parent["id"], "sub_ports": [sub(a_sub["id"], 9)]}}),
                404, "PortNotFound")  # fmt: skip
    trunk = create(bob, "trunks", "trunk", port_id=b_parent["id"])
    check_error(bob.put(f"/trunks/{trunk['id']}/add_subports", json={"sub_ports": [sub(a_sub["id"], 9)]}), 404,
                "PortNotFound")  # fmt: skip
    # alice cannot see, change or use bob's trunk
    a_trunk = create(alice, "trunks", "trunk", port_id=a_parent["id"])
    for r in (alice.get(f"/trunks/{trunk['id']}"), alice.delete(f"/trunks/{trunk['id']}"),
              alice.put(f"/trunks/{trunk['id']}", json={"trunk": {"name": "x"}}),
              alice.put(f"/trunks/{trunk['id']}/add_subports", json={"sub_ports": [sub(a_sub["id"], 9)]}),
              alice.put(f"/trunks/{trunk['id']}/remove_subports", json={"sub_ports": [{"port_id": b_sub["id"]}]}),
              alice.get(f"/trunks/{trunk['id']}/get_subports")):  # fmt: skip
        check_error(r, 404, "TrunkNotFound")
    assert [t["id"] for t in alice.get("/trunks").json()["trunks"]] == [a_trunk["id"]]
    assert bob.get(f"/trunks/{trunk['id']}/get_subports").json() == {"sub_ports": []}
    assert alice.get(f"/ports/{a_sub['id']}").json()["port"]["device_id"] == ""


def test_subports_in_the_parents_host_state_and_reported_by_that_host_only(api: httpx.Client) -> None:
    heartbeat(api, "tr-h1")
    heartbeat(api, "tr-h2")
    net, other = net_of(api), net_of(api, "10.5.0.0/24")
    (parent_id,) = port_ids(instance(api, "tr-i", "tr-h1", net["id"]))
    child = port(api, other["id"])
    trunk = create(api, "trunks", "trunk", port_id=parent_id, sub_ports=[sub(child["id"], 300)])
    state = api.get("/hosts/tr-h1/state").json()
    assert state["ports"][parent_id]["trunk_details"]["sub_ports"][0]["port_id"] == child["id"]
    assert state["ports"][child["id"]]["network_id"] == other["id"]  # the subport, to plug on its network
    assert other["id"] in state["networks"]
    assert child["id"] not in api.get("/hosts/tr-h2/state").json()["ports"]
    # hostile: another host reports the subport: ignored
    body = report(api, "tr-h2", active(child["id"])).json()
    assert child["id"] in body["ignored"]
    assert api.get(f"/ports/{child['id']}").json()["port"]["status"] == "DOWN"
    # the parent's host reports it: ACTIVE, bound there; the trunk is ACTIVE once the parent is too
    assert report(api, "tr-h1", active(child["id"])).json()["updated"] == [child["id"]]
    shown = api.get(f"/ports/{child['id']}").json()["port"]
    assert (shown["status"], shown["binding:host_id"]) == ("ACTIVE", "tr-h1")
    assert api.get(f"/trunks/{trunk['id']}").json()["trunk"]["status"] == "DOWN"
    report(api, "tr-h1", active(parent_id))
    assert api.get(f"/trunks/{trunk['id']}").json()["trunk"]["status"] == "ACTIVE"
    failed = {"id": child["id"], "status": "ERROR", "binding:vif_type": "binding_failed",
              "binding:vif_details": {"reason": "x"}}  # fmt: skip
    report(api, "tr-h1", failed)
    assert api.get(f"/trunks/{trunk['id']}").json()["trunk"]["status"] == "DEGRADED"

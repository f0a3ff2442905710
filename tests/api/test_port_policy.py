"""Neutron's port policy: network:* device owners, router device ids of other projects, external networks, and
the router gateway's external fixed IPs."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.api import check_error, create

Json = dict[str, Any]


@pytest.fixture
def world(users: dict[str, httpx.Client]) -> dict[str, Json]:
    """alice's network, subnet and router with an interface; bob's own network; an admin's external network."""
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    ext = create(admin, "networks", "network", name="public", **{"router:external": True})
    create(admin, "subnets", "subnet", network_id=ext["id"], cidr="192.0.2.0/24")
    a_net = create(alice, "networks", "network", name="a")
    a_sub = create(alice, "subnets", "subnet", network_id=a_net["id"], cidr="10.1.0.0/24")
    a_router = create(alice, "routers", "router", name="ar", external_gateway_info={"network_id": ext["id"]})
    r = alice.put(f"/routers/{a_router['id']}/add_router_interface", json={"subnet_id": a_sub["id"]})
    assert r.status_code == 200, r.text
    b_net = create(bob, "networks", "network", name="b")
    b_sub = create(bob, "subnets", "subnet", network_id=b_net["id"], cidr="10.2.0.0/24")
    shared = create(admin, "networks", "network", name="shared", shared=True)
    create(admin, "subnets", "subnet", network_id=shared["id"], cidr="10.3.0.0/24")
    return {"ext": ext, "a_net": a_net, "a_router": a_router, "b_net": b_net, "b_sub": b_sub, "shared": shared}


def _router_interfaces(client: httpx.Client, router_id: str) -> list[Json]:
    r = client.get("/ports", params={"device_id": router_id, "device_owner": "network:router_interface"})
    return list(r.json()["ports"])


@pytest.mark.parametrize("owner", ["network:router_interface", "network:router_gateway",
                                   "network:router_interface_distributed"])  # fmt: skip
def test_a_port_cannot_name_another_projects_router(users: dict[str, httpx.Client], world: dict[str, Json],
                                                     owner: str) -> None:  # fmt: skip
    admin, bob = users["admin"], users["bob"]
    router = world["a_router"]["id"]
    before = _router_interfaces(admin, router)
    r = bob.post("/ports", json={"port": {"network_id": world["b_net"]["id"], "device_owner": owner,
                                          "device_id": router}})  # fmt: skip
    check_error(r, 409, "DeviceIDNotOwnedByTenant", router)
    # ... nor be turned into one afterwards
    port = create(bob, "ports", "port", network_id=world["b_net"]["id"])
    for body in ({"device_owner": owner, "device_id": router}, {"device_owner": owner}):
        if "device_id" not in body:  # owner first, then the router's id
            assert bob.put(f"/ports/{port['id']}", json={"port": body}).status_code == 200
            body = {"device_id": router}
        check_error(bob.put(f"/ports/{port['id']}", json={"port": body}), 409, "DeviceIDNotOwnedByTenant")
    assert _router_interfaces(admin, router) == before
    # alice can still delete her router once her own interface is gone
    a_sub = admin.get("/subnets", params={"network_id": world["a_net"]["id"]}).json()["subnets"][0]
    alice = users["alice"]
    assert alice.put(f"/routers/{router}/remove_router_interface", json={"subnet_id": a_sub["id"]}).status_code == 200
    assert alice.delete(f"/routers/{router}").status_code == 204


def test_a_port_may_name_its_own_projects_router(users: dict[str, httpx.Client], world: dict[str, Json]) -> None:
    bob = users["bob"]
    own = create(bob, "routers", "router", name="br")
    port = create(bob, "ports", "port", network_id=world["b_net"]["id"], device_owner="network:router_interface",
                  device_id=own["id"])  # fmt: skip
    assert port["device_id"] == own["id"]


def test_network_device_owners_only_on_own_networks(users: dict[str, httpx.Client], world: dict[str, Json]) -> None:
    admin, bob = users["admin"], users["bob"]
    shared = world["shared"]["id"]
    for owner in ("network:dhcp", "network:distributed", "network:router_interface"):
        r = bob.post("/ports", json={"port": {"network_id": shared, "device_owner": owner}})
        check_error(r, 403, "PolicyNotAuthorized", "device_owner")
    port = create(bob, "ports", "port", network_id=shared)
    check_error(bob.put(f"/ports/{port['id']}", json={"port": {"device_owner": "network:distributed"}}), 403,
                "PolicyNotAuthorized")  # fmt: skip
    assert create(bob, "ports", "port", network_id=world["b_net"]["id"], device_owner="network:dhcp")
    assert create(admin, "ports", "port", network_id=shared, device_owner="network:dhcp")
    # The ready-pool owner is cloudnet's own, for everyone.
    for client in (admin, bob):
        r = client.post("/ports", json={"port": {"network_id": world["b_net"]["id"],
                                                 "device_owner": "compute:cloudnet-pool"}})  # fmt: skip
        check_error(r, 400, "InvalidInput", "reserved")


def test_no_port_of_a_member_on_an_external_network(users: dict[str, httpx.Client], world: dict[str, Json]) -> None:
    admin, bob = users["admin"], users["bob"]
    ext = world["ext"]["id"]
    check_error(bob.post("/ports", json={"port": {"network_id": ext}}), 404, "NetworkNotFound")
    check_error(bob.post("/ports", json={"ports": [{"network_id": ext}] * 3}), 404, "NetworkNotFound")
    host = "policy-host"
    assert admin.put(f"/hosts/{host}", json={"host": {"agent_version": "t"}}).status_code == 200
    r = bob.post("/port-pools/claim", json={"claim": {"host": host, "network_id": ext}})
    check_error(r, 404, "NetworkNotFound")
    assert admin.get("/ports", params={"network_id": ext, "project_id": "bob"}).json()["ports"] == []
    assert create(admin, "ports", "port", network_id=ext)  # admins may


def test_gateway_external_fixed_ips_are_admin_only(users: dict[str, httpx.Client], world: dict[str, Json]) -> None:
    admin, bob = users["admin"], users["bob"]
    ext = world["ext"]["id"]
    chosen = {"network_id": ext, "external_fixed_ips": [{"ip_address": "192.0.2.77"}]}
    r = bob.post("/routers", json={"router": {"name": "r", "external_gateway_info": chosen}})
    check_error(r, 403, "PolicyNotAuthorized", "external_fixed_ips")
    assert bob.get("/routers").json()["routers"] == []
    router = create(bob, "routers", "router", name="r", external_gateway_info={"network_id": ext})
    picked = router["external_gateway_info"]["external_fixed_ips"]
    assert len(picked) == 1 and picked[0]["ip_address"] != "192.0.2.77"
    r = bob.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": chosen}})
    check_error(r, 403, "PolicyNotAuthorized")
    shown = bob.get(f"/routers/{router['id']}").json()["router"]["external_gateway_info"]
    assert shown["external_fixed_ips"] == picked
    r = admin.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": chosen}})
    assert r.status_code == 200, r.text
    assert r.json()["router"]["external_gateway_info"]["external_fixed_ips"][0]["ip_address"] == "192.0.2.77"


def test_binding_attributes_are_for_admins_and_the_service_role(users: dict[str, httpx.Client],
                                                                 world: dict[str, Json]) -> None:  # fmt: skip
    """Where and how a port is plugged is the runtime's to say (Neutron: create_port:binding:host_id/profile)."""
    bob = users["bob"]
    net = world["b_net"]["id"]
    for attribute, value in (("binding:host_id", "node-1"), ("binding:profile", {"pci_slot": "0000:0a:00.1"})):
        check_error(bob.post("/ports", json={"port": {"network_id": net, attribute: value}}), 403,
                    "PolicyNotAuthorized", f"create_port:{attribute}")  # fmt: skip
        port = create(bob, "ports", "port", network_id=net)
        check_error(bob.put(f"/ports/{port['id']}", json={"port": {attribute: value}}), 403, "PolicyNotAuthorized",
                    f"update_port:{attribute}")  # fmt: skip
        assert bob.get(f"/ports/{port['id']}").json()["port"][attribute] in ("", {})
    # An admin may (and another project's port stays invisible, not forbidden).
    port = create(bob, "ports", "port", network_id=net)
    r = users["admin"].put(f"/ports/{port['id']}", json={"port": {"binding:host_id": "node-1"}})
    assert r.status_code == 200 and r.json()["port"]["binding:host_id"] == "node-1", r.text
    check_error(users["alice"].put(f"/ports/{port['id']}", json={"port": {"binding:host_id": "x"}}), 404,
                "PortNotFound")  # fmt: skip

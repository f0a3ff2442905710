"""Routers: CRUD, the external gateway, and interfaces by subnet and by port (Neutron semantics)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.api import create
from tests.support.server import RunningServer

GATEWAY = "network:router_gateway"
INTERFACE = "network:router_interface"


def error(r: httpx.Response, status: int, type_: str) -> str:
    assert r.status_code == status, r.text
    err = r.json()["NeutronError"]
    assert err["type"] == type_, err
    return str(err["message"])


def network_with_subnet(api: httpx.Client, cidr: str, **subnet: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    net = create(api, "networks", "network", name=f"net-{cidr}")
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr=cidr, **subnet)
    return net, sub


def ports_of(api: httpx.Client, **filters: str) -> list[dict[str, Any]]:
    r = api.get("/ports", params=filters)
    assert r.status_code == 200, r.text
    return list(r.json()["ports"])


@pytest.fixture
def external(api: httpx.Client) -> tuple[dict[str, Any], dict[str, Any]]:
    net = create(api, "networks", "network", name="public", **{"router:external": True})
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr="203.0.113.0/24")
    return net, sub


def test_router_crud(api: httpx.Client) -> None:
    router = create(api, "routers", "router", name="r1", description="first", admin_state_up=False)
    assert router["name"] == "r1"
    assert router["description"] == "first"
    assert router["admin_state_up"] is False
    assert router["status"] == "ACTIVE"
    assert router["external_gateway_info"] is None
    assert router["revision_number"] == 0
    assert router["tags"] == []
    assert router["project_id"] == router["tenant_id"] == "admin"

    shown = api.get(f"/routers/{router['id']}")
    assert shown.status_code == 200
    assert shown.json()["router"] == router
    listed = api.get("/routers").json()["routers"]
    assert [r["id"] for r in listed] == [router["id"]]

    r = api.put(f"/routers/{router['id']}", json={"router": {"name": "renamed", "admin_state_up": True}})
    assert r.status_code == 200, r.text
    updated = r.json()["router"]
    assert updated["name"] == "renamed"
    assert updated["admin_state_up"] is True
    assert updated["description"] == "first"
    assert updated["revision_number"] == 1

    assert api.delete(f"/routers/{router['id']}").status_code == 204
    msg = error(api.get(f"/routers/{router['id']}"), 404, "RouterNotFound")
    assert router["id"] in msg
    error(api.delete(f"/routers/{router['id']}"), 404, "RouterNotFound")
    assert api.get("/routers").json()["routers"] == []


def test_router_create_rejects_unknown_attribute(api: httpx.Client) -> None:
    msg = error(api.post("/routers", json={"router": {"name": "x", "bogus": 1}}), 400, "HTTPBadRequest")
    assert "bogus" in msg
    assert api.get("/routers").json()["routers"] == []


def test_gateway_port_from_external_subnet(api: httpx.Client, external: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ext_net, ext_sub = external
    router = create(api, "routers", "router", name="r", external_gateway_info={"network_id": ext_net["id"]})
    info = router["external_gateway_info"]
    assert info["network_id"] == ext_net["id"]
    assert info["enable_snat"] is True
    assert len(info["external_fixed_ips"]) == 1
    fixed = info["external_fixed_ips"][0]
    assert fixed["subnet_id"] == ext_sub["id"]
    assert ipaddress.ip_address(fixed["ip_address"]) in ipaddress.ip_network("203.0.113.0/24")
    assert fixed["ip_address"] != ext_sub["gateway_ip"]

    (port,) = ports_of(api, device_id=router["id"])
    assert port["device_owner"] == GATEWAY
    assert port["network_id"] == ext_net["id"]
    assert port["fixed_ips"] == [fixed]
    assert port["security_groups"] == []
    assert api.get(f"/routers/{router['id']}").json()["router"]["external_gateway_info"] == info


def test_gateway_external_fixed_ips_and_snat(
    api: httpx.Client, external: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    ext_net, ext_sub = external
    gw = {
        "network_id": ext_net["id"],
        "enable_snat": False,
        "external_fixed_ips": [{"subnet_id": ext_sub["id"], "ip_address": "203.0.113.50"}],
    }
    router = create(api, "routers", "router", external_gateway_info=gw)
    info = router["external_gateway_info"]
    assert info["enable_snat"] is False
    assert info["external_fixed_ips"] == [{"subnet_id": ext_sub["id"], "ip_address": "203.0.113.50"}]

    # Same network: SNAT flips, the address moves, the port stays the same one.
    (port,) = ports_of(api, device_id=router["id"])
    body = {
        "network_id": ext_net["id"],
        "enable_snat": True,
        "external_fixed_ips": [{"ip_address": "203.0.113.60"}],
    }
    r = api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": body}})
    assert r.status_code == 200, r.text
    info = r.json()["router"]["external_gateway_info"]
    assert info["enable_snat"] is True
    assert info["external_fixed_ips"] == [{"subnet_id": ext_sub["id"], "ip_address": "203.0.113.60"}]
    (moved,) = ports_of(api, device_id=router["id"])
    assert moved["id"] == port["id"]
    assert moved["fixed_ips"] == [{"subnet_id": ext_sub["id"], "ip_address": "203.0.113.60"}]
    # The old address is free again.
    assert ports_of(api, fixed_ips="ip_address=203.0.113.50") == []


def test_gateway_address_taken_is_rejected(api: httpx.Client, external: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ext_net, _ = external
    gw = {"network_id": ext_net["id"], "external_fixed_ips": [{"ip_address": "203.0.113.9"}]}
    create(api, "routers", "router", name="first", external_gateway_info=gw)
    r = api.post("/routers", json={"router": {"name": "second", "external_gateway_info": gw}})
    error(r, 409, "IpAddressAlreadyAllocated")
    assert [x["name"] for x in api.get("/routers").json()["routers"]] == ["first"]
    assert len(ports_of(api, network_id=ext_net["id"])) == 1


def test_gateway_bad_external_fixed_ips(api: httpx.Client, external: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ext_net, _ = external
    bad: list[Any] = [
        [{"ip_address": "not-an-ip"}],
        [{}],
        [{"subnet_id": "6b0d4fbd-1c4f-4c55-9b8a-6a2d3f0f3b11"}],
        [{"ip_address": "198.51.100.7"}],
        [{"ip_address": "203.0.113.0"}],
        [{"ip_address": "203.0.113.1"}],
        [{"ip_address": "203.0.113.255"}],
        "203.0.113.5",
    ]
    for fixed in bad:
        gw = {"network_id": ext_net["id"], "external_fixed_ips": fixed}
        r = api.post("/routers", json={"router": {"external_gateway_info": gw}})
        assert r.status_code in (400, 409), (fixed, r.text)
        assert r.json()["NeutronError"]["message"]
    assert api.get("/routers").json()["routers"] == []
    assert ports_of(api) == []


def test_gateway_on_internal_network_rejected(api: httpx.Client) -> None:
    net, _ = network_with_subnet(api, "10.1.0.0/24")
    r = api.post("/routers", json={"router": {"name": "r", "external_gateway_info": {"network_id": net["id"]}}})
    msg = error(r, 400, "BadRequest")
    assert "not a valid external network" in msg
    assert net["id"] in msg
    assert api.get("/routers").json()["routers"] == []
    assert ports_of(api) == []

    router = create(api, "routers", "router", name="r")
    r = api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": {"network_id": net["id"]}}})
    error(r, 400, "BadRequest")
    assert api.get(f"/routers/{router['id']}").json()["router"] == router
    assert ports_of(api) == []


def test_gateway_on_unknown_network(api: httpx.Client) -> None:
    missing = "0b7c8f5e-4c9a-4a57-8e58-1d7e8e0c2a10"
    r = api.post("/routers", json={"router": {"external_gateway_info": {"network_id": missing}}})
    assert missing in error(r, 404, "NetworkNotFound")
    assert api.get("/routers").json()["routers"] == []


def test_gateway_on_external_network_without_subnet(api: httpx.Client) -> None:
    """As Neutron (`openstack router set --external-gateway`): 200, a gateway port without fixed IPs."""
    net = create(api, "networks", "network", **{"router:external": True})
    r = api.post("/routers", json={"router": {"external_gateway_info": {"network_id": net["id"]}}})
    assert r.status_code == 201, r.text
    router = r.json()["router"]
    assert router["external_gateway_info"] == {"network_id": net["id"], "enable_snat": True, "external_fixed_ips": []}
    (gw,) = ports_of(api, device_id=router["id"], device_owner=GATEWAY)
    assert gw["fixed_ips"] == [] and gw["network_id"] == net["id"]
    other = create(api, "routers", "router", name="later")
    r = api.put(f"/routers/{other['id']}", json={"router": {"external_gateway_info": {"network_id": net["id"]}}})
    assert r.status_code == 200, r.text
    assert r.json()["router"]["external_gateway_info"]["external_fixed_ips"] == []
    # hostile: an address asked for where there is no subnet to give it
    bad = {"network_id": net["id"], "external_fixed_ips": [{"ip_address": "203.0.113.9"}]}
    r = api.put(f"/routers/{other['id']}", json={"router": {"external_gateway_info": bad}})
    assert r.status_code == 400, r.text
    assert api.get(f"/routers/{other['id']}").json()["router"]["external_gateway_info"]["external_fixed_ips"] == []
    # and it goes as it came
    r = api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": {}}})
    assert r.status_code == 200 and r.json()["router"]["external_gateway_info"] is None
    assert ports_of(api, device_id=router["id"]) == []


@pytest.mark.parametrize("clear", [{}, None])
def test_clearing_gateway_removes_port(
    api: httpx.Client, external: tuple[dict[str, Any], dict[str, Any]], clear: dict[str, Any] | None
) -> None:
    ext_net, _ = external
    router = create(api, "routers", "router", external_gateway_info={"network_id": ext_net["id"]})
    (port,) = ports_of(api, device_id=router["id"])
    r = api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": clear}})
    assert r.status_code == 200, r.text
    assert r.json()["router"]["external_gateway_info"] is None
    error(api.get(f"/ports/{port['id']}"), 404, "PortNotFound")
    assert ports_of(api, network_id=ext_net["id"]) == []
    # and it can be set again
    r = api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": {"network_id": ext_net["id"]}}})
    assert r.status_code == 200, r.text
    assert r.json()["router"]["external_gateway_info"]["network_id"] == ext_net["id"]
    assert len(ports_of(api, device_id=router["id"], device_owner=GATEWAY)) == 1


def test_add_interface_by_subnet(api: httpx.Client) -> None:
    net, sub = network_with_subnet(api, "10.0.0.0/24")
    router = create(api, "routers", "router", name="r")
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["id"] == router["id"]
    assert info["subnet_id"] == sub["id"]
    assert info["subnet_ids"] == [sub["id"]]
    assert info["network_id"] == net["id"]
    assert info["project_id"] == info["tenant_id"] == "admin"

    port = api.get(f"/ports/{info['port_id']}").json()["port"]
    assert port["device_owner"] == INTERFACE
    assert port["device_id"] == router["id"]
    assert port["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.0.0.1"}]
    assert port["security_groups"] == []
    assert api.get(f"/routers/{router['id']}").json()["router"]["revision_number"] == 1


def test_add_interface_by_port(api: httpx.Client) -> None:
    net, sub = network_with_subnet(api, "10.0.0.0/24")
    router = create(api, "routers", "router", name="r")
    port = create(api, "ports", "port", network_id=net["id"], fixed_ips=[{"ip_address": "10.0.0.77"}])
    assert port["security_groups"]  # the default group, until it becomes a router port
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"port_id": port["id"]})
    assert r.status_code == 200, r.text
    info = r.json()
    assert info == {
        "id": router["id"],
        "tenant_id": "admin",
        "project_id": "admin",
        "port_id": port["id"],
        "network_id": net["id"],
        "subnet_id": sub["id"],
        "subnet_ids": [sub["id"]],
    }
    attached = api.get(f"/ports/{port['id']}").json()["port"]
    assert attached["device_owner"] == INTERFACE
    assert attached["device_id"] == router["id"]
    assert attached["security_groups"] == []
    assert attached["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.0.0.77"}]

    # The same port again: now it has a device.
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"port_id": port["id"]})
    assert port["id"] in error(r, 409, "PortInUse")


def test_add_interface_by_port_in_use(api: httpx.Client) -> None:
    net, _ = network_with_subnet(api, "10.0.0.0/24")
    router = create(api, "routers", "router", name="r")
    port = create(api, "ports", "port", network_id=net["id"], device_id="vm-1", device_owner="compute:nova")
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"port_id": port["id"]})
    msg = error(r, 409, "PortInUse")
    assert "vm-1" in msg
    after = api.get(f"/ports/{port['id']}").json()["port"]
    assert after == port
    assert api.get(f"/routers/{router['id']}").json()["router"]["revision_number"] == 0


def test_add_interface_by_port_without_fixed_ips(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="bare")
    port = create(api, "ports", "port", network_id=net["id"])
    assert port["fixed_ips"] == []
    router = create(api, "routers", "router", name="r")
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"port_id": port["id"]})
    assert "fixed IP" in error(r, 400, "BadRequest")
    assert api.get(f"/ports/{port['id']}").json()["port"]["device_id"] == ""


def test_add_interface_bad_requests(api: httpx.Client) -> None:
    net, sub = network_with_subnet(api, "10.0.0.0/24")
    router = create(api, "routers", "router", name="r")
    url = f"/routers/{router['id']}/add_router_interface"
    error(api.put(url, json={}), 400, "BadRequest")
    port = create(api, "ports", "port", network_id=net["id"])
    error(api.put(url, json={"subnet_id": sub["id"], "port_id": port["id"]}), 400, "BadRequest")
    error(api.put(url, json={"subnet_id": "4b3b9c70-8d3a-4a7e-9d59-0a5b3c1f9e01"}), 404, "SubnetNotFound")
    error(api.put(url, json={"port_id": "4b3b9c70-8d3a-4a7e-9d59-0a5b3c1f9e01"}), 404, "PortNotFound")
    error(api.put(url, content=b"{nope"), 400, "HTTPBadRequest")
    missing = "/routers/4b3b9c70-8d3a-4a7e-9d59-0a5b3c1f9e01/add_router_interface"
    error(api.put(missing, json={"subnet_id": sub["id"]}), 404, "RouterNotFound")
    assert ports_of(api, device_owner=INTERFACE) == []
    assert api.get(f"/routers/{router['id']}").json()["router"]["revision_number"] == 0


def test_same_subnet_twice_rejected(api: httpx.Client) -> None:
    _, sub = network_with_subnet(api, "10.0.0.0/24")
    router = create(api, "routers", "router", name="r")
    url = f"/routers/{router['id']}/add_router_interface"
    assert api.put(url, json={"subnet_id": sub["id"]}).status_code == 200
    msg = error(api.put(url, json={"subnet_id": sub["id"]}), 400, "BadRequest")
    assert sub["id"] in msg
    assert len(ports_of(api, device_id=router["id"])) == 1


def test_overlapping_subnets_on_one_router_rejected(api: httpx.Client) -> None:
    _, sub1 = network_with_subnet(api, "10.0.0.0/24")
    net2, sub2 = network_with_subnet(api, "10.0.0.0/25")
    router = create(api, "routers", "router", name="r")
    url = f"/routers/{router['id']}/add_router_interface"
    assert api.put(url, json={"subnet_id": sub1["id"]}).status_code == 200
    msg = error(api.put(url, json={"subnet_id": sub2["id"]}), 400, "BadRequest")
    assert "overlaps" in msg
    assert ports_of(api, network_id=net2["id"]) == []

    # by port as well
    port = create(api, "ports", "port", network_id=net2["id"])
    error(api.put(url, json={"port_id": port["id"]}), 400, "BadRequest")
    assert api.get(f"/ports/{port['id']}").json()["port"]["device_owner"] == ""

    # a second router may use the overlapping subnet
    other = create(api, "routers", "router", name="other")
    r = api.put(f"/routers/{other['id']}/add_router_interface", json={"subnet_id": sub2["id"]})
    assert r.status_code == 200, r.text


def test_subnet_without_gateway_rejected(api: httpx.Client) -> None:
    net, sub = network_with_subnet(api, "10.9.0.0/24", gateway_ip=None)
    assert sub["gateway_ip"] is None
    router = create(api, "routers", "router", name="r")
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    assert "gateway" in error(r, 400, "BadRequest")
    assert ports_of(api, network_id=net["id"]) == []


def test_remove_interface_by_subnet(api: httpx.Client) -> None:
    net, sub = network_with_subnet(api, "10.0.0.0/24")
    router = create(api, "routers", "router", name="r")
    added = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).json()
    r = api.put(f"/routers/{router['id']}/remove_router_interface", json={"subnet_id": sub["id"]})
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["port_id"] == added["port_id"]
    assert info["subnet_id"] == sub["id"]
    assert info["subnet_ids"] == [sub["id"]]
    assert info["network_id"] == net["id"]
    assert info["id"] == router["id"]
    error(api.get(f"/ports/{added['port_id']}"), 404, "PortNotFound")
    assert api.get(f"/routers/{router['id']}").json()["router"]["revision_number"] == 2

    r = api.put(f"/routers/{router['id']}/remove_router_interface", json={"subnet_id": sub["id"]})
    assert sub["id"] in error(r, 404, "RouterInterfaceNotFoundForSubnet")
    # the gateway address is free again: the interface can come back
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    assert r.status_code == 200, r.text


def test_remove_interface_by_port(api: httpx.Client) -> None:
    _, sub = network_with_subnet(api, "10.0.0.0/24")
    router = create(api, "routers", "router", name="r")
    added = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).json()
    r = api.put(f"/routers/{router['id']}/remove_router_interface", json={"port_id": added["port_id"]})
    assert r.status_code == 200, r.text
    assert r.json()["port_id"] == added["port_id"]
    assert r.json()["subnet_ids"] == [sub["id"]]
    error(api.get(f"/ports/{added['port_id']}"), 404, "PortNotFound")

    r = api.put(f"/routers/{router['id']}/remove_router_interface", json={"port_id": added["port_id"]})
    assert added["port_id"] in error(r, 404, "RouterInterfaceNotFound")
    error(api.put(f"/routers/{router['id']}/remove_router_interface", json={}), 400, "BadRequest")


def test_remove_interface_of_other_router(api: httpx.Client) -> None:
    _, sub = network_with_subnet(api, "10.0.0.0/24")
    r1 = create(api, "routers", "router", name="r1")
    r2 = create(api, "routers", "router", name="r2")
    added = api.put(f"/routers/{r1['id']}/add_router_interface", json={"subnet_id": sub["id"]}).json()
    r = api.put(f"/routers/{r2['id']}/remove_router_interface", json={"port_id": added["port_id"]})
    error(r, 404, "RouterInterfaceNotFound")
    assert api.get(f"/ports/{added['port_id']}").status_code == 200


def test_router_delete_with_interface_conflicts(
    api: httpx.Client, external: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    ext_net, _ = external
    _, sub = network_with_subnet(api, "10.0.0.0/24")
    router = create(api, "routers", "router", name="r", external_gateway_info={"network_id": ext_net["id"]})
    api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    before = api.get(f"/routers/{router['id']}").json()["router"]
    assert router["id"] in error(api.delete(f"/routers/{router['id']}"), 409, "RouterInUse")
    assert api.get(f"/routers/{router['id']}").json()["router"] == before
    assert len(ports_of(api, device_id=router["id"])) == 2

    api.put(f"/routers/{router['id']}/remove_router_interface", json={"subnet_id": sub["id"]})
    assert api.delete(f"/routers/{router['id']}").status_code == 204
    # the gateway port went with the router
    assert ports_of(api, device_id=router["id"]) == []
    assert ports_of(api, network_id=ext_net["id"]) == []


def test_router_ports_cannot_be_deleted_directly(
    api: httpx.Client, external: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    ext_net, _ = external
    _, sub = network_with_subnet(api, "10.0.0.0/24")
    router = create(api, "routers", "router", name="r", external_gateway_info={"network_id": ext_net["id"]})
    added = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).json()
    msg = error(api.delete(f"/ports/{added['port_id']}"), 409, "ServicePortInUse")
    assert INTERFACE in msg
    (gw_port,) = ports_of(api, device_id=router["id"], device_owner=GATEWAY)
    assert GATEWAY in error(api.delete(f"/ports/{gw_port['id']}"), 409, "ServicePortInUse")
    assert len(ports_of(api, device_id=router["id"])) == 2


def test_subnet_and_network_delete_while_attached(api: httpx.Client) -> None:
    net, sub = network_with_subnet(api, "10.0.0.0/24")
    router = create(api, "routers", "router", name="r")
    api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    error(api.delete(f"/subnets/{sub['id']}"), 409, "SubnetInUse")
    error(api.delete(f"/networks/{net['id']}"), 409, "NetworkInUse")
    assert api.get(f"/subnets/{sub['id']}").status_code == 200
    api.put(f"/routers/{router['id']}/remove_router_interface", json={"subnet_id": sub["id"]})
    assert api.delete(f"/subnets/{sub['id']}").status_code == 204


def test_router_tags_and_filters(api: httpx.Client) -> None:
    a = create(api, "routers", "router", name="a", tags=["blue"])
    b = create(api, "routers", "router", name="b", admin_state_up=False)
    assert a["tags"] == ["blue"]
    assert [r["id"] for r in api.get("/routers", params={"admin_state_up": "false"}).json()["routers"]] == [b["id"]]
    assert [r["id"] for r in api.get("/routers", params={"tags": "blue"}).json()["routers"]] == [a["id"]]
    names = [r["name"] for r in api.get("/routers", params={"sort_key": "name", "sort_dir": "desc"}).json()["routers"]]
    assert names == ["b", "a"]


def test_bulk_router_create_is_atomic(api: httpx.Client) -> None:
    net, _ = network_with_subnet(api, "10.0.0.0/24")
    r = api.post("/routers", json={"routers": [{"name": "ok"}, {"name": "bad", "external_gateway_info": {
        "network_id": net["id"]}}]})  # fmt: skip
    error(r, 400, "BadRequest")
    assert api.get("/routers").json()["routers"] == []
    r = api.post("/routers", json={"routers": [{"name": "one"}, {"name": "two"}]})
    assert r.status_code == 201, r.text
    assert [x["name"] for x in r.json()["routers"]] == ["one", "two"]


def test_gateway_moves_to_another_external_network(
    api: httpx.Client, external: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    ext_net, _ = external
    other = create(api, "networks", "network", name="public2", **{"router:external": True})
    other_sub = create(api, "subnets", "subnet", network_id=other["id"], cidr="198.51.100.0/24")
    router = create(api, "routers", "router", external_gateway_info={"network_id": ext_net["id"]})
    (old_port,) = ports_of(api, device_id=router["id"])
    r = api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": {"network_id": other["id"]}}})
    assert r.status_code == 200, r.text
    info = r.json()["router"]["external_gateway_info"]
    assert info["network_id"] == other["id"]
    assert [f["subnet_id"] for f in info["external_fixed_ips"]] == [other_sub["id"]]
    error(api.get(f"/ports/{old_port['id']}"), 404, "PortNotFound")
    (new_port,) = ports_of(api, device_id=router["id"])
    assert new_port["network_id"] == other["id"]
    assert new_port["device_owner"] == GATEWAY


def test_external_network_in_use_by_gateway(api: httpx.Client, external: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ext_net, ext_sub = external
    create(api, "routers", "router", external_gateway_info={"network_id": ext_net["id"]})
    error(api.delete(f"/networks/{ext_net['id']}"), 409, "NetworkInUse")
    error(api.delete(f"/subnets/{ext_sub['id']}"), 409, "SubnetInUse")
    assert api.get(f"/networks/{ext_net['id']}").status_code == 200


@pytest.fixture
def alice(server: RunningServer, tokens: dict[str, Any]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "alice-token"}, timeout=30) as c:
        yield c


def test_project_router_with_shared_external_gateway(server: RunningServer, alice: httpx.Client) -> None:
    with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin-token"}, timeout=30) as admin:
        ext = create(admin, "networks", "network", name="public", **{"router:external": True})
        create(admin, "subnets", "subnet", network_id=ext["id"], cidr="203.0.113.0/24")
        ops_net, ops_sub = network_with_subnet(admin, "10.50.0.0/24")
    net, sub = network_with_subnet(alice, "10.0.0.0/24")
    router = create(alice, "routers", "router", name="mine", external_gateway_info={"network_id": ext["id"]})
    assert router["project_id"] == "alice"
    assert router["external_gateway_info"]["network_id"] == ext["id"]
    r = alice.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    assert r.status_code == 200, r.text
    assert r.json()["network_id"] == net["id"]
    # another project's subnet and network are not hers to use
    r = alice.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": ops_sub["id"]})
    error(r, 404, "SubnetNotFound")
    r = alice.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": {"network_id": ops_net["id"]}}})
    error(r, 404, "NetworkNotFound")
    assert alice.get(f"/routers/{router['id']}").json()["router"]["external_gateway_info"]["network_id"] == ext["id"]
    # she may not delete the router's ports directly, but deleting the router cleans up after detaching
    assert alice.put(f"/routers/{router['id']}/remove_router_interface", json={"subnet_id": sub["id"]}).is_success
    assert alice.delete(f"/routers/{router['id']}").status_code == 204
    assert ports_of(alice) == []

"""GET /v2.0/routers/{id}/gateway_chassis (northbound/gateway_ha.py): a router's gateway chassis in priority order
and whether its gateway port can fail over, with why not: one gateway chassis, or two that are the only chassis
holding ports of the router's networks (OVN's BFD then never lets the survivor claim; tests/ovn/
test_gateway_failover.py shows it). Admins only; hostile ids and other dataplanes refused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.api import error

Json = dict[str, Any]


def heartbeat(api: httpx.Client, name: str, uplinks: dict[str, str]) -> None:
    r = api.put(f"/hosts/{name}", json={"host": {"agent_version": "1", "report": {"uplinks": uplinks}}})
    assert r.status_code == 200, r.text


def create(api: httpx.Client, collection: str, member: str, body: Json) -> Json:
    r = api.post(f"/{collection}", json={member: body})
    assert r.status_code == 201, r.text
    return dict(r.json()[member])


def edge(api: httpx.Client) -> tuple[Json, Json]:
    """A router with its gateway on a flat external network on physnet1 and an inner network behind it."""
    pub = create(
        api,
        "networks",
        "network",
        {
            "name": "pub",
            "router:external": True,
            "provider:network_type": "flat",
            "provider:physical_network": "physnet1",
        },
    )
    create(api, "subnets", "subnet", {"network_id": pub["id"], "cidr": "192.0.2.0/24"})
    inner = create(api, "networks", "network", {"name": "inner"})
    sub = create(api, "subnets", "subnet", {"network_id": inner["id"], "cidr": "10.9.0.0/24"})
    router = create(api, "routers", "router", {"name": "edge", "external_gateway_info": {"network_id": pub["id"]}})
    assert api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).status_code == 200
    return router, inner  # fmt: skip


def show(api: httpx.Client, router_id: str) -> Json:
    r = api.get(f"/routers/{router_id}/gateway_chassis")
    assert r.status_code == 200, r.text
    return dict(r.json()["gateway_chassis"])


@pytest.mark.ovn_dataplane
def test_failover_needs_two_gateway_chassis_and_a_third_chassis_or_three_gateways(api: httpx.Client) -> None:
    router, inner = edge(api)
    got = show(api, router["id"])
    assert (got["chassis"], got["failover"]) == ([], False)
    assert "no host has an uplink on physical network physnet1" in got["reason"]

    heartbeat(api, "gw-b", {"physnet1": "eth1"})
    heartbeat(api, "other", {"physnet2": "eth1"})  # (an uplink elsewhere: not a gateway here)
    got = show(api, router["id"])
    assert (got["chassis"], got["failover"]) == ([{"host": "gw-b", "priority": 1, "availability_zone": "nova"}], False)
    assert got["reason"].startswith("One gateway chassis (gw-b): nothing to fail over to")

    heartbeat(api, "gw-c", {"physnet1": "eth1"})
    # Two, and an instance's port only on one of them: the other could not tell a dead peer from its isolation.
    create(api, "ports", "port", {"network_id": inner["id"], "binding:host_id": "gw-c"})
    got = show(api, router["id"])
    assert got["chassis"] == [
        {"host": "gw-b", "priority": 2, "availability_zone": "nova"},
        {"host": "gw-c", "priority": 1, "availability_zone": "nova"},
    ]
    assert (got["failover"], got["reference_chassis"]) == (False, [])
    assert "are the only chassis holding ports of the networks it joins" in got["reason"]

    # A port of the router's network bound on a third chassis: BFD to it lets the survivor claim.
    port = create(api, "ports", "port", {"network_id": inner["id"], "binding:host_id": "other"})
    got = show(api, router["id"])
    assert (got["failover"], got["reason"], got["reference_chassis"]) == (True, "", ["other"])
    assert api.delete(f"/ports/{port['id']}").status_code == 204
    assert show(api, router["id"])["failover"] is False

    # A third gateway chassis: the survivors see each other.
    heartbeat(api, "gw-d", {"physnet1": "eth1"})
    got = show(api, router["id"])
    assert [c["host"] for c in got["chassis"]] == ["gw-b", "gw-c", "gw-d"] and got["failover"] is True


@pytest.mark.ovn_dataplane
def test_a_router_reached_through_another_router_counts_that_routers_chassis(api: httpx.Client) -> None:
    """OVN's reference chassis span every router the networks join (ovn-northd's router groups): a port behind a
    second router on the same external network serves the first's gateway too."""
    router, _inner = edge(api)
    pub = api.get("/networks?name=pub").json()["networks"][0]
    net = create(api, "networks", "network", {"name": "behind"})
    sub = create(api, "subnets", "subnet", {"network_id": net["id"], "cidr": "10.8.0.0/24"})
    second = create(api, "routers", "router", {"name": "two", "external_gateway_info": {"network_id": pub["id"]}})
    assert api.put(f"/routers/{second['id']}/add_router_interface", json={"subnet_id": sub["id"]}).status_code == 200
    for name in ("gw-b", "gw-c"):
        heartbeat(api, name, {"physnet1": "eth1"})
    create(api, "ports", "port", {"network_id": net["id"], "binding:host_id": "compute-1"})
    got = show(api, router["id"])
    assert (got["failover"], got["reference_chassis"]) == (True, ["compute-1"])


@pytest.mark.ovn_dataplane
def test_hostile_callers_and_ids(users: dict[str, httpx.Client]) -> None:
    router, _inner = edge(users["admin"])
    error(users["alice"].get(f"/routers/{router['id']}/gateway_chassis"), 403)
    error(users["admin"].get("/routers/no-such-router/gateway_chassis"), 404, "RouterNotFound")
    error(users["admin"].get("/routers/a%00b/gateway_chassis"), 404)
    error(users["admin"].get("/routers/%27%20OR%201=1--/gateway_chassis"), 404, "RouterNotFound")


def test_not_on_the_linux_dataplane(api: httpx.Client) -> None:
    router = create(api, "routers", "router", {"name": "r"})
    error(api.get(f"/routers/{router['id']}/gateway_chassis"), 404, "GatewayChassisNotFound")

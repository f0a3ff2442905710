"""Subnets through the live API on both backends: CIDRs, gateways, pools, DNS, routes, updates, deletes."""

from __future__ import annotations

import ipaddress
import itertools
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.api import check_error, create_network, create_subnet
from tests.support.server import RunningServer

Json = dict[str, Any]


def subnet_ids(client: httpx.Client, **params: Any) -> set[str]:
    resp = client.get("/subnets", params=params)
    assert resp.status_code == 200, resp.text
    return {s["id"] for s in resp.json()["subnets"]}


def pools(*ranges: tuple[str, str]) -> list[dict[str, str]]:
    return [{"start": a, "end": b} for a, b in ranges]


@pytest.fixture
def net(api: httpx.Client) -> Json:
    return create_network(api, name="net")


# -- create: defaults ------------------------------------------------------------------------------


def test_ipv4_defaults(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "10.0.0.0/24", name="v4")
    assert uuid.UUID(sub["id"])
    assert sub["name"] == "v4"
    assert sub["network_id"] == net["id"]
    assert sub["ip_version"] == 4
    assert sub["cidr"] == "10.0.0.0/24"
    assert sub["gateway_ip"] == "10.0.0.1"
    assert sub["allocation_pools"] == pools(("10.0.0.2", "10.0.0.254"))
    assert sub["dns_nameservers"] == []
    assert sub["host_routes"] == []
    assert sub["enable_dhcp"] is True
    assert sub["ipv6_ra_mode"] is None and sub["ipv6_address_mode"] is None
    assert sub["subnetpool_id"] is None
    assert sub["project_id"] == sub["tenant_id"] == "admin"
    assert sub["revision_number"] == 0
    assert api.get(f"/subnets/{sub['id']}").json()["subnet"] == sub
    assert api.get("/subnets").json()["subnets"] == [sub]
    assert api.get(f"/networks/{net['id']}").json()["network"]["subnets"] == [sub["id"]]


def test_ipv6_defaults(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "2001:db8::/64")
    assert sub["ip_version"] == 6
    assert sub["gateway_ip"] == "2001:db8::1"
    assert sub["allocation_pools"] == pools(("2001:db8::2", "2001:db8::ffff:ffff:ffff:ffff"))
    modes = create_subnet(
        api, net["id"], "2001:db8:1::/64", ipv6_ra_mode="slaac", ipv6_address_mode="slaac", enable_dhcp=False
    )
    assert (modes["ipv6_ra_mode"], modes["ipv6_address_mode"], modes["enable_dhcp"]) == ("slaac", "slaac", False)


def test_ip_version_is_inferred_or_must_match(api: httpx.Client, net: Json) -> None:
    assert create_subnet(api, net["id"], "10.0.0.0/24")["ip_version"] == 4
    assert create_subnet(api, net["id"], "fd00::/64")["ip_version"] == 6
    assert create_subnet(api, net["id"], "10.1.0.0/24", ip_version=4)["ip_version"] == 4
    before = subnet_ids(api)
    check_error(
        api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.2.0.0/24", "ip_version": 6}}),
        400,
        "InvalidInput",
        "10.2.0.0/24",
        "ip_version 6",
    )
    check_error(
        api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "fd01::/64", "ip_version": 4}}),
        400,
        "InvalidInput",
        "ip_version 4",
    )
    check_error(
        api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.3.0.0/24", "ip_version": 5}}),
        400,
        "HTTPBadRequest",
        "ip_version",
    )
    check_error(
        api.post(
            "/subnets",
            json={"subnet": {"network_id": net["id"], "cidr": "10.4.0.0/24", "ipv6_address_mode": "slaac"}},
        ),
        400,
        "InvalidInput",
        "only valid for IPv6",
    )
    assert subnet_ids(api) == before


# -- gateway ---------------------------------------------------------------------------------------


def test_explicit_gateway_shapes_the_default_pools(api: httpx.Client, net: Json) -> None:
    last = create_subnet(api, net["id"], "10.0.0.0/24", gateway_ip="10.0.0.254")
    assert last["gateway_ip"] == "10.0.0.254"
    assert last["allocation_pools"] == pools(("10.0.0.1", "10.0.0.253"))
    middle = create_subnet(api, net["id"], "10.0.1.0/24", gateway_ip="10.0.1.100")
    assert middle["allocation_pools"] == pools(("10.0.1.1", "10.0.1.99"), ("10.0.1.101", "10.0.1.254"))
    v6 = create_subnet(api, net["id"], "2001:db8::/120", gateway_ip="2001:db8::ff")
    assert v6["allocation_pools"] == pools(("2001:db8::1", "2001:db8::fe"))


def test_null_gateway_means_no_gateway(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "10.0.0.0/24", gateway_ip=None)
    assert sub["gateway_ip"] is None
    assert sub["allocation_pools"] == pools(("10.0.0.1", "10.0.0.254"))
    assert api.get(f"/subnets/{sub['id']}").json()["subnet"]["gateway_ip"] is None
    port = api.post("/ports", json={"port": {"network_id": net["id"]}}).json()["port"]
    assert port["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.0.0.1"}]
    v6 = create_subnet(api, net["id"], "2001:db8::/64", gateway_ip=None)
    assert v6["allocation_pools"] == pools(("2001:db8::1", "2001:db8::ffff:ffff:ffff:ffff"))


def test_invalid_gateways_are_rejected(api: httpx.Client, net: Json) -> None:
    cases = [
        ("10.0.1.1", "InvalidInput", "Gateway is not valid"),  # another network
        ("10.0.0.0", "InvalidInput", "Gateway is not valid"),  # network address
        ("10.0.0.255", "InvalidInput", "Gateway is not valid"),  # broadcast address
        ("fd00::1", "InvalidInput", "Gateway is not valid"),  # other IP version
        ("banana", "HTTPBadRequest", "gateway_ip"),
    ]
    for gateway, type_, fragment in cases:
        resp = api.post(
            "/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.0.0.0/24", "gateway_ip": gateway}}
        )
        check_error(resp, 400, type_, fragment)
    assert subnet_ids(api) == set()


# -- allocation pools ------------------------------------------------------------------------------


def test_explicit_pools_are_stored_sorted(api: httpx.Client, net: Json) -> None:
    given = pools(("10.0.0.100", "10.0.0.199"), ("10.0.0.10", "10.0.0.19"))
    sub = create_subnet(api, net["id"], "10.0.0.0/24", allocation_pools=given)
    assert sub["gateway_ip"] == "10.0.0.1"
    assert sub["allocation_pools"] == pools(("10.0.0.10", "10.0.0.19"), ("10.0.0.100", "10.0.0.199"))
    single = create_subnet(api, net["id"], "10.0.1.0/24", allocation_pools=pools(("10.0.1.5", "10.0.1.5")))
    assert single["allocation_pools"] == pools(("10.0.1.5", "10.0.1.5"))


def test_invalid_pools_are_rejected_and_nothing_is_written(api: httpx.Client, net: Json) -> None:
    cidr = "10.0.0.0/24"
    cases: list[tuple[Json, int, str, str]] = [
        ({"allocation_pools": pools(("10.0.0.10", "10.0.1.10"))}, 400, "OutOfBoundsAllocationPool", "spans beyond"),
        ({"allocation_pools": pools(("10.0.0.0", "10.0.0.10"))}, 400, "OutOfBoundsAllocationPool", "10.0.0.0-"),
        ({"allocation_pools": pools(("10.0.0.250", "10.0.0.255"))}, 400, "OutOfBoundsAllocationPool", cidr),
        (
            {"allocation_pools": pools(("10.0.0.10", "10.0.0.20"), ("10.0.0.20", "10.0.0.30"))},
            400,
            "OverlappingAllocationPools",
            "10.0.0.10-10.0.0.20 and 10.0.0.20-10.0.0.30",
        ),
        (
            {"allocation_pools": pools(("10.0.0.10", "10.0.0.50"), ("10.0.0.20", "10.0.0.30"))},
            400,
            "OverlappingAllocationPools",
            "overlapping",
        ),
        (
            {"allocation_pools": pools(("10.0.0.2", "10.0.0.100")), "gateway_ip": "10.0.0.50"},
            409,
            "GatewayConflictWithAllocationPools",
            "10.0.0.50",
        ),
        # Without gateway_ip the gateway is the first host, which this pool contains.
        (
            {"allocation_pools": pools(("10.0.0.1", "10.0.0.100"))},
            409,
            "GatewayConflictWithAllocationPools",
            "10.0.0.1",
        ),
        ({"allocation_pools": pools(("10.0.0.20", "10.0.0.10"))}, 400, "InvalidInput", "after its end"),
        ({"allocation_pools": pools(("fd00::2", "fd00::9"))}, 400, "InvalidInput", "IP version 4"),
        ({"allocation_pools": pools(("10.0.0.x", "10.0.0.9"))}, 400, "HTTPBadRequest", "allocation_pools[0].start"),
        ({"allocation_pools": [{"start": "10.0.0.5"}]}, 400, "HTTPBadRequest", "allocation_pools[0].end"),
    ]
    for attrs, status, type_, fragment in cases:
        resp = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": cidr, **attrs}})
        check_error(resp, status, type_, fragment)
    assert subnet_ids(api) == set()
    assert api.get(f"/networks/{net['id']}").json()["network"]["subnets"] == []


# -- cidr ------------------------------------------------------------------------------------------


def test_cidr_must_be_canonical_and_valid(api: httpx.Client, net: Json) -> None:
    cases = [
        ("10.0.0.5/24", "isn't a recommended CIDR, use '10.0.0.0/24'"),
        ("2001:db8::1/64", "use '2001:db8::/64'"),
        ("10.0.0.0/33", "not a valid IP subnet"),
        ("not-a-cidr", "not a valid IP subnet"),
        ("", "not a valid IP subnet"),
    ]
    for cidr, fragment in cases:
        resp = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": cidr}})
        check_error(resp, 400, "HTTPBadRequest", "Invalid input for cidr", fragment)
    # Without a CIDR the subnet would come from a pool (test_subnetpools.py), which needs its IP version.
    check_error(api.post("/subnets", json={"subnet": {"network_id": net["id"]}}), 400, "BadRequest",
                "ip_version must be specified in the absence of cidr and subnetpool_id")  # fmt: skip
    check_error(
        api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.9.0.0/24", "pool": []}}),
        400,
        "HTTPBadRequest",
        "Unrecognized attribute(s) 'pool'",
    )
    assert subnet_ids(api) == set()


def test_overlapping_subnets_in_one_network_are_rejected(api: httpx.Client, net: Json) -> None:
    first = create_subnet(api, net["id"], "10.0.0.0/24")
    v6 = create_subnet(api, net["id"], "2001:db8::/64")
    for cidr in ("10.0.0.0/24", "10.0.0.128/25", "10.0.0.0/16", "2001:db8::/48"):
        resp = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": cidr}})
        check_error(resp, 400, "InvalidInput", "overlaps with another subnet", net["id"])
    assert subnet_ids(api) == {first["id"], v6["id"]}
    # Adjacent ranges are fine, and other networks may reuse the same CIDR.
    create_subnet(api, net["id"], "10.0.1.0/24")
    other = create_network(api)
    create_subnet(api, other["id"], "10.0.0.0/24")


def test_network_must_exist_and_allow_ipv6(api: httpx.Client) -> None:
    missing = str(uuid.uuid4())
    check_error(
        api.post("/subnets", json={"subnet": {"network_id": missing, "cidr": "10.0.0.0/24"}}),
        404,
        "NetworkNotFound",
        missing,
    )
    check_error(
        api.post("/subnets", json={"subnet": {"network_id": "garbage", "cidr": "10.0.0.0/24"}}), 404, "NetworkNotFound"
    )
    small = create_network(api, mtu=1200)
    check_error(
        api.post("/subnets", json={"subnet": {"network_id": small["id"], "cidr": "2001:db8::/64"}}),
        400,
        "InvalidInput",
        "MTU of at least 1280",
    )
    create_subnet(api, small["id"], "10.0.0.0/24")
    assert subnet_ids(api, network_id=small["id"]) != set()
    assert subnet_ids(api, ip_version=6) == set()


# -- dns and host routes ---------------------------------------------------------------------------


def test_dns_nameservers(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "10.0.0.0/24", dns_nameservers=["8.8.8.8", "1.1.1.1"])
    assert sub["dns_nameservers"] == ["8.8.8.8", "1.1.1.1"]  # order is significant
    five = [f"192.0.2.{i}" for i in range(1, 6)]
    assert create_subnet(api, net["id"], "10.0.1.0/24", dns_nameservers=five)["dns_nameservers"] == five
    before = subnet_ids(api)
    cases: list[tuple[list[Any], str, str]] = [
        (["8.8.8.8", "8.8.8.8"], "HTTPBadRequest", "Duplicate nameserver '8.8.8.8'"),
        ([*five, "192.0.2.6"], "HTTPBadRequest", "Exceeded maximum amount of DNS nameservers (5)"),
        (["dns.example"], "HTTPBadRequest", "not a valid IP address"),
        (["2001:4860:4860::8888"], "InvalidInput", "not of IP version 4"),
    ]
    for dns, type_, fragment in cases:
        resp = api.post(
            "/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.0.2.0/24", "dns_nameservers": dns}}
        )
        check_error(resp, 400, type_, fragment)
    assert subnet_ids(api) == before


def test_host_routes(api: httpx.Client, net: Json) -> None:
    routes = [
        {"destination": "192.168.0.0/24", "nexthop": "10.0.0.254"},
        {"destination": "0.0.0.0/0", "nexthop": "10.0.0.1"},
    ]
    sub = create_subnet(api, net["id"], "10.0.0.0/24", host_routes=routes)
    assert sub["host_routes"] == routes
    assert api.get(f"/subnets/{sub['id']}").json()["subnet"]["host_routes"] == routes
    cases: list[tuple[list[Json], str, str]] = [
        ([{"destination": "192.168.0.1/24", "nexthop": "10.0.1.1"}], "HTTPBadRequest", "use '192.168.0.0/24'"),
        ([{"destination": "fd00::/64", "nexthop": "10.0.1.1"}], "InvalidInput", "not of IP version 4"),
        ([{"destination": "192.168.0.0/24", "nexthop": "fd00::1"}], "InvalidInput", "not of IP version 4"),
        ([{"destination": "192.168.0.0/24"}], "HTTPBadRequest", "host_routes[0].nexthop"),
        ([routes[0], routes[0]], "InvalidInput", "Duplicate hostroute"),
        (
            [{"destination": f"192.168.{i}.0/24", "nexthop": "10.0.1.1"} for i in range(21)],
            "HostRoutesExhausted",
            "maximum of 20",
        ),
    ]
    for bad, type_, fragment in cases:
        resp = api.post(
            "/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.0.1.0/24", "host_routes": bad}}
        )
        check_error(resp, 400, type_, fragment)
    assert subnet_ids(api) == {sub["id"]}


# -- update ----------------------------------------------------------------------------------------


def _put(api: httpx.Client, subnet_id: str, **attrs: Any) -> httpx.Response:
    return api.put(f"/subnets/{subnet_id}", json={"subnet": attrs})


def test_update_name_dns_and_routes(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "10.0.0.0/24", dns_nameservers=["8.8.8.8"])
    resp = _put(
        api,
        sub["id"],
        name="renamed",
        dns_nameservers=["1.1.1.1", "9.9.9.9"],
        host_routes=[{"destination": "10.8.0.0/16", "nexthop": "10.0.0.9"}],
        enable_dhcp=False,
    )
    assert resp.status_code == 200, resp.text
    updated = resp.json()["subnet"]
    assert updated["name"] == "renamed"
    assert updated["dns_nameservers"] == ["1.1.1.1", "9.9.9.9"]
    assert updated["host_routes"] == [{"destination": "10.8.0.0/16", "nexthop": "10.0.0.9"}]
    assert updated["enable_dhcp"] is False
    assert updated["revision_number"] == sub["revision_number"] + 1
    assert (updated["cidr"], updated["gateway_ip"], updated["allocation_pools"]) == (
        sub["cidr"],
        sub["gateway_ip"],
        sub["allocation_pools"],
    )
    cleared = _put(api, sub["id"], dns_nameservers=[], host_routes=[]).json()["subnet"]
    assert (cleared["dns_nameservers"], cleared["host_routes"]) == ([], [])
    assert api.get(f"/subnets/{sub['id']}").json()["subnet"] == cleared


def test_update_rejections_leave_the_subnet_unchanged(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "10.0.0.0/24", dns_nameservers=["8.8.8.8"])
    cases: list[tuple[Json, int, str, str]] = [
        ({"dns_nameservers": ["1.1.1.1", "1.1.1.1"]}, 400, "HTTPBadRequest", "Duplicate nameserver"),
        ({"dns_nameservers": [f"192.0.2.{i}" for i in range(6)]}, 400, "HTTPBadRequest", "Exceeded maximum"),
        ({"dns_nameservers": ["2001:db8::53"]}, 400, "InvalidInput", "not of IP version 4"),
        ({"host_routes": [{"destination": "fd00::/8", "nexthop": "10.0.0.3"}]}, 400, "InvalidInput", "IP version"),
        ({"gateway_ip": "10.0.0.254"}, 409, "GatewayConflictWithAllocationPools", "10.0.0.254"),
        ({"gateway_ip": "10.1.0.1"}, 400, "InvalidInput", "Gateway is not valid"),
        (
            {"allocation_pools": pools(("10.0.0.10", "10.0.0.20"), ("10.0.0.15", "10.0.0.30"))},
            400,
            "OverlappingAllocationPools",
            "overlapping",
        ),
        ({"allocation_pools": pools(("10.0.0.200", "10.0.1.5"))}, 400, "OutOfBoundsAllocationPool", "spans beyond"),
        ({"allocation_pools": pools(("10.0.0.1", "10.0.0.5"))}, 409, "GatewayConflictWithAllocationPools", "10.0.0.1"),
        ({"cidr": "10.0.0.0/16"}, 400, "HTTPBadRequest", "Unrecognized attribute(s) 'cidr'"),
        ({"network_id": str(uuid.uuid4())}, 400, "HTTPBadRequest", "network_id"),
        ({"ip_version": 6}, 400, "HTTPBadRequest", "ip_version"),
        ({"name": "new", "enable_dhcp": "sometimes"}, 400, "HTTPBadRequest", "enable_dhcp"),
    ]
    for attrs, status, type_, fragment in cases:
        check_error(_put(api, sub["id"], **attrs), status, type_, fragment)
    assert api.get(f"/subnets/{sub['id']}").json()["subnet"] == sub


def test_update_gateway_and_pools(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "10.0.0.0/24")
    resp = _put(api, sub["id"], gateway_ip="10.0.0.254", allocation_pools=pools(("10.0.0.1", "10.0.0.253")))
    assert resp.status_code == 200, resp.text
    moved = resp.json()["subnet"]
    assert moved["gateway_ip"] == "10.0.0.254"
    assert moved["allocation_pools"] == pools(("10.0.0.1", "10.0.0.253"))
    resp = _put(api, sub["id"], allocation_pools=pools(("10.0.0.100", "10.0.0.110"), ("10.0.0.20", "10.0.0.29")))
    assert resp.status_code == 200, resp.text
    assert resp.json()["subnet"]["allocation_pools"] == pools(("10.0.0.20", "10.0.0.29"), ("10.0.0.100", "10.0.0.110"))
    none = _put(api, sub["id"], gateway_ip=None).json()["subnet"]
    assert none["gateway_ip"] is None
    assert none["allocation_pools"] == pools(("10.0.0.20", "10.0.0.29"), ("10.0.0.100", "10.0.0.110"))
    back = _put(api, sub["id"], gateway_ip="10.0.0.1").json()["subnet"]
    assert back["gateway_ip"] == "10.0.0.1"
    # New ports are allocated from the new pools.
    port = api.post("/ports", json={"port": {"network_id": net["id"]}}).json()["port"]
    assert port["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.0.0.20"}]


def test_gateway_cannot_move_onto_a_port_address(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "10.0.0.0/24", allocation_pools=pools(("10.0.0.10", "10.0.0.20")))
    resp = api.post("/ports", json={"port": {"network_id": net["id"], "fixed_ips": [{"ip_address": "10.0.0.200"}]}})
    assert resp.status_code == 201, resp.text
    check_error(_put(api, sub["id"], gateway_ip="10.0.0.200"), 409, "IpAddressInUse", "10.0.0.200")
    assert api.get(f"/subnets/{sub['id']}").json()["subnet"]["gateway_ip"] == "10.0.0.1"


def test_gateway_held_by_a_router_interface(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "10.0.0.0/24", allocation_pools=pools(("10.0.0.10", "10.0.0.20")))
    router = api.post("/routers", json={"router": {"name": "r"}}).json()["router"]
    resp = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    assert resp.status_code == 200, resp.text
    check_error(_put(api, sub["id"], gateway_ip="10.0.0.254"), 409, "GatewayIpInUse", "10.0.0.1")
    check_error(_put(api, sub["id"], gateway_ip=None), 409, "GatewayIpInUse")
    check_error(api.delete(f"/subnets/{sub['id']}"), 409, "SubnetInUse", sub["id"])
    assert api.get(f"/subnets/{sub['id']}").json()["subnet"] == sub
    resp = api.put(f"/routers/{router['id']}/remove_router_interface", json={"subnet_id": sub["id"]})
    assert resp.status_code == 200, resp.text
    assert _put(api, sub["id"], gateway_ip="10.0.0.254").json()["subnet"]["gateway_ip"] == "10.0.0.254"
    assert api.delete(f"/subnets/{sub['id']}").status_code == 204


# -- delete ----------------------------------------------------------------------------------------


def test_delete_in_use_is_refused(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "10.0.0.0/24")
    port = api.post("/ports", json={"port": {"network_id": net["id"], "device_owner": "compute:nova"}}).json()["port"]
    check_error(api.delete(f"/subnets/{sub['id']}"), 409, "SubnetInUse", sub["id"], "IP allocation")
    assert api.get(f"/subnets/{sub['id']}").json()["subnet"] == sub
    assert api.get(f"/ports/{port['id']}").json()["port"]["fixed_ips"] == port["fixed_ips"]
    assert api.delete(f"/ports/{port['id']}").status_code == 204
    assert api.delete(f"/subnets/{sub['id']}").status_code == 204
    check_error(api.get(f"/subnets/{sub['id']}"), 404, "SubnetNotFound", sub["id"])
    assert api.get(f"/networks/{net['id']}").json()["network"]["subnets"] == []
    check_error(api.delete(f"/subnets/{sub['id']}"), 404, "SubnetNotFound")


def test_delete_releases_dhcp_port_addresses(api: httpx.Client, net: Json) -> None:
    v4 = create_subnet(api, net["id"], "10.0.0.0/24")
    v6 = create_subnet(api, net["id"], "2001:db8::/64")
    dhcp = api.post("/ports", json={"port": {"network_id": net["id"], "device_owner": "network:dhcp"}}).json()["port"]
    assert {f["subnet_id"] for f in dhcp["fixed_ips"]} == {v4["id"], v6["id"]}
    assert api.delete(f"/subnets/{v4['id']}").status_code == 204
    after = api.get(f"/ports/{dhcp['id']}").json()["port"]
    assert [f["subnet_id"] for f in after["fixed_ips"]] == [v6["id"]]
    assert after["revision_number"] == dhcp["revision_number"] + 1


# -- ids and visibility ----------------------------------------------------------------------------


def test_unknown_or_malformed_ids_are_404(api: httpx.Client, net: Json) -> None:
    sub = create_subnet(api, net["id"], "10.0.0.0/24")
    for bad_id in ("not-a-uuid", str(uuid.uuid4()), "x" * 300, "%00", "a%00b"):
        check_error(api.get(f"/subnets/{bad_id}"), 404, "SubnetNotFound", "could not be found")
        check_error(_put(api, bad_id, name="x"), 404, "SubnetNotFound")
        check_error(api.delete(f"/subnets/{bad_id}"), 404, "SubnetNotFound")
    assert api.get(f"/subnets/{sub['id']}").json()["subnet"] == sub


def test_list_filters(api: httpx.Client, net: Json) -> None:
    other = create_network(api)
    a = create_subnet(api, net["id"], "10.0.0.0/24", name="a")
    b = create_subnet(api, net["id"], "2001:db8::/64", name="b")
    c = create_subnet(api, other["id"], "10.0.0.0/24", name="c")
    assert subnet_ids(api, network_id=net["id"]) == {a["id"], b["id"]}
    assert subnet_ids(api, ip_version=4) == {a["id"], c["id"]}
    assert subnet_ids(api, cidr="10.0.0.0/24", network_id=other["id"]) == {c["id"]}
    assert subnet_ids(api, name=["a", "b"]) == {a["id"], b["id"]}
    resp = api.get("/subnets", params={"fields": ["id", "cidr"], "name": "b"})
    assert resp.json()["subnets"] == [{"id": b["id"], "cidr": "2001:db8::/64"}]


def test_visibility_and_ownership(users: dict[str, httpx.Client]) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    alice_net = create_network(alice)
    alice_sub = create_subnet(alice, alice_net["id"], "10.0.0.0/24")
    assert alice_sub["project_id"] == "alice"
    check_error(bob.get(f"/subnets/{alice_sub['id']}"), 404, "SubnetNotFound")
    check_error(_put(bob, alice_sub["id"], name="x"), 404, "SubnetNotFound")
    check_error(bob.delete(f"/subnets/{alice_sub['id']}"), 404, "SubnetNotFound")
    assert subnet_ids(bob) == set()
    # Bob cannot add subnets to a network he cannot see.
    check_error(
        bob.post("/subnets", json={"subnet": {"network_id": alice_net["id"], "cidr": "10.1.0.0/24"}}),
        404,
        "NetworkNotFound",
    )
    # Subnets of a shared network are visible to everyone, but only its owner may add, change or delete.
    shared = create_network(admin, shared=True)
    shared_sub = create_subnet(admin, shared["id"], "192.168.0.0/24")
    assert subnet_ids(bob) == {shared_sub["id"]}
    assert bob.get(f"/subnets/{shared_sub['id']}").json()["subnet"]["cidr"] == "192.168.0.0/24"
    check_error(
        bob.post("/subnets", json={"subnet": {"network_id": shared["id"], "cidr": "192.168.1.0/24"}}),
        403,
        "PolicyNotAuthorized",
    )
    check_error(_put(bob, shared_sub["id"], name="mine"), 403, "PolicyNotAuthorized")
    check_error(bob.delete(f"/subnets/{shared_sub['id']}"), 403, "PolicyNotAuthorized")
    assert admin.get(f"/subnets/{shared_sub['id']}").json()["subnet"] == shared_sub
    assert subnet_ids(admin) == {alice_sub["id"], shared_sub["id"]}


# -- races -----------------------------------------------------------------------------------------


def test_parallel_overlapping_creates_have_one_winner(api: httpx.Client, server: RunningServer, net: Json) -> None:
    cidrs = ["10.0.0.0/24", "10.0.0.0/25", "10.0.0.128/25", "10.0.0.0/16"] * 4
    barrier = threading.Barrier(len(cidrs))

    def one(cidr: str) -> httpx.Response:
        with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60) as client:
            client.get("/networks", params={"limit": 1}).raise_for_status()  # connect before the race
            barrier.wait(timeout=60)
            return client.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": cidr}})

    with ThreadPoolExecutor(max_workers=len(cidrs)) as pool:
        responses = list(pool.map(one, cidrs))
    created = [r.json()["subnet"] for r in responses if r.status_code == 201]
    failed = Counter((r.status_code, r.json()["NeutronError"]["type"]) for r in responses if r.status_code != 201)
    # Either the /16 or (some of) the /24 and its halves won, but no two overlapping subnets exist.
    assert failed == Counter({(400, "InvalidInput"): len(cidrs) - len(created)})
    stored = api.get("/subnets", params={"network_id": net["id"]}).json()["subnets"]
    assert sorted(s["id"] for s in stored) == sorted(s["id"] for s in created)
    networks = [ipaddress.ip_network(s["cidr"]) for s in stored]
    assert networks
    for a, b in itertools.combinations(networks, 2):
        assert not a.overlaps(b), (a, b)


def test_delete_racing_port_creates_is_clean(api: httpx.Client, server: RunningServer, net: Json) -> None:
    """Either the delete wins (later ports find no such subnet) or a port does (SubnetInUse): never a 500."""
    for round_ in range(3):
        sub = create_subnet(api, net["id"], f"10.{round_}.0.0/24")
        barrier = threading.Barrier(9)

        def act(i: int, subnet_id: str = sub["id"], barrier: threading.Barrier = barrier) -> httpx.Response:
            with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60) as c:
                c.get("/networks", params={"limit": 1}).raise_for_status()  # connect before the race
                barrier.wait(timeout=60)
                if i == 0:
                    return c.delete(f"/subnets/{subnet_id}")
                fixed = [{"subnet_id": subnet_id}]
                return c.post("/ports", json={"port": {"network_id": net["id"], "fixed_ips": fixed}})

        with ThreadPoolExecutor(max_workers=9) as pool:
            deleted, *ports = pool.map(act, range(9))
        outcomes = Counter(
            (p.status_code, p.json()["NeutronError"]["type"] if p.status_code != 201 else "") for p in ports
        )
        holders = api.get("/ports", params={"fixed_ips": f"subnet_id={sub['id']}"}).json()["ports"]
        if deleted.status_code == 204:
            assert holders == []
            assert set(outcomes) <= {(201, ""), (400, "InvalidInput"), (404, "SubnetNotFound")}, outcomes
            # A port created before the delete looked would have blocked it.
            assert outcomes[(201, "")] == 0, outcomes
            check_error(api.get(f"/subnets/{sub['id']}"), 404, "SubnetNotFound")
        else:
            check_error(deleted, 409, "SubnetInUse", sub["id"])
            assert outcomes == Counter({(201, ""): 8})
            assert len(holders) == 8
        for port in api.get("/ports").json()["ports"]:
            assert api.delete(f"/ports/{port['id']}").status_code == 204

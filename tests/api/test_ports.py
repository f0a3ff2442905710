"""Ports through the live API on both backends: IPAM, MACs, security groups, bindings, bulk atomicity."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import pytest

from tests.support.api import check_error, create_network, create_subnet

Json = dict[str, Any]
MAC_RE = re.compile(r"^fa:16:3e(:[0-9a-f]{2}){3}$")


def create_port(client: httpx.Client, network_id: str, **attrs: Any) -> Json:
    resp = client.post("/ports", json={"port": {"network_id": network_id, **attrs}})
    assert resp.status_code == 201, resp.text
    return resp.json()["port"]


def post_port(client: httpx.Client, network_id: str, **attrs: Any) -> httpx.Response:
    return client.post("/ports", json={"port": {"network_id": network_id, **attrs}})


def put_port(client: httpx.Client, port_id: str, **attrs: Any) -> httpx.Response:
    return client.put(f"/ports/{port_id}", json={"port": attrs})


def port_ids(client: httpx.Client, **params: Any) -> set[str]:
    resp = client.get("/ports", params=params)
    assert resp.status_code == 200, resp.text
    return {p["id"] for p in resp.json()["ports"]}


def ips(port: Json) -> list[str]:
    return [f["ip_address"] for f in port["fixed_ips"]]


def holder_of(client: httpx.Client, ip: str) -> set[str]:
    """Ids of the ports holding this address."""
    return port_ids(client, fixed_ips=f"ip_address={ip}")


@pytest.fixture
def net(api: httpx.Client) -> Json:
    """A network with an IPv4 /24 (`v4`) and an IPv6 /64 (`v6`) subnet."""
    network = create_network(api, name="net")
    network["v4"] = create_subnet(api, network["id"], "10.0.0.0/24")
    network["v6"] = create_subnet(api, network["id"], "2001:db8::/64")
    return network


@pytest.fixture
def small(api: httpx.Client) -> Json:
    """A network whose only subnet has a five-address pool, 10.0.0.2-10.0.0.6."""
    network = create_network(api, name="small")
    network["v4"] = create_subnet(api, network["id"], "10.0.0.0/29")
    assert network["v4"]["allocation_pools"] == [{"start": "10.0.0.2", "end": "10.0.0.6"}]
    return network


def default_group(client: httpx.Client, project: str) -> Json:
    groups = client.get("/security-groups", params={"name": "default", "project_id": project}).json()
    assert len(groups["security_groups"]) == 1, groups
    return groups["security_groups"][0]


# -- create: defaults ------------------------------------------------------------------------------


def test_create_defaults(api: httpx.Client, net: Json) -> None:
    port = create_port(api, net["id"], name="p1")
    assert uuid.UUID(port["id"])
    assert port["name"] == "p1"
    assert port["network_id"] == net["id"]
    assert port["status"] == "DOWN"
    assert port["admin_state_up"] is True
    assert MAC_RE.match(port["mac_address"]), port["mac_address"]
    assert port["fixed_ips"] == [
        {"subnet_id": net["v4"]["id"], "ip_address": "10.0.0.2"},
        {"subnet_id": net["v6"]["id"], "ip_address": "2001:db8::2"},
    ]
    assert (port["device_id"], port["device_owner"]) == ("", "")
    assert port["port_security_enabled"] is True
    assert port["binding:vnic_type"] == "normal"
    assert port["binding:vif_type"] == "unbound"
    assert (port["binding:host_id"], port["binding:profile"], port["binding:vif_details"]) == ("", {}, {})
    assert (port["allowed_address_pairs"], port["extra_dhcp_opts"], port["tags"]) == ([], [], [])
    assert port["project_id"] == port["tenant_id"] == "admin"
    assert port["revision_number"] == 0
    # The project's `default` group was created on demand and applied.
    sg = default_group(api, "admin")
    assert port["security_groups"] == [sg["id"]]
    assert {(r["direction"], r["ethertype"]) for r in sg["security_group_rules"]} == {
        ("egress", "IPv4"),
        ("egress", "IPv6"),
        ("ingress", "IPv4"),
        ("ingress", "IPv6"),
    }
    # What create answered is what is stored.
    assert api.get(f"/ports/{port['id']}").json()["port"] == port
    assert api.get("/ports").json()["ports"] == [port]
    # A second port reuses the same default group.
    assert create_port(api, net["id"])["security_groups"] == [sg["id"]]
    assert len(api.get("/security-groups", params={"name": "default"}).json()["security_groups"]) == 1


def test_one_address_per_ip_version_across_subnets(api: httpx.Client) -> None:
    network = create_network(api)
    a = create_subnet(api, network["id"], "10.0.0.0/29")
    b = create_subnet(api, network["id"], "10.0.1.0/29")
    v6 = create_subnet(api, network["id"], "fd00::/64")
    created = api.post("/ports", json={"ports": [{"network_id": network["id"]} for _ in range(10)]})
    assert created.status_code == 201, created.text
    v4_seen: set[str] = set()
    for port in created.json()["ports"]:
        subnets = [f["subnet_id"] for f in port["fixed_ips"]]
        assert len(subnets) == 2 and subnets[1] == v6["id"], port["fixed_ips"]
        assert subnets[0] in (a["id"], b["id"])
        v4_seen.add(port["fixed_ips"][0]["ip_address"])
    assert v4_seen == {f"10.0.{n}.{h}" for n in (0, 1) for h in range(2, 7)}
    # IPv4 is exhausted: a port that wants one of each cannot be created, though IPv6 has room.
    check_error(post_port(api, network["id"]), 409, "IpAddressGenerationFailure", network["id"])
    assert len(port_ids(api)) == 10
    only_v6 = create_port(api, network["id"], fixed_ips=[{"subnet_id": v6["id"]}])
    assert ips(only_v6) == ["fd00::c"]


def test_network_without_subnets_gives_no_addresses(api: httpx.Client) -> None:
    bare = create_network(api)
    assert create_port(api, bare["id"])["fixed_ips"] == []


def test_create_answer_matches_what_is_read_back(api: httpx.Client, net: Json) -> None:
    web = api.post("/security-groups", json={"security_group": {"name": "web"}}).json()["security_group"]["id"]
    bodies: list[Json] = [
        {"network_id": net["id"], "tags": ["z", "a"], "description": "tagged"},
        {"network_id": net["id"], "security_groups": [web, web], "admin_state_up": False},
        {"network_id": net["id"], "fixed_ips": [{"ip_address": "2001:db8::9"}, {"ip_address": "10.0.0.100"}]},
        {"network_id": net["id"], "binding:profile": {"a": {"b": [1, None]}}, "device_owner": "network:dhcp"},
    ]
    resp = api.post("/ports", json={"ports": bodies})
    assert resp.status_code == 201, resp.text
    created = resp.json()["ports"]
    assert created[0]["tags"] == ["a", "z"]
    assert created[1]["security_groups"] == [web]
    assert ips(created[2]) == ["10.0.0.100", "2001:db8::9"]
    for port in created:
        assert api.get(f"/ports/{port['id']}").json()["port"] == port
    assert sorted(api.get("/ports").json()["ports"], key=lambda p: p["id"]) == sorted(created, key=lambda p: p["id"])


def test_macs_are_unique_per_network(api: httpx.Client, net: Json) -> None:
    resp = api.post("/ports", json={"ports": [{"network_id": net["id"]} for _ in range(20)]})
    assert resp.status_code == 201, resp.text
    macs = [p["mac_address"] for p in resp.json()["ports"]]
    assert all(MAC_RE.match(m) for m in macs), macs
    assert len(set(macs)) == 20
    assert {p["mac_address"] for p in api.get("/ports").json()["ports"]} == set(macs)


def test_network_owned_ports_get_no_security_groups(api: httpx.Client, net: Json) -> None:
    for owner in ("network:dhcp", "network:floatingip", "network:router_interface_distributed"):
        port = create_port(api, net["id"], device_owner=owner)
        assert port["security_groups"] == [], owner
        assert api.get(f"/ports/{port['id']}").json()["port"]["security_groups"] == []
    compute = create_port(api, net["id"], device_owner="compute:nova", device_id="vm-1")
    assert compute["security_groups"] == [default_group(api, "admin")["id"]]
    assert (compute["device_owner"], compute["device_id"]) == ("compute:nova", "vm-1")


# -- fixed IPs -------------------------------------------------------------------------------------


def test_fixed_ips_by_subnet_address_or_both(api: httpx.Client, net: Json) -> None:
    v4, v6 = net["v4"]["id"], net["v6"]["id"]
    by_subnet = create_port(api, net["id"], fixed_ips=[{"subnet_id": v4}])
    assert by_subnet["fixed_ips"] == [{"subnet_id": v4, "ip_address": "10.0.0.2"}]
    by_address = create_port(api, net["id"], fixed_ips=[{"ip_address": "10.0.0.50"}])
    assert by_address["fixed_ips"] == [{"subnet_id": v4, "ip_address": "10.0.0.50"}]
    both = create_port(api, net["id"], fixed_ips=[{"subnet_id": v4, "ip_address": "10.0.0.60"}])
    assert both["fixed_ips"] == [{"subnet_id": v4, "ip_address": "10.0.0.60"}]
    v6_only = create_port(api, net["id"], fixed_ips=[{"ip_address": "2001:db8::abcd"}])
    assert v6_only["fixed_ips"] == [{"subnet_id": v6, "ip_address": "2001:db8::abcd"}]
    # Addresses are stored in canonical form however they were written.
    long_form = create_port(api, net["id"], fixed_ips=[{"ip_address": "2001:0db8:0000::00ff"}])
    assert ips(long_form) == ["2001:db8::ff"]
    two = create_port(api, net["id"], fixed_ips=[{"subnet_id": v4}, {"subnet_id": v4}, {"subnet_id": v6}])
    assert ips(two) == ["10.0.0.3", "10.0.0.4", "2001:db8::2"]
    none = create_port(api, net["id"], fixed_ips=[])
    assert none["fixed_ips"] == []
    for port in (by_subnet, by_address, both, v6_only, long_form, two, none):
        assert api.get(f"/ports/{port['id']}").json()["port"]["fixed_ips"] == port["fixed_ips"]
    assert holder_of(api, "10.0.0.50") == {by_address["id"]}


def test_requested_address_outside_the_pool_is_honoured(api: httpx.Client) -> None:
    network = create_network(api)
    sub = create_subnet(
        api, network["id"], "10.0.0.0/24", allocation_pools=[{"start": "10.0.0.10", "end": "10.0.0.20"}]
    )
    port = create_port(api, network["id"], fixed_ips=[{"ip_address": "10.0.0.200"}])
    assert port["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.0.0.200"}]
    assert ips(create_port(api, network["id"])) == ["10.0.0.10"]


def test_taken_address_is_a_conflict(api: httpx.Client, net: Json) -> None:
    first = create_port(api, net["id"], fixed_ips=[{"ip_address": "10.0.0.50"}])
    for fixed in ([{"ip_address": "10.0.0.50"}], [{"subnet_id": net["v4"]["id"], "ip_address": "10.0.0.50"}]):
        check_error(
            post_port(api, net["id"], fixed_ips=fixed), 409, "IpAddressAlreadyAllocated", "10.0.0.50", net["id"]
        )
    assert port_ids(api) == {first["id"]}
    # The same address on another network is a different address.
    other = create_network(api)
    create_subnet(api, other["id"], "10.0.0.0/24")
    assert ips(create_port(api, other["id"], fixed_ips=[{"ip_address": "10.0.0.50"}])) == ["10.0.0.50"]


def test_invalid_requested_addresses(api: httpx.Client, net: Json) -> None:
    other = create_network(api)
    foreign = create_subnet(api, other["id"], "10.9.0.0/24")
    v4 = net["v4"]["id"]
    cases: list[tuple[list[Json], int, str, str]] = [
        ([{"subnet_id": v4, "ip_address": "10.1.0.5"}], 400, "InvalidIpForSubnet", "10.1.0.5"),
        ([{"subnet_id": v4, "ip_address": "2001:db8::5"}], 400, "InvalidIpForSubnet", "2001:db8::5"),
        ([{"ip_address": "10.1.0.5"}], 400, "InvalidInput", "invalid IP address 10.1.0.5"),
        ([{"ip_address": "10.0.0.0"}], 400, "InvalidIpForSubnet", "10.0.0.0 is not a valid IP"),
        ([{"ip_address": "10.0.0.255"}], 400, "InvalidIpForSubnet", "10.0.0.255"),
        ([{"ip_address": "2001:db8::"}], 400, "InvalidIpForSubnet", "2001:db8::"),
        ([{"ip_address": "10.0.0.1"}], 409, "IpAddressAlreadyAllocated", "10.0.0.1"),  # the gateway
        ([{"subnet_id": foreign["id"]}], 400, "InvalidInput", f"invalid subnet {foreign['id']}"),
        ([{"subnet_id": str(uuid.uuid4())}], 400, "InvalidInput", "invalid subnet"),
        ([{"ip_address": "10.0.0.x"}], 400, "HTTPBadRequest", "fixed_ips[0].ip_address"),
        ([{}], 400, "HTTPBadRequest", "fixed_ips[0]"),
        ([{"ip_address": "10.0.0.9", "mask": 24}], 400, "HTTPBadRequest", "fixed_ips[0].mask"),
        ([{"ip_address": "10.0.0.70"}, {"ip_address": "10.0.0.70"}], 400, "InvalidInput", "Duplicate IP address"),
    ]
    for fixed, status, type_, fragment in cases:
        check_error(post_port(api, net["id"], fixed_ips=fixed), status, type_, fragment)
    assert port_ids(api) == set()
    # None of the valid addresses above was consumed by the failed requests.
    assert ips(create_port(api, net["id"])) == ["10.0.0.2", "2001:db8::2"]


def test_exhausted_pool(api: httpx.Client, small: Json) -> None:
    created = [create_port(api, small["id"]) for _ in range(5)]
    assert sorted(ip for p in created for ip in ips(p)) == [f"10.0.0.{h}" for h in range(2, 7)]
    check_error(post_port(api, small["id"]), 409, "IpAddressGenerationFailure", "No more IP addresses", small["id"])
    check_error(
        post_port(api, small["id"], fixed_ips=[{"subnet_id": small["v4"]["id"]}]), 409, "IpAddressGenerationFailure"
    )
    assert port_ids(api) == {p["id"] for p in created}


# -- allocation order ------------------------------------------------------------------------------


def test_allocation_is_next_fit_and_wraps_around(api: httpx.Client, small: Json) -> None:
    p2 = create_port(api, small["id"])
    p3 = create_port(api, small["id"])
    assert (ips(p2), ips(p3)) == (["10.0.0.2"], ["10.0.0.3"])
    assert api.delete(f"/ports/{p2['id']}").status_code == 204
    # The freed .2 is not reused straight away: allocation continues after the last one handed out.
    assert ips(create_port(api, small["id"])) == ["10.0.0.4"]
    assert ips(create_port(api, small["id"])) == ["10.0.0.5"]
    assert ips(create_port(api, small["id"])) == ["10.0.0.6"]
    # At the end of the pool it wraps round to the free addresses at its start.
    assert ips(create_port(api, small["id"])) == ["10.0.0.2"]
    check_error(post_port(api, small["id"]), 409, "IpAddressGenerationFailure")
    assert api.delete(f"/ports/{p3['id']}").status_code == 204
    assert ips(create_port(api, small["id"])) == ["10.0.0.3"]


def test_next_fit_spans_pools_in_order(api: httpx.Client) -> None:
    network = create_network(api)
    create_subnet(
        api,
        network["id"],
        "10.0.0.0/24",
        allocation_pools=[{"start": "10.0.0.200", "end": "10.0.0.201"}, {"start": "10.0.0.10", "end": "10.0.0.11"}],
    )
    got = [ips(create_port(api, network["id"]))[0] for _ in range(4)]
    assert got == ["10.0.0.10", "10.0.0.11", "10.0.0.200", "10.0.0.201"]
    check_error(post_port(api, network["id"]), 409, "IpAddressGenerationFailure")


# -- bindings and read-only attributes -------------------------------------------------------------


def test_vnic_types(api: httpx.Client, net: Json) -> None:
    by_type = {}
    for vnic in ("normal", "direct"):
        port = create_port(api, net["id"], **{"binding:vnic_type": vnic})
        assert port["binding:vnic_type"] == vnic
        assert api.get(f"/ports/{port['id']}").json()["port"]["binding:vnic_type"] == vnic
        by_type[vnic] = port["id"]
    before = port_ids(api)
    for vnic in ("macvtap", "baremetal", "direct-physical", "", "DIRECT", None):
        check_error(
            post_port(api, net["id"], **{"binding:vnic_type": vnic}), 400, "HTTPBadRequest", "binding:vnic_type"
        )
    assert port_ids(api) == before
    assert port_ids(api, **{"binding:vnic_type": "direct"}) == {by_type["direct"]}


def test_binding_host_and_profile_are_stored(api: httpx.Client, net: Json) -> None:
    profile = {"pci_slot": "0000:03:00.1", "physical_network": "physnet1", "pci_vendor_info": "8086:154c"}
    port = create_port(
        api, net["id"], **{"binding:host_id": "compute-1", "binding:profile": profile, "binding:vnic_type": "direct"}
    )
    assert (port["binding:host_id"], port["binding:profile"]) == ("compute-1", profile)
    shown = api.get(f"/ports/{port['id']}").json()["port"]
    assert (shown["binding:host_id"], shown["binding:profile"]) == ("compute-1", profile)
    assert port_ids(api, **{"binding:host_id": "compute-1"}) == {port["id"]}
    resp = put_port(api, port["id"], **{"binding:host_id": "compute-2", "binding:profile": {"k": [1, 2]}})
    assert resp.status_code == 200, resp.text
    shown = api.get(f"/ports/{port['id']}").json()["port"]
    assert (shown["binding:host_id"], shown["binding:profile"]) == ("compute-2", {"k": [1, 2]})
    check_error(post_port(api, net["id"], **{"binding:profile": "x"}), 400, "HTTPBadRequest", "binding:profile")


def test_read_only_and_unknown_attributes_are_rejected(api: httpx.Client, net: Json) -> None:
    for attr, value in (("status", "ACTIVE"), ("binding:vif_type", "ovs"), ("binding:vif_details", {})):
        check_error(
            post_port(api, net["id"], **{attr: value}), 400, "HTTPBadRequest", f"Attribute '{attr}' not allowed in POST"
        )
    check_error(post_port(api, net["id"], colour="red"), 400, "HTTPBadRequest", "Unrecognized attribute(s) 'colour'")
    check_error(api.post("/ports", json={"port": {"name": "no-network"}}), 400, "HTTPBadRequest", "network_id")
    assert port_ids(api) == set()
    port = create_port(api, net["id"])
    for attr, value in (("status", "ACTIVE"), ("binding:vif_type", "ovs"), ("network_id", str(uuid.uuid4()))):
        check_error(put_port(api, port["id"], **{attr: value}), 400, "HTTPBadRequest", f"'{attr}' not allowed in PUT")
    check_error(put_port(api, port["id"], colour="red"), 400, "HTTPBadRequest", "Unrecognized attribute(s)")
    assert api.get(f"/ports/{port['id']}").json()["port"] == port


# -- MAC addresses ---------------------------------------------------------------------------------


def test_given_mac_address_and_duplicates(api: httpx.Client, net: Json) -> None:
    port = create_port(api, net["id"], mac_address="FA:16:3E:AA:BB:CC")
    assert port["mac_address"] == "fa:16:3e:aa:bb:cc"
    for mac in ("fa:16:3e:aa:bb:cc", "FA-16-3E-AA-BB-CC"):
        check_error(post_port(api, net["id"], mac_address=mac), 409, "MacAddressInUse", "fa:16:3e:aa:bb:cc", net["id"])
    check_error(
        api.post("/ports", json={"ports": [{"network_id": net["id"], "mac_address": "fa:16:3e:00:00:01"}] * 2}),
        409,
        "MacAddressInUse",
        "fa:16:3e:00:00:01",
    )
    for bad in ("zz:16:3e:aa:bb:cc", "fa:16:3e:aa:bb", "01:00:5e:00:00:01", "00:00:00:00:00:00"):
        check_error(post_port(api, net["id"], mac_address=bad), 400, "HTTPBadRequest", "mac_address")
    assert port_ids(api) == {port["id"]}
    # The failed requests left their addresses free.
    assert ips(create_port(api, net["id"]))[0] == "10.0.0.3"
    # MACs are unique per network only.
    other = create_network(api)
    assert create_port(api, other["id"], mac_address="fa:16:3e:aa:bb:cc")["mac_address"] == "fa:16:3e:aa:bb:cc"
    assert port_ids(api, mac_address="fa:16:3e:aa:bb:cc") == {port["id"], *port_ids(api, network_id=other["id"])}


def test_update_mac_address(api: httpx.Client, net: Json) -> None:
    a = create_port(api, net["id"])
    b = create_port(api, net["id"])
    check_error(put_port(api, b["id"], mac_address=a["mac_address"]), 409, "MacAddressInUse", a["mac_address"])
    assert api.get(f"/ports/{b['id']}").json()["port"] == b
    resp = put_port(api, b["id"], mac_address="fa:16:3e:12:34:56")
    assert resp.status_code == 200, resp.text
    assert api.get(f"/ports/{b['id']}").json()["port"]["mac_address"] == "fa:16:3e:12:34:56"


# -- update ----------------------------------------------------------------------------------------


def test_update_simple_attributes(api: httpx.Client, net: Json) -> None:
    port = create_port(api, net["id"], name="before")
    resp = put_port(
        api,
        port["id"],
        name="after",
        description="d",
        admin_state_up=False,
        device_id="vm-42",
        device_owner="compute:az1",
    )
    assert resp.status_code == 200, resp.text
    updated = resp.json()["port"]
    assert (updated["name"], updated["description"], updated["admin_state_up"]) == ("after", "d", False)
    assert (updated["device_id"], updated["device_owner"]) == ("vm-42", "compute:az1")
    assert updated["revision_number"] == port["revision_number"] + 1
    assert (updated["fixed_ips"], updated["mac_address"], updated["security_groups"]) == (
        port["fixed_ips"],
        port["mac_address"],
        port["security_groups"],
    )
    assert api.get(f"/ports/{port['id']}").json()["port"] == updated
    assert port_ids(api, device_id="vm-42") == {port["id"]}


def test_update_fixed_ips_keep_replace_add_remove(api: httpx.Client, net: Json) -> None:
    v4, v6 = net["v4"]["id"], net["v6"]["id"]
    port = create_port(api, net["id"])
    assert ips(port) == ["10.0.0.2", "2001:db8::2"]

    kept = put_port(api, port["id"], fixed_ips=port["fixed_ips"]).json()["port"]
    assert kept["fixed_ips"] == port["fixed_ips"]
    by_subnet = put_port(api, port["id"], fixed_ips=[{"subnet_id": v4}, {"subnet_id": v6}]).json()["port"]
    assert by_subnet["fixed_ips"] == port["fixed_ips"]

    replaced = put_port(api, port["id"], fixed_ips=[{"subnet_id": v4, "ip_address": "10.0.0.77"}])
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["port"]["fixed_ips"] == [{"subnet_id": v4, "ip_address": "10.0.0.77"}]
    assert holder_of(api, "10.0.0.2") == set()
    assert holder_of(api, "2001:db8::2") == set()

    added = put_port(api, port["id"], fixed_ips=[{"ip_address": "10.0.0.77"}, {"subnet_id": v6}, {"subnet_id": v4}])
    assert added.status_code == 200, added.text
    # Next-fit: the addresses freed above are not handed out again straight away.
    assert ips(added.json()["port"]) == ["10.0.0.3", "10.0.0.77", "2001:db8::3"]

    removed = put_port(api, port["id"], fixed_ips=[]).json()["port"]
    assert removed["fixed_ips"] == []
    assert api.get(f"/ports/{port['id']}").json()["port"] == removed
    assert holder_of(api, "10.0.0.77") == set()


def test_failed_fixed_ips_update_changes_nothing(api: httpx.Client, net: Json) -> None:
    v4 = net["v4"]["id"]
    port = create_port(api, net["id"])
    other = create_port(api, net["id"], fixed_ips=[{"ip_address": "10.0.0.50"}])
    cases: list[tuple[list[Json], int, str]] = [
        ([{"ip_address": "10.0.0.50"}], 409, "IpAddressAlreadyAllocated"),
        ([{"subnet_id": v4, "ip_address": "10.0.0.60"}, {"ip_address": "10.0.0.50"}], 409, "IpAddressAlreadyAllocated"),
        ([{"ip_address": "10.0.0.1"}], 409, "IpAddressAlreadyAllocated"),
        ([{"ip_address": "10.5.0.1"}], 400, "InvalidInput"),
        ([{"subnet_id": v4, "ip_address": "10.0.0.255"}], 400, "InvalidIpForSubnet"),
    ]
    for fixed, status, type_ in cases:
        check_error(put_port(api, port["id"], fixed_ips=fixed), status, type_)
        assert api.get(f"/ports/{port['id']}").json()["port"] == port
    assert holder_of(api, "10.0.0.2") == {port["id"]}
    assert holder_of(api, "10.0.0.50") == {other["id"]}
    assert holder_of(api, "10.0.0.60") == set()


def test_update_security_groups_and_port_security(api: httpx.Client, net: Json) -> None:
    port = create_port(api, net["id"])
    default = default_group(api, "admin")["id"]
    assert port["security_groups"] == [default]
    web = api.post("/security-groups", json={"security_group": {"name": "web"}}).json()["security_group"]["id"]

    assert put_port(api, port["id"], security_groups=[web, default]).json()["port"]["security_groups"] == sorted(
        [web, default]
    )
    assert put_port(api, port["id"], security_groups=[web]).json()["port"]["security_groups"] == [web]
    missing = str(uuid.uuid4())
    check_error(put_port(api, port["id"], security_groups=[missing]), 404, "SecurityGroupNotFound", missing)
    check_error(put_port(api, port["id"], port_security_enabled=False), 409, "PortSecurityPortHasSecurityGroup")
    current = api.get(f"/ports/{port['id']}").json()["port"]
    assert (current["security_groups"], current["port_security_enabled"]) == ([web], True)

    off = put_port(api, port["id"], port_security_enabled=False, security_groups=[])
    assert off.status_code == 200, off.text
    assert (off.json()["port"]["security_groups"], off.json()["port"]["port_security_enabled"]) == ([], False)
    # Neutron: groups on a port without port security are a bad request (400), not a conflict.
    check_error(put_port(api, port["id"], security_groups=[web]), 400, "PortSecurityAndIPRequiredForSecurityGroups")
    on = put_port(api, port["id"], port_security_enabled=True, security_groups=[default]).json()["port"]
    assert (on["security_groups"], on["port_security_enabled"]) == ([default], True)
    assert port_ids(api, security_groups=default) == {port["id"]}


def test_create_with_security_groups_or_without_port_security(api: httpx.Client, net: Json) -> None:
    web = api.post("/security-groups", json={"security_group": {"name": "web"}}).json()["security_group"]["id"]
    assert create_port(api, net["id"], security_groups=[web])["security_groups"] == [web]
    assert create_port(api, net["id"], security_groups=[])["security_groups"] == []
    insecure = create_port(api, net["id"], port_security_enabled=False)
    assert (insecure["security_groups"], insecure["port_security_enabled"]) == ([], False)
    # An empty list is no groups: fine without port security.
    assert create_port(api, net["id"], port_security_enabled=False, security_groups=[])["security_groups"] == []
    before = port_ids(api)
    check_error(
        post_port(api, net["id"], port_security_enabled=False, security_groups=[web]),
        400,
        "PortSecurityAndIPRequiredForSecurityGroups",
    )
    check_error(post_port(api, net["id"], security_groups=[str(uuid.uuid4())]), 404, "SecurityGroupNotFound")
    assert port_ids(api) == before


# -- delete ----------------------------------------------------------------------------------------


def test_delete_frees_the_address(api: httpx.Client, net: Json) -> None:
    port = create_port(api, net["id"], fixed_ips=[{"ip_address": "10.0.0.9"}])
    assert api.delete(f"/ports/{port['id']}").status_code == 204
    check_error(api.get(f"/ports/{port['id']}"), 404, "PortNotFound", port["id"])
    check_error(api.delete(f"/ports/{port['id']}"), 404, "PortNotFound")
    check_error(put_port(api, port["id"], name="x"), 404, "PortNotFound")
    assert holder_of(api, "10.0.0.9") == set()
    assert ips(create_port(api, net["id"], fixed_ips=[{"ip_address": "10.0.0.9"}])) == ["10.0.0.9"]


def test_router_ports_are_deleted_through_their_router_only(api: httpx.Client, net: Json) -> None:
    router = api.post("/routers", json={"router": {"name": "r"}}).json()["router"]
    resp = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": net["v4"]["id"]})
    assert resp.status_code == 200, resp.text
    port = api.get(f"/ports/{resp.json()['port_id']}").json()["port"]
    assert (port["device_owner"], port["device_id"]) == ("network:router_interface", router["id"])
    assert port["fixed_ips"] == [{"subnet_id": net["v4"]["id"], "ip_address": "10.0.0.1"}]  # the gateway
    assert port["security_groups"] == []
    check_error(api.delete(f"/ports/{port['id']}"), 409, "ServicePortInUse", "network:router_interface")
    assert api.get(f"/ports/{port['id']}").json()["port"] == port
    # A port that only claims a router owner, with no such router, is deleted like any other.
    orphan = create_port(api, net["id"], device_owner="network:router_interface", device_id=str(uuid.uuid4()))
    assert api.delete(f"/ports/{orphan['id']}").status_code == 204
    gateway_like = create_port(api, net["id"], device_owner="network:router_gateway")
    assert api.delete(f"/ports/{gateway_like['id']}").status_code == 204
    assert port_ids(api) == {port["id"]}


def test_unknown_or_malformed_ids_are_404(api: httpx.Client, net: Json) -> None:
    port = create_port(api, net["id"])
    for bad_id in ("not-a-uuid", str(uuid.uuid4()), "x" * 300, "%20", "%00", "a%00b"):
        check_error(api.get(f"/ports/{bad_id}"), 404, "PortNotFound", "could not be found")
        check_error(put_port(api, bad_id, name="x"), 404, "PortNotFound")
        check_error(api.delete(f"/ports/{bad_id}"), 404, "PortNotFound")
    check_error(post_port(api, str(uuid.uuid4())), 404, "NetworkNotFound")
    check_error(post_port(api, "not-a-uuid"), 404, "NetworkNotFound")
    assert api.get(f"/ports/{port['id']}").json()["port"] == port


# -- bulk ------------------------------------------------------------------------------------------


def test_bulk_create_returns_ports_in_order(api: httpx.Client, net: Json) -> None:
    bodies = [{"network_id": net["id"], "name": f"p{i}"} for i in range(6)]
    bodies[3]["fixed_ips"] = [{"ip_address": "10.0.0.3"}]
    resp = api.post("/ports", json={"ports": bodies})
    assert resp.status_code == 201, resp.text
    created = resp.json()["ports"]
    assert [p["name"] for p in created] == [f"p{i}" for i in range(6)]
    assert [ips(p)[0] for p in created] == ["10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.3", "10.0.0.6", "10.0.0.7"]
    assert [ips(p)[1:] for p in created] == [[f"2001:db8::{i}"] for i in (2, 3, 4)] + [[]] + [
        [f"2001:db8::{i}"] for i in (5, 6)
    ]
    for port in created:
        assert api.get(f"/ports/{port['id']}").json()["port"] == port


def _assert_unchanged(api: httpx.Client, before: set[str], free: list[str]) -> None:
    assert port_ids(api) == before
    for ip in free:
        assert holder_of(api, ip) == set(), ip


def test_bulk_create_is_all_or_nothing(api: httpx.Client, net: Json) -> None:
    nid = net["id"]
    held = create_port(api, nid, fixed_ips=[{"ip_address": "10.0.0.50"}])
    before = {held["id"]}
    wanted = ["10.0.0.60", "10.0.0.61", "2001:db8::60"]
    head = [{"network_id": nid, "fixed_ips": [{"ip_address": ip}]} for ip in wanted] + [{"network_id": nid}]
    failures: list[tuple[list[Json], int, str]] = [
        ([*head, {"network_id": nid, "fixed_ips": [{"ip_address": "10.0.0.50"}]}], 409, "IpAddressAlreadyAllocated"),
        ([*head, {"network_id": nid, "fixed_ips": [{"ip_address": "10.0.0.60"}]}], 409, "IpAddressAlreadyAllocated"),
        ([*head, {"network_id": nid, "binding:vnic_type": "macvtap"}], 400, "HTTPBadRequest"),
        ([*head, {"network_id": nid, "status": "ACTIVE"}], 400, "HTTPBadRequest"),
        ([*head, {"network_id": str(uuid.uuid4())}], 404, "NetworkNotFound"),
        ([*head, {"network_id": nid, "security_groups": [str(uuid.uuid4())]}], 404, "SecurityGroupNotFound"),
        ([*head, {"network_id": nid, "mac_address": held["mac_address"]}], 409, "MacAddressInUse"),
        ([*head, {"network_id": nid, "fixed_ips": [{"ip_address": "10.0.0.255"}]}], 400, "InvalidIpForSubnet"),
    ]
    for bodies, status, type_ in failures:
        check_error(api.post("/ports", json={"ports": bodies}), status, type_)
        _assert_unchanged(api, before, wanted)
    # A failure after addresses were already inserted for the earlier items (the last item wants two
    # addresses of a one-address subnet) rolls those back too.
    tiny = create_subnet(api, nid, "10.1.0.0/30")
    assert tiny["allocation_pools"] == [{"start": "10.1.0.2", "end": "10.1.0.2"}]
    greedy = {"network_id": nid, "fixed_ips": [{"subnet_id": tiny["id"]}, {"subnet_id": tiny["id"]}]}
    check_error(api.post("/ports", json={"ports": [*head, greedy]}), 409, "IpAddressGenerationFailure")
    _assert_unchanged(api, before, [*wanted, "10.1.0.2", "10.0.0.2"])
    # The same head succeeds on its own, with exactly the addresses it asked for.
    resp = api.post("/ports", json={"ports": head})
    assert resp.status_code == 201, resp.text
    assert [ips(p) for p in resp.json()["ports"][:3]] == [[ip] for ip in wanted]


def test_bulk_that_exhausts_the_pool_creates_nothing(api: httpx.Client, small: Json) -> None:
    check_error(
        api.post("/ports", json={"ports": [{"network_id": small["id"]} for _ in range(6)]}),
        409,
        "IpAddressGenerationFailure",
    )
    _assert_unchanged(api, set(), [f"10.0.0.{h}" for h in range(2, 7)])
    resp = api.post("/ports", json={"ports": [{"network_id": small["id"]} for _ in range(5)]})
    assert resp.status_code == 201, resp.text
    assert sorted(ips(p)[0] for p in resp.json()["ports"]) == [f"10.0.0.{h}" for h in range(2, 7)]


# -- lists and visibility --------------------------------------------------------------------------


def test_list_filters_and_fields(api: httpx.Client, net: Json) -> None:
    a = create_port(api, net["id"], name="a", device_owner="compute:nova")
    b = create_port(api, net["id"], name="b", fixed_ips=[{"subnet_id": net["v6"]["id"]}])
    assert port_ids(api, fixed_ips="ip_address=10.0.0.2") == {a["id"]}
    assert port_ids(api, fixed_ips=f"subnet_id={net['v6']['id']}") == {a["id"], b["id"]}
    assert port_ids(api, fixed_ips=f"subnet_id={net['v4']['id']}") == {a["id"]}
    assert port_ids(api, fixed_ips="ip_address_substr=2001:db8::3") == {b["id"]}
    assert port_ids(api, device_owner="compute:nova") == {a["id"]}
    assert port_ids(api, mac_address=b["mac_address"].upper()) == {b["id"]}
    assert port_ids(api, network_id=net["id"], name="b") == {b["id"]}
    check_error(api.get("/ports", params={"fixed_ips": "mask=24"}), 400, "InvalidInput", "fixed_ips")
    resp = api.get("/ports", params={"fields": ["id", "fixed_ips", "name"], "name": "b"})
    assert resp.json()["ports"] == [{"id": b["id"], "fixed_ips": b["fixed_ips"], "name": "b"}]
    full = api.get("/ports", params={"name": "a"}).json()["ports"]
    assert full == [a]


def test_projects_and_shared_networks(users: dict[str, httpx.Client]) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    alice_net = create_network(alice)
    create_subnet(alice, alice_net["id"], "10.0.0.0/24")
    alice_port = create_port(alice, alice_net["id"])
    assert alice_port["project_id"] == "alice"
    assert alice_port["security_groups"] == [default_group(alice, "alice")["id"]]

    check_error(bob.get(f"/ports/{alice_port['id']}"), 404, "PortNotFound")
    check_error(put_port(bob, alice_port["id"], name="x"), 404, "PortNotFound")
    check_error(bob.delete(f"/ports/{alice_port['id']}"), 404, "PortNotFound")
    check_error(post_port(bob, alice_net["id"]), 404, "NetworkNotFound")
    assert port_ids(bob) == set()

    shared = create_network(admin, shared=True)
    create_subnet(admin, shared["id"], "192.168.0.0/24")
    bob_port = create_port(bob, shared["id"])
    assert bob_port["project_id"] == "bob"
    assert bob_port["security_groups"] == [default_group(bob, "bob")["id"]]
    assert ips(bob_port) == ["192.168.0.2"]
    # On a network of another project only admins choose MACs or addresses (Neutron's policy);
    # asking for a subnet is fine.
    check_error(post_port(bob, shared["id"], mac_address="fa:16:3e:00:00:02"), 403, "PolicyNotAuthorized")
    check_error(post_port(bob, shared["id"], fixed_ips=[{"ip_address": "192.168.0.1"}]), 403, "PolicyNotAuthorized")
    check_error(put_port(bob, bob_port["id"], fixed_ips=[{"ip_address": "192.168.0.50"}]), 403, "PolicyNotAuthorized")
    check_error(post_port(bob, shared["id"], project_id="alice"), 403, "PolicyNotAuthorized")
    assert port_ids(bob) == {bob_port["id"]}
    assert bob.get(f"/ports/{bob_port['id']}").json()["port"] == bob_port
    by_subnet = create_port(bob, shared["id"], fixed_ips=[{"subnet_id": bob_port["fixed_ips"][0]["subnet_id"]}])
    assert ips(by_subnet) == ["192.168.0.3"]
    kept = put_port(bob, bob_port["id"], fixed_ips=bob_port["fixed_ips"], name="kept")
    assert kept.status_code == 200, kept.text
    assert kept.json()["port"]["fixed_ips"] == bob_port["fixed_ips"]
    assert ips(create_port(admin, shared["id"], fixed_ips=[{"ip_address": "192.168.0.50"}])) == ["192.168.0.50"]
    assert port_ids(bob) == {bob_port["id"], by_subnet["id"]}
    assert port_ids(alice) == {alice_port["id"]}
    assert len(port_ids(admin)) == 4
    # Bob's own security groups are usable on his port, alice's are not.
    check_error(
        put_port(bob, bob_port["id"], security_groups=[default_group(alice, "alice")["id"]]),
        404,
        "SecurityGroupNotFound",
    )

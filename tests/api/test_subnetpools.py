"""Subnet pools and address scopes through the live API on both backends: pools, subnets allocated from them,
quotas, prefix changes, scopes that never overlap; and what Neutron refuses, refused alike."""

from __future__ import annotations

import ipaddress
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.api import check_error, create, create_network

Json = dict[str, Any]


def pool(client: httpx.Client, *prefixes: str, **attrs: Any) -> Json:
    return create(client, "subnetpools", "subnetpool", prefixes=list(prefixes), **attrs)


def scope(client: httpx.Client, version: int = 4, **attrs: Any) -> Json:
    return create(client, "address-scopes", "address_scope", ip_version=version, **attrs)


def from_pool(client: httpx.Client, network_id: str, **attrs: Any) -> httpx.Response:
    return client.post("/subnets", json={"subnet": {"network_id": network_id, "ip_version": 4, **attrs}})


def subnet_from(client: httpx.Client, network_id: str, **attrs: Any) -> Json:
    r = from_pool(client, network_id, **attrs)
    assert r.status_code == 201, r.text
    return dict(r.json()["subnet"])


@pytest.fixture
def net(api: httpx.Client) -> Json:
    return create_network(api, name="net")


def test_pool_shape_and_defaults(api: httpx.Client) -> None:
    p = pool(api, "10.101.0.0/24", "10.100.0.0/24", "10.100.0.128/25", name="p", tags=["a"])
    assert p["prefixes"] == ["10.100.0.0/24", "10.101.0.0/24"]  # compacted, sorted
    assert (p["ip_version"], p["min_prefixlen"], p["max_prefixlen"], p["default_prefixlen"]) == (4, 8, 32, 8)
    assert (p["default_quota"], p["address_scope_id"], p["shared"], p["is_default"]) == (None, None, False, False)
    assert p["tags"] == ["a"] and p["revision_number"] == 0 and p["project_id"] == p["tenant_id"] == "admin"
    assert api.get(f"/subnetpools/{p['id']}").json()["subnetpool"] == p
    assert [x["id"] for x in api.get("/subnetpools", params={"name": "p"}).json()["subnetpools"]] == [p["id"]]
    six = pool(api, "fd00::/48")
    assert (six["ip_version"], six["min_prefixlen"], six["max_prefixlen"], six["default_prefixlen"]) == (6, 64, 128, 64)
    r = api.put(f"/subnetpools/{p['id']}", json={"subnetpool": {"name": "q", "default_prefixlen": 26}})
    assert r.status_code == 200, r.text
    assert (r.json()["subnetpool"]["name"], r.json()["subnetpool"]["default_prefixlen"]) == ("q", 26)
    assert r.json()["subnetpool"]["revision_number"] == 1


def test_subnets_allocated_best_fit_and_released(api: httpx.Client, net: Json) -> None:
    p = pool(api, "10.100.0.0/24", default_prefixlen=26, min_prefixlen=24, max_prefixlen=30)
    a = subnet_from(api, net["id"], subnetpool_id=p["id"], prefixlen=28)
    assert (a["cidr"], a["gateway_ip"], a["subnetpool_id"]) == ("10.100.0.0/28", "10.100.0.1", p["id"])
    assert a["allocation_pools"] == [{"start": "10.100.0.2", "end": "10.100.0.14"}]
    b = subnet_from(api, net["id"], subnetpool_id=p["id"])  # the pool's default, /26
    assert b["cidr"] == "10.100.0.64/26"  # (Neutron's best fit: the smallest free block that holds it)
    c = subnet_from(api, net["id"], subnetpool_id=p["id"], prefixlen=28)
    assert c["cidr"] == "10.100.0.16/28"
    d = subnet_from(api, net["id"], subnetpool_id=p["id"], cidr="10.100.0.128/25")
    assert d["cidr"] == "10.100.0.128/25"
    assert {s["id"] for s in api.get("/subnets", params={"subnetpool_id": p["id"]}).json()["subnets"]} == {
        a["id"], b["id"], c["id"], d["id"]}  # fmt: skip
    check_error(from_pool(api, net["id"], subnetpool_id=p["id"], cidr="10.100.0.16/28"), 409, "SubnetAllocationError",
                "Cannot allocate requested subnet from the available set of prefixes")  # fmt: skip
    check_error(from_pool(api, net["id"], subnetpool_id=p["id"], cidr="10.99.0.0/28"), 409, "SubnetAllocationError")
    check_error(from_pool(api, net["id"], subnetpool_id=p["id"], prefixlen=25), 409, "SubnetAllocationError",
                "Insufficient prefix space to allocate subnet size /25")  # fmt: skip
    # Deleting a subnet gives its prefix back; a pool with allocations cannot go.
    check_error(api.delete(f"/subnetpools/{p['id']}"), 400, "SubnetPoolDeleteError", "existing allocations")
    assert api.delete(f"/subnets/{c['id']}").status_code == 204
    assert subnet_from(api, net["id"], subnetpool_id=p["id"], prefixlen=28)["cidr"] == "10.100.0.16/28"
    for s in api.get("/subnets", params={"subnetpool_id": p["id"]}).json()["subnets"]:
        assert api.delete(f"/subnets/{s['id']}").status_code == 204
    assert api.delete(f"/subnetpools/{p['id']}").status_code == 204
    check_error(api.get(f"/subnetpools/{p['id']}"), 404, "SubnetPoolNotFound", "Subnet pool")


def test_prefix_lengths_and_requests_refused_as_neutron_does(api: httpx.Client, net: Json) -> None:
    p = pool(api, "10.100.0.0/16", min_prefixlen=20, max_prefixlen=28, default_prefixlen=24)
    pid = p["id"]
    check_error(from_pool(api, net["id"], subnetpool_id=pid, prefixlen=29), 400, "MaxPrefixSubnetAllocationError",
                "prefix length 29, maximum allowed prefix is 28")  # fmt: skip
    check_error(from_pool(api, net["id"], subnetpool_id=pid, prefixlen=16), 400, "MinPrefixSubnetAllocationError",
                "minimum allowed prefix is 20")  # fmt: skip
    assert from_pool(api, net["id"], subnetpool_id=pid, prefixlen=129).status_code == 400
    assert from_pool(api, net["id"], subnetpool_id=pid, prefixlen=-1).status_code == 400
    check_error(from_pool(api, net["id"], subnetpool_id=pid, prefixlen=24, cidr="10.100.0.0/24"), 400, "BadRequest",
                "cidr and prefixlen must not be supplied together")  # fmt: skip
    check_error(from_pool(api, net["id"], subnetpool_id=pid, ip_version=6), 400, "BadRequest",
                "Cannot allocate IPv6 subnet from IPv4 subnet pool")  # fmt: skip
    check_error(
        from_pool(api, net["id"]), 400, "BadRequest", "A cidr must be specified in the absence of a subnet pool"
    )
    check_error(api.post("/subnets", json={"subnet": {"network_id": net["id"]}}), 400, "BadRequest",
                "ip_version must be specified in the absence of cidr and subnetpool_id")  # fmt: skip
    check_error(from_pool(api, net["id"], use_default_subnetpool=True), 400, "BadRequest",
                "No default subnetpool found for IPv4")  # fmt: skip
    check_error(from_pool(api, net["id"], subnetpool_id="00000000-0000-0000-0000-000000000000"), 404,
                "SubnetPoolNotFound")  # fmt: skip
    bad = {"subnetpool": {"prefixes": []}}
    check_error(api.post("/subnetpools", json=bad), 400, "EmptySubnetPoolPrefixList")
    mixed = {"subnetpool": {"prefixes": ["10.0.0.0/8", "fd00::/8"]}}
    check_error(api.post("/subnetpools", json=mixed), 400, "PrefixVersionMismatch")
    for attrs, text in (
        ({"min_prefixlen": 24, "max_prefixlen": 20}, "min_prefixlen=24, max_prefixlen=20"),
        ({"max_prefixlen": 33}, "max_prefixlen=33, ip_version_max=32"),
        ({"min_prefixlen": 20, "default_prefixlen": 16}, "default_prefixlen=16, min_prefixlen=20"),
    ):
        body = {"subnetpool": {"prefixes": ["10.0.0.0/8"], **attrs}}
        check_error(api.post("/subnetpools", json=body), 400, "IllegalSubnetPoolPrefixBounds", text)  # fmt: skip
    assert api.post("/subnetpools", json={"subnetpool": {"prefixes": ["10.0.0.1/8"]}}).status_code == 400
    assert api.post("/subnetpools", json={"subnetpool": {"prefixes": ["bogus"]}}).status_code == 400


def test_default_pool(api: httpx.Client, users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    check_error(alice.post("/subnetpools", json={"subnetpool": {"prefixes": ["10.8.0.0/16"], "is_default": True}}),
                403, "PolicyNotAuthorized", "create_subnetpool:is_default")  # fmt: skip
    d = pool(admin, "10.8.0.0/16", is_default=True, shared=True, default_prefixlen=24)
    check_error(admin.post("/subnetpools", json={"subnetpool": {"prefixes": ["10.9.0.0/16"], "is_default": True}}),
                400, "InvalidInput", "Only one default may exist per IP family")  # fmt: skip
    net = create_network(alice, name="a")
    s = subnet_from(alice, net["id"], use_default_subnetpool=True)
    assert (s["cidr"], s["subnetpool_id"], s["project_id"]) == ("10.8.0.0/24", d["id"], "alice")
    assert pool(admin, "fd00:8::/48", is_default=True)["is_default"]  # (one per IP version)


def test_quota_counts_addresses_per_project(users: dict[str, httpx.Client]) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    p = pool(admin, "10.20.0.0/16", shared=True, default_quota=64, default_prefixlen=27)
    na, nb = create_network(alice), create_network(bob)
    subnet_from(alice, na["id"], subnetpool_id=p["id"])  # 32
    subnet_from(alice, na["id"], subnetpool_id=p["id"], prefixlen=28)  # 48
    check_error(from_pool(alice, na["id"], subnetpool_id=p["id"], prefixlen=27), 409, "SubnetPoolQuotaExceeded",
                "Per-tenant subnet pool prefix quota exceeded")  # fmt: skip
    subnet_from(alice, na["id"], subnetpool_id=p["id"], prefixlen=28)  # 64: exactly the quota
    subnet_from(bob, nb["id"], subnetpool_id=p["id"])  # another project counts for itself


def test_prefixes_grow_only_and_prefix_ops(api: httpx.Client, net: Json) -> None:
    p = pool(api, "10.30.0.0/24", default_prefixlen=26)
    pid = p["id"]
    check_error(api.put(f"/subnetpools/{pid}", json={"subnetpool": {"prefixes": ["10.31.0.0/24"]}}), 400,
                "IllegalSubnetPoolPrefixUpdate", "Existing prefixes must be a subset of the new prefixes")  # fmt: skip
    r = api.put(f"/subnetpools/{pid}", json={"subnetpool": {"prefixes": ["10.30.0.0/24", "10.30.1.0/24"]}})
    assert r.json()["subnetpool"]["prefixes"] == ["10.30.0.0/23"], r.text
    r = api.put(f"/subnetpools/{pid}/add_prefixes", json={"prefixes": ["10.40.0.0/24"]})
    assert r.status_code == 200 and r.json() == {"prefixes": ["10.30.0.0/23", "10.40.0.0/24"]}, r.text
    s = subnet_from(api, net["id"], subnetpool_id=pid, cidr="10.40.0.0/26")
    check_error(api.put(f"/subnetpools/{pid}/remove_prefixes", json={"prefixes": ["10.40.0.0/24"]}), 400,
                "IllegalSubnetPoolUpdate")  # fmt: skip
    r = api.put(f"/subnetpools/{pid}/remove_prefixes", json={"prefixes": ["10.30.1.0/24"]})
    assert r.json() == {"prefixes": ["10.30.0.0/24", "10.40.0.0/24"]}, r.text
    assert api.get(f"/subnetpools/{pid}").json()["subnetpool"]["prefixes"] == ["10.30.0.0/24", "10.40.0.0/24"]
    check_error(api.put(f"/subnetpools/{pid}/add_prefixes", json={"prefixes": ["fd00::/64"]}), 400,
                "PrefixVersionMismatch")  # fmt: skip
    assert api.delete(f"/subnets/{s['id']}").status_code == 204


def test_address_scope_shape_and_no_overlap(api: httpx.Client) -> None:
    s = scope(api, name="s")
    assert {k: s[k] for k in ("name", "ip_version", "shared", "project_id")} == {
        "name": "s", "ip_version": 4, "shared": False, "project_id": "admin"}  # fmt: skip
    assert api.get(f"/address-scopes/{s['id']}").json()["address_scope"] == s
    a = pool(api, "10.50.0.0/16", address_scope_id=s["id"])
    assert a["address_scope_id"] == s["id"]
    check_error(api.post("/subnetpools", json={"subnetpool": {"prefixes": ["10.50.128.0/24"],
                "address_scope_id": s["id"]}}), 409, "AddressScopePrefixConflict",
                "subnetpools within an address scope must have unique prefixes")  # fmt: skip
    b = pool(api, "10.50.128.0/24")  # outside the scope it may overlap
    check_error(api.put(f"/subnetpools/{b['id']}", json={"subnetpool": {"address_scope_id": s["id"]}}), 409,
                "AddressScopePrefixConflict")  # fmt: skip
    c = pool(api, "10.60.0.0/16", address_scope_id=s["id"])
    check_error(api.put(f"/subnetpools/{c['id']}/add_prefixes", json={"prefixes": ["10.50.7.0/24"]}), 409,
                "AddressScopePrefixConflict")  # fmt: skip
    check_error(api.put(f"/subnetpools/{c['id']}", json={"subnetpool": {"prefixes": ["10.60.0.0/16",
                "10.50.0.0/15"]}}), 409, "AddressScopePrefixConflict")  # fmt: skip
    six = scope(api, 6)
    body = {"subnetpool": {"prefixes": ["10.70.0.0/16"], "address_scope_id": six["id"]}}
    check_error(api.post("/subnetpools", json=body), 400, "IllegalSubnetPoolIpVersionAssociationToAddressScope")
    check_error(api.delete(f"/address-scopes/{s['id']}"), 409, "AddressScopeInUse")
    for p in (a, c):
        api.put(f"/subnetpools/{p['id']}", json={"subnetpool": {"address_scope_id": None}})
    assert api.delete(f"/address-scopes/{s['id']}").status_code == 204


def test_hostile_other_projects_pools_and_scopes(users: dict[str, httpx.Client]) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    mine = pool(alice, "10.80.0.0/16", default_prefixlen=24)
    bob_net = create_network(bob)
    # Another project's pool that is not shared: not there for bob (Neutron: SubnetPoolNotFound).
    check_error(from_pool(bob, bob_net["id"], subnetpool_id=mine["id"]), 404, "SubnetPoolNotFound")
    check_error(from_pool(bob, bob_net["id"], subnetpool_id=mine["id"], cidr="10.80.1.0/24"), 404,
                "SubnetPoolNotFound")  # fmt: skip
    check_error(bob.get(f"/subnetpools/{mine['id']}"), 404, "SubnetPoolNotFound")
    check_error(bob.put(f"/subnetpools/{mine['id']}/add_prefixes", json={"prefixes": ["10.81.0.0/16"]}), 404,
                "SubnetPoolNotFound")  # fmt: skip
    assert mine["id"] not in {p["id"] for p in bob.get("/subnetpools").json()["subnetpools"]}
    # An address scope of another project: invisible (404); shared but not one's own: refused (400).
    alices = scope(alice)
    check_error(bob.post("/subnetpools", json={"subnetpool": {"prefixes": ["10.90.0.0/16"],
                "address_scope_id": alices["id"]}}), 404, "AddressScopeNotFound")  # fmt: skip
    shared = scope(admin, shared=True)
    in_shared = pool(bob, "10.91.0.0/16", address_scope_id=shared["id"])
    assert in_shared["address_scope_id"] == shared["id"]
    # ...and a pool in a shared scope of another project changes no more (Neutron: IllegalSubnetPoolUpdate).
    check_error(bob.put(f"/subnetpools/{in_shared['id']}", json={"subnetpool": {"name": "x"}}), 400,
                "IllegalSubnetPoolUpdate", "associated with shared address scope")  # fmt: skip
    check_error(bob.put(f"/subnetpools/{in_shared['id']}/add_prefixes", json={"prefixes": ["10.94.0.0/16"]}), 400,
                "IllegalSubnetPoolUpdate")  # fmt: skip
    check_error(bob.post("/address-scopes", json={"address_scope": {"ip_version": 4, "shared": True}}), 403,
                "PolicyNotAuthorized", "create_address_scope:shared")  # fmt: skip
    check_error(bob.post("/subnetpools", json={"subnetpool": {"prefixes": ["10.92.0.0/16"], "shared": True}}), 403,
                "PolicyNotAuthorized", "create_subnetpool:shared")  # fmt: skip
    check_error(bob.delete(f"/address-scopes/{shared['id']}"), 403, "PolicyNotAuthorized")
    # A shared pool serves every project; its owner alone changes it.
    open_pool = pool(admin, "10.93.0.0/16", shared=True, default_prefixlen=24)
    assert subnet_from(bob, bob_net["id"], subnetpool_id=open_pool["id"])["cidr"] == "10.93.0.0/24"
    check_error(bob.put(f"/subnetpools/{open_pool['id']}", json={"subnetpool": {"name": "x"}}), 403,
                "PolicyNotAuthorized")  # fmt: skip


def test_concurrent_allocations_never_share_a_prefix(api: httpx.Client) -> None:
    p = pool(api, "10.110.0.0/22", default_prefixlen=28)
    nets = [create_network(api, name=f"n{i}") for i in range(4)]

    def take(i: int) -> httpx.Response:
        return from_pool(api, nets[i % 4]["id"], subnetpool_id=p["id"])

    with ThreadPoolExecutor(8) as pool_:
        responses = list(pool_.map(take, range(32)))
    cidrs = [r.json()["subnet"]["cidr"] for r in responses if r.status_code == 201]
    assert all(r.status_code in (201, 409) for r in responses), [r.text for r in responses if r.status_code >= 500]
    assert len(cidrs) == len(set(cidrs)) >= 16
    nets_ = [ipaddress.ip_network(c) for c in cidrs]
    assert not any(a.overlaps(b) for i, a in enumerate(nets_) for b in nets_[i + 1 :])


def test_a_network_deleted_gives_its_prefixes_back(api: httpx.Client) -> None:
    p = pool(api, "10.120.0.0/24", default_prefixlen=25)
    net = create_network(api)
    assert [subnet_from(api, net["id"], subnetpool_id=p["id"])["cidr"] for _ in "ab"] == [
        "10.120.0.0/25", "10.120.0.128/25"]  # fmt: skip
    check_error(from_pool(api, create_network(api)["id"], subnetpool_id=p["id"]), 409, "SubnetAllocationError")
    assert api.delete(f"/networks/{net['id']}").status_code == 204
    assert subnet_from(api, create_network(api)["id"], subnetpool_id=p["id"])["cidr"] == "10.120.0.0/25"


def test_a_networks_scope_and_its_affinity(api: httpx.Client) -> None:
    s = scope(api)
    scoped = pool(api, "10.130.0.0/16", address_scope_id=s["id"], default_prefixlen=24)
    plain = pool(api, "10.131.0.0/16", default_prefixlen=24)
    net = create_network(api)
    assert (net["ipv4_address_scope"], net["ipv6_address_scope"]) == (None, None)
    subnet_from(api, net["id"], subnetpool_id=scoped["id"])
    got = api.get(f"/networks/{net['id']}").json()["network"]
    assert (got["ipv4_address_scope"], got["ipv6_address_scope"]) == (s["id"], None)
    # Neutron: one IP version's subnets on a network share one address scope.
    for body in ({"subnetpool_id": plain["id"]}, {"cidr": "10.140.0.0/24"}):
        check_error(from_pool(api, net["id"], **body), 400, "NetworkAddressScopeAffinityError")
    assert subnet_from(api, net["id"], subnetpool_id=scoped["id"])["cidr"] == "10.130.1.0/24"
    # A pool whose subnets share a network with another pool's cannot change scope alone.
    other = create_network(api)
    subnet_from(api, other["id"], subnetpool_id=plain["id"])
    subnet_from(api, other["id"], cidr="10.141.0.0/24")
    r = api.put(f"/subnetpools/{plain['id']}", json={"subnetpool": {"address_scope_id": s["id"]}})
    check_error(r, 400, "NetworkAddressScopeAffinityError")

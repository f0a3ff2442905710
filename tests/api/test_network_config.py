"""A network's `config` (ipv4.nat.address, ipv6.nat.address, user.*) and an external network's
`cloudnet:routes`, against the live server (cloudnet extension; LXD's keys, reference §1.7)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.api.test_forwards import (
    Site,
    build_site,
    create,
    error,
    events_since,
    post,
    revision,
    url,
)

Json = dict[str, Any]


def network(api: httpx.Client, network_id: str) -> Json:
    r = api.get(f"/networks/{network_id}")
    assert r.status_code == 200, r.text
    return dict(r.json()["network"])


def put_config(api: httpx.Client, network_id: str, config: Any) -> httpx.Response:
    return api.put(f"/networks/{network_id}", json={"network": {"config": config}})


def set_config(api: httpx.Client, network_id: str, config: Json) -> Json:
    r = put_config(api, network_id, config)
    assert r.status_code == 200, r.text
    return dict(r.json()["network"]["config"])


@pytest.fixture
def site(api: httpx.Client) -> Site:
    """`private` and `other` behind the router, `other` with a forward and SNAT addresses; a port on the
    uplink; `isolated` without uplink."""
    site = build_site(api)
    other = site.network("other", "10.1.0.0/24", "fd01::/64")
    post(api, "other", {"listen_address": "192.0.2.50"})
    set_config(api, other["id"], {"ipv4.nat.address": "192.0.2.60", "ipv6.nat.address": "2001:db8::60"})
    create(api, "ports", "port", network_id=site.public["id"], fixed_ips=[{"ip_address": "192.0.2.30"}])
    site.network("isolated", "10.2.0.0/24", uplink=False)
    return site


# -- keys and values --------------------------------------------------------------------------------------


def test_new_networks_have_empty_config_and_routes(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    assert (net["config"], net["cloudnet:routes"]) == ({}, [])
    assert network(api, net["id"])["config"] == {}
    assert api.get("/networks", params={"id": net["id"]}).json()["networks"][0]["config"] == {}


def test_user_keys_merge_and_empty_value_removes(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n", config={"user.a": "1", "user.empty": ""})
    assert net["config"] == {"user.a": "1"}  # empty values are not stored
    assert set_config(api, net["id"], {"user.b": "two words = ok"}) == {"user.a": "1", "user.b": "two words = ok"}
    assert set_config(api, net["id"], {"user.a": ""}) == {"user.b": "two words = ok"}
    assert set_config(api, net["id"], {"user.never-set": ""}) == {"user.b": "two words = ok"}
    assert set_config(api, net["id"], {}) == {"user.b": "two words = ok"}
    # Other attributes leave config alone.
    r = api.put(f"/networks/{net['id']}", json={"network": {"name": "renamed"}})
    assert r.status_code == 200, r.text
    assert network(api, net["id"])["config"] == {"user.b": "two words = ok"}


def test_nat_addresses_from_uplink_subnets_and_routes(api: httpx.Client, site: Site) -> None:
    net_id = site.networks["private"]["id"]
    mark = revision(api)
    assert set_config(api, net_id, {"ipv4.nat.address": "192.0.2.9"}) == {"ipv4.nat.address": "192.0.2.9"}
    assert ("network", "update", net_id) in events_since(api, mark)
    # Canonical form; the IPv6 key merges with the IPv4 one.
    assert set_config(api, net_id, {"ipv6.nat.address": " 2001:DB8:0::99 "}) == {
        "ipv4.nat.address": "192.0.2.9",
        "ipv6.nat.address": "2001:db8::99",
    }
    # Addresses routed to the uplink (cloudnet:routes) are fine; IPv4-mapped IPv6 is IPv4.
    assert set_config(api, net_id, {"ipv4.nat.address": "198.51.100.9"})["ipv4.nat.address"] == "198.51.100.9"
    assert set_config(api, net_id, {"ipv4.nat.address": "::ffff:192.0.2.42"})["ipv4.nat.address"] == "192.0.2.42"
    assert set_config(api, net_id, {"ipv6.nat.address": "2001:db8:100::9"})["ipv6.nat.address"] == "2001:db8:100::9"
    # Setting its own address again is no conflict with itself.
    assert set_config(api, net_id, {"ipv4.nat.address": "192.0.2.42"})["ipv4.nat.address"] == "192.0.2.42"
    assert set_config(api, net_id, {"ipv4.nat.address": "", "ipv6.nat.address": ""}) == {}
    assert network(api, net_id)["config"] == {}


def test_a_network_may_be_created_with_user_keys_but_not_a_nat_address(api: httpx.Client, site: Site) -> None:
    r = api.post("/networks", json={"network": {"name": "new", "config": {"ipv4.nat.address": "192.0.2.9"}}})
    error(r, 400, "uplink")
    assert [n["name"] for n in api.get("/networks", params={"name": "new"}).json()["networks"]] == []


def _bad_cases(gw4: str, gw6: str) -> list[tuple[str, str, Any, int, str]]:
    """(name, network, config, status, message fragment)."""
    return [
        ("unknown key", "private", {"bogus": "1"}, 400, 'Invalid option "bogus"'),
        ("a forward's key", "private", {"target_address": "10.0.0.5"}, 400, 'Invalid option "target_address"'),
        ("LXD key cloudnet lacks", "private", {"ipv4.nat": "true"}, 400, 'Invalid option "ipv4.nat"'),
        ("integer value", "private", {"user.a": 1}, 400, "expected a string"),
        ("null value", "private", {"user.a": None}, 400, "expected a string"),
        ("integer address", "private", {"ipv4.nat.address": 5}, 400, "expected a string"),
        ("config not a map", "private", ["user.a"], 400, "config"),
        ("IPv6 for ipv4.nat.address", "private", {"ipv4.nat.address": "2001:db8::9"}, 400, "not an IPv4 address"),
        ("IPv4 for ipv6.nat.address", "private", {"ipv6.nat.address": "192.0.2.9"}, 400, "not an IPv6 address"),
        ("not an address", "private", {"ipv4.nat.address": "nope"}, 400, "is not an IP address"),
        ("IPv6 zone", "private", {"ipv6.nat.address": "2001:db8::9%eth0"}, 400, "is not an IP address"),
        ("a CIDR", "private", {"ipv4.nat.address": "192.0.2.9/32"}, 400, "is not an IP address"),
        ("unspecified", "private", {"ipv4.nat.address": "0.0.0.0"}, 400, 'Cannot use unspecified address: "0.0.0.0"'),
        ("outside the uplink", "private", {"ipv4.nat.address": "203.0.113.9"}, 400,
         'Uplink network does not contain "203.0.113.9" in its routes'),
        ("outside the uplink (IPv6)", "private", {"ipv6.nat.address": "2001:db8:200::9"}, 400,
         'Uplink network does not contain "2001:db8:200::9" in its routes'),
        ("an internal address", "private", {"ipv4.nat.address": "10.0.0.9"}, 400,
         'Uplink network does not contain "10.0.0.9" in its routes'),
        ("uplink subnet gateway", "private", {"ipv4.nat.address": "192.0.2.1"}, 400,
         'SNAT address "192.0.2.1" is already in use'),
        ("uplink IPv6 subnet gateway", "private", {"ipv6.nat.address": "2001:db8::1"}, 400,
         'SNAT address "2001:db8::1" is already in use'),
        ("router gateway port", "private", {"ipv4.nat.address": gw4}, 400, f'SNAT address "{gw4}" is already in use'),
        ("router gateway port (IPv6)", "private", {"ipv6.nat.address": gw6}, 400,
         f'SNAT address "{gw6}" is already in use'),
        ("a port on the uplink", "private", {"ipv4.nat.address": "192.0.2.30"}, 400,
         'SNAT address "192.0.2.30" is already in use'),
        ("another network's forward", "private", {"ipv4.nat.address": "192.0.2.50"}, 400,
         'SNAT address "192.0.2.50" overlaps with another network or NIC'),
        ("another network's SNAT address", "private", {"ipv4.nat.address": "192.0.2.60"}, 400,
         'SNAT address "192.0.2.60" overlaps with another network or NIC'),
        ("another network's IPv6 SNAT address", "private", {"ipv6.nat.address": "2001:DB8::60"}, 400,
         'SNAT address "2001:db8::60" overlaps with another network or NIC'),
        ("network without uplink", "isolated", {"ipv4.nat.address": "192.0.2.9"}, 400, "has no uplink"),
        ("a bad key among good ones", "private", {"user.ok": "1", "ipv4.nat.address": "192.0.2.9", "x": "1"}, 400,
         'Invalid option "x"'),
        ("a bad address among good keys", "private", {"user.ok": "1", "ipv4.nat.address": "192.0.2.50"}, 400,
         "overlaps with another network or NIC"),
    ]  # fmt: skip


def test_bad_config_is_refused_and_changes_nothing(api: httpx.Client, site: Site) -> None:
    set_config(api, site.networks["private"]["id"], {"user.keep": "me", "ipv4.nat.address": "192.0.2.9"})
    gw4, gw6 = sorted(site.gateway_ips, key=lambda a: ":" in a)
    failures: list[str] = []
    for name, net_name, config, status, message in _bad_cases(gw4, gw6):
        net_id = site.networks[net_name]["id"]
        before = {n["id"]: n for n in api.get("/networks").json()["networks"]}
        mark = revision(api)
        r = put_config(api, net_id, config)
        got = r.json().get("NeutronError", {}).get("message", r.text) if r.status_code >= 400 else r.text
        if r.status_code != status or message not in got:
            failures.append(f"{name}: expected {status} with {message!r}, got {r.status_code} {got!r}")
        if events_since(api, mark):
            failures.append(f"{name}: emitted events")
        if {n["id"]: n for n in api.get("/networks").json()["networks"]} != before:
            failures.append(f"{name}: changed a network")
    assert not failures, "\n".join(failures)
    assert network(api, site.networks["private"]["id"])["config"] == {
        "user.keep": "me",
        "ipv4.nat.address": "192.0.2.9",
    }


def test_bad_config_at_create(api: httpx.Client, site: Site) -> None:
    for config, message in (
        ({"bogus": "1"}, 'Invalid option "bogus"'),
        ({"user.a": 1}, "expected a string"),
        ({"ipv4.nat.address": "2001:db8::9"}, "not an IPv4 address"),
        ({"ipv6.nat.address": "nope"}, "is not an IP address"),
    ):
        error(api.post("/networks", json={"network": {"name": "new", "config": config}}), 400, message)
    assert api.get("/networks", params={"name": "new"}).json()["networks"] == []


# -- SNAT addresses and forwards ------------------------------------------------------------------------------


def test_own_forwards_may_listen_on_own_snat_address(api: httpx.Client, site: Site) -> None:
    private, other = site.networks["private"]["id"], site.networks["other"]["id"]
    set_config(api, private, {"ipv4.nat.address": "192.0.2.40", "ipv6.nat.address": "2001:db8::40"})
    post(api, "private", {"listen_address": "192.0.2.40", "config": {"target_address": "10.0.0.5"}})
    post(api, "private", {"listen_address": "2001:db8::40"})
    # ... but nobody else's.
    error(api.post(url("other"), json={"listen_address": "2001:DB8::40"}), 400,
          'Listen address "2001:db8::40" overlaps with another network or NIC')  # fmt: skip
    error(put_config(api, other, {"ipv4.nat.address": "192.0.2.40"}), 400,
          'SNAT address "192.0.2.40" overlaps with another network or NIC')  # fmt: skip

    # The other way round: a SNAT address may be one of the network's own forwards, not another's.
    post(api, "private", {"listen_address": "192.0.2.46"})
    assert set_config(api, private, {"ipv4.nat.address": "192.0.2.46"})["ipv4.nat.address"] == "192.0.2.46"
    error(put_config(api, private, {"ipv4.nat.address": "192.0.2.50"}), 400, "overlaps with another network or NIC")

    # Released addresses can be taken by another network.
    set_config(api, private, {"ipv6.nat.address": ""})
    assert api.delete(url("private", "2001:db8::40")).status_code == 204
    assert set_config(api, other, {"ipv6.nat.address": "2001:db8::40"})["ipv6.nat.address"] == "2001:db8::40"


def test_snat_address_of_a_deleted_network_is_free(api: httpx.Client, site: Site) -> None:
    other = site.networks["other"]["id"]
    r = api.delete(f"/networks/{other}/forwards/192.0.2.50")
    assert r.status_code == 204, r.text
    detach_path = f"/routers/{site.router['id']}/remove_router_interface"
    # Its SNAT addresses keep the network's router link (tests/api/test_forward_lifecycle.py): released first.
    r = api.put(detach_path, json={"subnet_id": site.subnets["other"][0]["id"]})
    assert r.status_code == 409 and "SNAT addresses (192.0.2.60)" in r.text, r.text
    set_config(api, other, {"ipv4.nat.address": "", "ipv6.nat.address": ""})
    for sub in site.subnets["other"]:
        r = api.put(detach_path, json={"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
    assert api.delete(f"/networks/{other}").status_code == 204
    private = site.networks["private"]["id"]
    assert set_config(api, private, {"ipv4.nat.address": "192.0.2.60"})["ipv4.nat.address"] == "192.0.2.60"
    post(api, "private", {"listen_address": "192.0.2.50"})


# -- cloudnet:routes ----------------------------------------------------------------------------------------------


def test_routes_are_normalised(api: httpx.Client) -> None:
    routes = ["198.51.100.77/24", "2001:DB8:100::/56", "198.51.100.0/24", "203.0.113.0/25", "192.0.2.5"]
    net = create(api, "networks", "network", name="ext", **{"router:external": True, "cloudnet:routes": routes})
    expected = ["192.0.2.5/32", "198.51.100.0/24", "2001:db8:100::/56", "203.0.113.0/25"]
    assert net["cloudnet:routes"] == expected
    assert network(api, net["id"])["cloudnet:routes"] == expected
    r = api.put(f"/networks/{net['id']}", json={"network": {"cloudnet:routes": ["2001:db8:200::1/48"]}})
    assert r.status_code == 200, r.text
    assert r.json()["network"]["cloudnet:routes"] == ["2001:db8:200::/48"]
    r = api.put(f"/networks/{net['id']}", json={"network": {"name": "renamed"}})
    assert r.json()["network"]["cloudnet:routes"] == ["2001:db8:200::/48"]
    r = api.put(f"/networks/{net['id']}", json={"network": {"cloudnet:routes": []}})
    assert r.json()["network"]["cloudnet:routes"] == []


def test_bad_routes_are_refused(api: httpx.Client) -> None:
    ext = create(api, "networks", "network", name="ext", **{"router:external": True, "cloudnet:routes": ROUTE})
    internal = create(api, "networks", "network", name="internal")
    for routes, message in (
        (["x"], "is not a valid CIDR"),
        (["198.51.100.0/33"], "is not a valid CIDR"),
        ("198.51.100.0/24", "cloudnet:routes"),
        ([5], "cloudnet:routes"),
    ):
        error(api.put(f"/networks/{ext['id']}", json={"network": {"cloudnet:routes": routes}}), 400, message)
    assert network(api, ext["id"])["cloudnet:routes"] == ROUTE
    # Only on external networks.
    r = api.post("/networks", json={"network": {"name": "int2", "cloudnet:routes": ROUTE}})
    error(r, 400, "cloudnet:routes can only be set on an external network")
    r = api.put(f"/networks/{internal['id']}", json={"network": {"cloudnet:routes": ROUTE}})
    error(r, 400, "cloudnet:routes can only be set on an external network")
    assert network(api, internal["id"])["cloudnet:routes"] == []
    r = api.put(f"/networks/{internal['id']}", json={"network": {"cloudnet:routes": []}})
    assert r.status_code == 200, r.text
    assert sorted(n["name"] for n in api.get("/networks").json()["networks"]) == ["ext", "internal"]


ROUTE = ["203.0.113.0/24"]


def test_routes_widen_the_addresses_a_network_may_use(api: httpx.Client, site: Site) -> None:
    private = site.networks["private"]["id"]
    error(put_config(api, private, {"ipv4.nat.address": "203.0.113.9"}), 400, "does not contain")
    error(api.post(url("private"), json={"listen_address": "203.0.113.10"}), 400, "does not contain")
    r = api.put(f"/networks/{site.public['id']}", json={"network": {"cloudnet:routes": ROUTE}})
    assert r.status_code == 200, r.text
    assert set_config(api, private, {"ipv4.nat.address": "203.0.113.9"})["ipv4.nat.address"] == "203.0.113.9"
    post(api, "private", {"listen_address": "203.0.113.10"})
    # The old routes are gone with the replacement.
    error(api.post(url("private"), json={"listen_address": "198.51.100.10"}), 400, "does not contain")


def test_only_admins_set_routes(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    ext = create(admin, "networks", "network", name="ext", **{"router:external": True, "cloudnet:routes": ROUTE})
    mine = create(alice, "networks", "network", name="mine", config={"user.owner": "alice"})
    assert mine["config"] == {"user.owner": "alice"}
    mark = revision(admin)
    error(alice.put(f"/networks/{mine['id']}", json={"network": {"cloudnet:routes": ROUTE}}), 403)
    error(alice.put(f"/networks/{ext['id']}", json={"network": {"cloudnet:routes": []}}), 403)
    r = alice.post("/networks", json={"network": {"name": "x", "router:external": True, "cloudnet:routes": ROUTE}})
    error(r, 403)
    assert events_since(admin, mark) == []
    assert network(admin, ext["id"])["cloudnet:routes"] == ROUTE
    assert network(admin, mine["id"])["cloudnet:routes"] == []
    # Members see the routes of an external network, and change their own network's config.
    assert network(alice, ext["id"])["cloudnet:routes"] == ROUTE
    assert set_config(alice, mine["id"], {"user.owner": ""}) == {}


def test_racing_snat_address_and_forward_take_an_address_once(api: httpx.Client, site: Site) -> None:
    """One network setting a SNAT address while another creates a forward on it: one of them gets it."""
    private = site.networks["private"]["id"]
    for round_ in range(3):
        address = f"192.0.2.{70 + round_}"
        barrier = threading.Barrier(6)

        def attempt(i: int, address: str = address, barrier: threading.Barrier = barrier) -> httpx.Response:
            with httpx.Client(base_url=api.base_url, headers=api.headers, timeout=30) as client:
                barrier.wait()
                if i % 2:
                    return put_config(client, private, {"ipv4.nat.address": address})
                return client.post(url("other"), json={"listen_address": address})

        with ThreadPoolExecutor(6) as pool:
            responses = list(pool.map(attempt, range(6)))
        assert {r.status_code for r in responses} <= {200, 201, 400, 409}, [r.text for r in responses]
        snat = network(api, private)["config"].get("ipv4.nat.address") == address
        forwarded = address in [f["listen_address"] for f in api.get(url("other")).json()["forwards"]]
        assert snat != forwarded, (address, [(r.status_code, r.text) for r in responses])

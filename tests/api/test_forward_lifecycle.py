"""A forward and a SNAT address live as long as their network, and keep what they use
(services/forwards/forward_deps.py).

As LXD does: the network's deletion takes them along (test_forwards.py), while taking away what they use is
refused, 409 with the reason, and changes nothing: the router link (interface, gateway; as Neutron refuses for
floating IPs), the uplink's `cloudnet:routes` and subnets their address is in (LXD's validateRoutes), the
subnets their targets are in (LXD's OVN network validation). Network, broadcast and gateway addresses of an
uplink subnet are never listen or SNAT addresses (400). Every case for IPv4 and IPv6.

A forward's target is an address, not a port (services/forwards/forward_targets.py): the port holding it going (deleted,
its instance deleted, the address taken off it) leaves the forward as it is, listed in both faces; the next port
that takes the address is its target again, and until then the host's desired state realises nothing for it.
"""

from __future__ import annotations

import ipaddress
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from cloudnet.store import tables as t
from tests.api.test_forwards import Site, attach, build_site, detach, error, events_since, post, revision, url
from tests.api.test_instances import new_instance, register
from tests.support.api import create
from tests.support.server import RunningServer

Json = dict[str, Any]


def put_config(api: httpx.Client, network_id: str, config: Json) -> httpx.Response:
    return api.put(f"/networks/{network_id}", json={"network": {"config": config}})


def state(api: httpx.Client) -> Json:
    """What a refused request must leave as it was: the revision, and everything the API shows."""
    out: Json = {"revision": revision(api)}
    for collection in ("networks", "subnets", "routers", "ports"):
        out[collection] = sorted(api.get(f"/{collection}").json()[collection], key=lambda o: o["id"])
    out["forwards"] = {n["id"]: api.get(url(n["id"])).json()["forwards"] for n in out["networks"]}
    return out


def refused(api: httpx.Client, r: httpx.Response, before: Json, type_: str, *fragments: str) -> None:
    error(r, 409, *fragments)
    assert r.json()["NeutronError"]["type"] == type_
    assert state(api) == before


@pytest.fixture
def site(api: httpx.Client) -> Site:
    return build_site(api)


def subnet_of(site: Site, name: str, version: int) -> Json:
    return next(s for s in site.subnets[name] if s["ip_version"] == version)


def remove(site: Site, subnet: Json) -> httpx.Response:
    return site.api.put(f"/routers/{site.router['id']}/remove_router_interface", json={"subnet_id": subnet["id"]})


# -- the router link -------------------------------------------------------------------------------------------------


def test_a_forward_keeps_its_networks_link_of_its_family(api: httpx.Client, site: Site) -> None:
    net = site.networks["private"]
    v4, v6 = subnet_of(site, "private", 4), subnet_of(site, "private", 6)
    post(api, "private", {"listen_address": "192.0.2.10", "config": {"target_address": "10.0.0.5"}})
    post(api, "private", {"listen_address": "2001:db8::10", "config": {"target_address": "fd00::5"}})
    before = state(api)
    refused(api, remove(site, v4), before, "RouterInterfaceInUseByForward",
            f"Router interface for subnet {v4['id']}", "last IPv4 link", "network forwards (192.0.2.10)")  # fmt: skip
    refused(api, remove(site, v6), before, "RouterInterfaceInUseByForward",
            "last IPv6 link", "network forwards (2001:db8::10)")  # fmt: skip
    # Without IPv4 users, the IPv4 link may go: the network still reaches its uplink over IPv6.
    assert api.delete(url("private", "192.0.2.10")).status_code == 204
    detach(api, site.router["id"], v4["id"])
    before = state(api)
    refused(api, remove(site, v6), before, "RouterInterfaceInUseByForward", "2001:db8::10")
    assert api.delete(url("private", "2001:db8::10")).status_code == 204
    detach(api, site.router["id"], v6["id"])
    assert api.delete(f"/networks/{net['id']}").status_code == 204


@pytest.mark.parametrize(("key", "address", "version"),
                         [("ipv4.nat.address", "192.0.2.60", 4), ("ipv6.nat.address", "2001:db8::60", 6)])  # fmt: skip
def test_a_snat_address_keeps_its_networks_link(api: httpx.Client, site: Site, key: str, address: str,
                                                version: int) -> None:  # fmt: skip
    net = site.networks["private"]
    assert put_config(api, net["id"], {key: address}).status_code == 200
    other = 6 if version == 4 else 4
    detach(api, site.router["id"], subnet_of(site, "private", other)["id"])  # not needed by this family
    before = state(api)
    refused(api, remove(site, subnet_of(site, "private", version)), before, "RouterInterfaceInUseByForward",
            f"SNAT addresses ({address})")  # fmt: skip
    assert put_config(api, net["id"], {key: ""}).status_code == 200
    detach(api, site.router["id"], subnet_of(site, "private", version)["id"])


@pytest.mark.parametrize("version", [4, 6])
def test_a_forward_keeps_the_interface_on_its_targets_subnet(api: httpx.Client, site: Site, version: int) -> None:
    cidrs = {4: ("10.5.0.0/24", "10.6.0.0/24"), 6: ("fd05::/64", "fd06::/64")}[version]
    net = site.network("two", *cidrs)
    listen, target = {4: ("192.0.2.20", "10.6.0.7"), 6: ("2001:db8::20", "fd06::7")}[version]
    post(api, "two", {"listen_address": listen, "ports": [{"protocol": "tcp", "listen_port": "22",
                                                           "target_address": target}]})  # fmt: skip
    first, second = site.subnets["two"]
    before = state(api)
    refused(api, remove(site, second), before, "RouterInterfaceInUseByForward",
            f"send traffic to {target} in subnet {second['id']}", listen)  # fmt: skip
    detach(api, site.router["id"], first["id"])  # the targets' subnet keeps the network's link: allowed
    r = api.put(f"/networks/{net['id']}/forwards/{listen}",
                json={"ports": [{"protocol": "tcp", "listen_port": "22", "target_address": target}],
                      "config": {}})  # fmt: skip
    assert r.status_code == 200, r.text


def test_the_gateway_stays_while_forwards_use_it(api: httpx.Client, site: Site) -> None:
    post(api, "private", {"listen_address": "2001:db8:100::7"})
    other = create(api, "networks", "network", name="public2", **{"router:external": True})
    create(api, "subnets", "subnet", network_id=other["id"], cidr="203.0.113.0/24")
    before = state(api)
    path = f"/routers/{site.router['id']}"
    for info in ({}, None, {"network_id": other["id"]}):
        r = api.put(path, json={"router": {"external_gateway_info": info}})
        why = f"Gateway cannot be updated for router {site.router['id']}"
        refused(api, r, before, "RouterExternalGatewayInUseByForward", why, "network forwards (2001:db8:100::7)")
    # The same external network with other addresses is the same uplink: fine.
    fixed = [{"ip_address": "192.0.2.77"}, {"ip_address": "2001:db8::77"}]
    r = api.put(path, json={"router": {"external_gateway_info": {"network_id": site.public["id"],
                                                                 "external_fixed_ips": fixed}}})  # fmt: skip
    assert r.status_code == 200, r.text
    assert api.delete(url("private", "2001:db8:100::7")).status_code == 204
    r = api.put(path, json={"router": {"external_gateway_info": {"network_id": other["id"]}}})
    assert r.status_code == 200, r.text


def test_attaching_to_an_older_router_would_move_the_uplink(api: httpx.Client) -> None:
    public = create(api, "networks", "network", name="public", **{"router:external": True,
                                                                  "cloudnet:routes": ["198.51.100.0/24"]})  # fmt: skip
    create(api, "subnets", "subnet", network_id=public["id"], cidr="192.0.2.0/24")
    two = [create(api, "routers", "router", name=f"r{i}", external_gateway_info={"network_id": public["id"]})
           for i in (1, 2)]  # fmt: skip
    # The uplink is the oldest router with a gateway among those the network is on (whole seconds, then id).
    older, newer = sorted(two, key=lambda r: (r["created_at"], r["id"]))
    net = create(api, "networks", "network", name="n")
    v4 = create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    v6 = create(api, "subnets", "subnet", network_id=net["id"], cidr="fd00::/64")
    attach(api, newer["id"], v4["id"])
    post(api, net["id"], {"listen_address": "198.51.100.1"})
    before = state(api)
    r = api.put(f"/routers/{older['id']}/add_router_interface", json={"subnet_id": v6["id"]})
    refused(api, r, before, "UplinkInUseByForward", f"Router {older['id']} cannot be attached", "198.51.100.1")
    # Through the port API as well: an interface port made by hand, then given to the older router.
    port = create(api, "ports", "port", network_id=net["id"], fixed_ips=[{"subnet_id": v6["id"]}])
    before = state(api)
    r = api.put(f"/ports/{port['id']}", json={"port": {"device_owner": "network:router_interface",
                                                       "device_id": older["id"]}})  # fmt: skip
    refused(api, r, before, "UplinkInUseByForward", f"Port {port['id']} cannot be changed")
    attach(api, newer["id"], v6["id"])  # the router that is already its uplink: fine


# -- the uplink's ranges ---------------------------------------------------------------------------------------------


def test_routes_in_use_are_kept(api: httpx.Client, site: Site) -> None:
    """Issue 17 case 2: `cloudnet:routes: []` while a forward and a SNAT address use addresses of those routes."""
    private = site.networks["private"]["id"]
    post(api, "private", {"listen_address": "198.51.100.7"})
    assert put_config(api, private, {"ipv6.nat.address": "2001:db8:100::60"}).status_code == 200
    before = state(api)
    path = f"/networks/{site.public['id']}"
    r = api.put(path, json={"network": {"cloudnet:routes": []}})
    refused(api, r, before, "NetworkRoutesInUse", "cloudnet:routes", "network forward 198.51.100.7")
    r = api.put(path, json={"network": {"cloudnet:routes": ["198.51.100.0/24"]}})
    refused(api, r, before, "NetworkRoutesInUse", "SNAT address 2001:db8:100::60")
    # Narrowing to what is used, or to another range holding it, is fine.
    r = api.put(path, json={"network": {"cloudnet:routes": ["198.51.100.7/32", "2001:db8:100::/64"]}})
    assert r.status_code == 200, r.text
    assert put_config(api, private, {"ipv6.nat.address": ""}).status_code == 200
    assert api.delete(url("private", "198.51.100.7")).status_code == 204
    r = api.put(path, json={"network": {"cloudnet:routes": []}})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("cidr", "listen"), [("192.0.3.0/24", "192.0.3.9"), ("2001:db8:3::/64", "2001:db8:3::9")])
def test_uplink_subnets_in_use_are_kept(api: httpx.Client, site: Site, cidr: str, listen: str) -> None:
    extra = create(api, "subnets", "subnet", network_id=site.public["id"], cidr=cidr)
    post(api, "private", {"listen_address": listen})
    before = state(api)
    refused(api, api.delete(f"/subnets/{extra['id']}"), before, "SubnetInUse",
            f"Unable to complete operation on subnet {extra['id']}", f"network forward {listen}")  # fmt: skip
    assert api.delete(url("private", listen)).status_code == 204
    assert api.delete(f"/subnets/{extra['id']}").status_code == 204


def test_uplink_subnets_of_router_gateways_are_kept(api: httpx.Client, site: Site) -> None:
    before = state(api)
    for sub in api.get("/subnets", params={"network_id": site.public["id"]}).json()["subnets"]:
        refused(api, api.delete(f"/subnets/{sub['id']}"), before, "SubnetInUse", "One or more ports")


def test_an_uplink_subnet_may_go_when_a_route_still_holds_the_address(api: httpx.Client, site: Site) -> None:
    extra = create(api, "subnets", "subnet", network_id=site.public["id"], cidr="198.51.100.0/25")
    post(api, "private", {"listen_address": "198.51.100.9"})
    assert api.delete(f"/subnets/{extra['id']}").status_code == 204


@pytest.mark.parametrize(("cidr", "target"), [("10.9.0.0/24", "10.9.0.5"), ("fd09::/64", "fd09::5")])
def test_forward_targets_are_reachable_from_the_uplink(api: httpx.Client, site: Site, cidr: str, target: str) -> None:
    """A target lies in a subnet of the network on its uplink router, or traffic from the uplink cannot reach it
    (Neutron refuses port forwarding so: "External network ... is not reachable from subnet ..."): 400 at create
    and update otherwise. Once it does, the subnet stays while targeted (its interface: see above; the subnet
    itself: its router interface port holds it)."""
    loose = create(api, "subnets", "subnet", network_id=site.networks["private"]["id"], cidr=cidr)
    v4 = "." in target
    listen, near = ("192.0.2.30", "10.0.0.5") if v4 else ("2001:db8::30", "fd00::5")
    why = (f'Target address "{target}" is not reachable from the uplink router {site.router["id"]}: its subnet '
           f"{loose['id']} is not attached to it")  # fmt: skip
    before = state(api)
    for body in ({"config": {"target_address": target}},
                 {"ports": [{"protocol": "tcp", "listen_port": "22", "target_address": target}]}):  # fmt: skip
        r = api.post(url("private"), json={"listen_address": listen, **body})
        error(r, 400, why)
        assert r.json()["NeutronError"]["type"] == "ForwardTargetNotReachable"
    assert state(api) == before
    post(api, "private", {"listen_address": listen, "config": {"target_address": near}})
    before = state(api)
    error(api.put(url("private", listen), json={"config": {"target_address": target}}), 400, why)
    ports = [{"protocol": "udp", "listen_port": "53", "target_address": target}]
    error(api.patch(url("private", listen), json={"ports": ports}), 400, why)
    assert state(api) == before
    attach(api, site.router["id"], loose["id"])
    r = api.patch(url("private", listen), json={"ports": ports})
    assert r.status_code == 200, r.text
    before = state(api)
    refused(api, api.delete(f"/subnets/{loose['id']}"), before, "SubnetInUse", "One or more ports")
    refused(api, remove(site, loose), before, "RouterInterfaceInUseByForward", f"send traffic to {target}")


@pytest.mark.parametrize(("cidr", "target"), [("10.9.0.0/24", "10.9.0.5"), ("fd09::/64", "fd09::5")])
def test_a_subnet_an_earlier_versions_forward_targets_is_kept(api: httpx.Client, site: Site, server: RunningServer,
                                                               cidr: str, target: str) -> None:  # fmt: skip
    """Earlier versions let a forward target a subnet off the router: that subnet still stays while targeted."""
    private = site.networks["private"]
    loose = create(api, "subnets", "subnet", network_id=private["id"], cidr=cidr)
    listen = "192.0.2.30" if "." in target else "2001:db8::30"
    with server.store.write() as tx:  # as an earlier version left it
        tx.conn.execute(t.forwards.insert().values(
            id="00000000-0000-4000-8000-00000000f0f1", network_id=private["id"], listen_address=listen,
            description="", config={"target_address": target}, ports=[], project_id=private["project_id"],
            created_at=tx.now, updated_at=tx.now, revision_number=0))  # fmt: skip
    before = state(api)
    refused(api, api.delete(f"/subnets/{loose['id']}"), before, "SubnetInUse", f"send traffic to {target}", listen)
    assert api.delete(url("private", listen)).status_code == 204
    assert api.delete(f"/subnets/{loose['id']}").status_code == 204


# -- addresses that name a subnet ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("address", "why"), [
    ("192.0.2.0", "cannot be a network address"), ("192.0.2.255", "cannot be a broadcast address"),
    ("192.0.2.1", "is already in use by a gateway"), ("2001:db8::", "cannot be a network address"),
    ("2001:db8::1", "is already in use by a gateway"),
])  # fmt: skip
def test_network_broadcast_and_gateway_addresses_are_refused(api: httpx.Client, site: Site, address: str,
                                                             why: str) -> None:  # fmt: skip
    """Issue 17 case 3, for listen and SNAT addresses alike."""
    private = site.networks["private"]["id"]
    before = state(api)
    error(api.post(url("private"), json={"listen_address": address}), 400, f'Listen address "{address}" {why}')
    key = "ipv6.nat.address" if ":" in address else "ipv4.nat.address"
    error(put_config(api, private, {key: address}), 400, f'SNAT address "{address}" {why}')
    assert state(api) == before


def test_a_routed_ranges_first_address_is_an_address_like_any(api: httpx.Client, site: Site) -> None:
    """`cloudnet:routes` are routed to the uplink, not on a link: no address of theirs names a subnet."""
    assert post(api, "private", {"listen_address": "198.51.100.0"})["listen_address"] == "198.51.100.0"
    assert post(api, "private", {"listen_address": "2001:db8:100::"})["listen_address"] == "2001:db8:100::"


def test_a_new_uplink_subnet_may_not_name_a_used_address(api: httpx.Client, site: Site) -> None:
    post(api, "private", {"listen_address": "198.51.100.1"})
    post(api, "private", {"listen_address": "2001:db8:100::"})
    before = state(api)
    for body, fragment in (({"cidr": "198.51.100.0/24"}, "gateway address 198.51.100.1"),
                           ({"cidr": "2001:db8:100::/64", "gateway_ip": "2001:db8:100::1"},
                            "network address 2001:db8:100::")):  # fmt: skip
        r = api.post("/subnets", json={"subnet": {"network_id": site.public["id"], **body}})
        refused(api, r, before, "IpAddressInUse", fragment, "in use by a network forward or SNAT address")
    # Nor may an uplink subnet's gateway move onto one.
    v4 = next(s for s in api.get("/subnets", params={"network_id": site.public["id"]}).json()["subnets"]
              if s["ip_version"] == 4)  # fmt: skip
    post(api, "private", {"listen_address": "192.0.2.200"})
    before = state(api)
    r = api.put(f"/subnets/{v4['id']}", json={"subnet": {"gateway_ip": "192.0.2.200"}})
    refused(api, r, before, "IpAddressInUse", "gateway address 192.0.2.200")


# -- concurrency -----------------------------------------------------------------------------------------------------


def test_racing_forward_creates_and_detaches_never_leave_a_forward_without_its_link(
    api: httpx.Client, site: Site
) -> None:
    """Creates and detaches on one network at once: whatever wins, no forward is left on a detached network."""
    barrier = threading.Barrier(4)
    v4 = subnet_of(site, "private", 4)

    def attempt(i: int) -> httpx.Response:
        with httpx.Client(base_url=api.base_url, headers=api.headers, timeout=30) as client:
            barrier.wait()
            if i % 2:
                return client.put(f"/routers/{site.router['id']}/remove_router_interface",
                                  json={"subnet_id": v4["id"]})  # fmt: skip
            return client.post(url("private"), json={"listen_address": f"192.0.2.{40 + i}"})

    with ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(attempt, range(4)))
    assert all(r.status_code in (200, 201, 400, 404, 409) for r in responses), [r.text for r in responses]
    forwards = [f for f in api.get(url("private")).json()["forwards"] if "." in f["listen_address"]]
    iface = api.get("/ports", params={"device_id": site.router["id"], "network_id": site.networks["private"]["id"]})
    linked_v4 = any("." in f["ip_address"] for p in iface.json()["ports"] for f in p["fixed_ips"])
    assert linked_v4 or not forwards, (forwards, [r.text for r in responses])


def test_racing_target_moves_and_subnet_removals_never_leave_a_target_unreachable(
    api: httpx.Client, site: Site
) -> None:
    """A forward moved onto a subnet while that subnet's router interface is removed and the subnet deleted: whatever
    wins, no forward sends traffic to a subnet that is gone or off the router."""
    site.network("two", "10.5.0.0/24", "10.6.0.0/24")
    second = site.subnets["two"][1]
    post(api, "two", {"listen_address": "192.0.2.20", "config": {"target_address": "10.5.0.7"}})
    barrier = threading.Barrier(4)

    def attempt(i: int) -> list[httpx.Response]:
        with httpx.Client(base_url=api.base_url, headers=api.headers, timeout=30) as client:
            barrier.wait()
            if i % 2 == 0:
                return [client.put(url("two", "192.0.2.20"), json={"config": {"target_address": f"10.6.0.{7 + i}"}})]
            r = client.put(f"/routers/{site.router['id']}/remove_router_interface", json={"subnet_id": second["id"]})
            return [r, client.delete(f"/subnets/{second['id']}")] if r.status_code == 200 else [r]

    with ThreadPoolExecutor(4) as pool:
        responses = [r for rs in pool.map(attempt, range(4)) for r in rs]
    texts = [r.text for r in responses]
    assert all(r.status_code in (200, 204, 400, 404, 409) for r in responses), texts
    [forward] = api.get(url("two")).json()["forwards"]
    if forward["config"]["target_address"].startswith("10.6."):
        ports = api.get("/ports", params={"device_id": site.router["id"]}).json()["ports"]
        assert any(f["subnet_id"] == second["id"] for p in ports for f in p["fixed_ips"]), (forward, texts)


# -- the targets' ports go and come -------------------------------------------------------------------------------


def holder(site: Site, name: str, ip: str) -> Json:
    """A port of the network holding `ip`."""
    subnet = subnet_of(site, name, 6 if ":" in ip else 4)
    fixed = [{"subnet_id": subnet["id"], "ip_address": ip}]
    return create(site.api, "ports", "port", network_id=site.networks[name]["id"], fixed_ips=fixed)


def as_fip(api: httpx.Client, forward_id: str) -> Json:
    r = api.get(f"/floatingips/{forward_id}")
    assert r.status_code == 200, r.text
    return dict(r.json()["floatingip"])


def untouched(api: httpx.Client, since: int, forward: Json) -> None:
    """The forward is as it was: the same in its network's list, and no event of it."""
    assert not [e for e in events_since(api, since) if e[0] == "forward"]
    listed = api.get(url(forward["network_id"])).json()["forwards"]
    assert [f for f in listed if f["id"] == forward["id"]] == [forward]


def test_a_forward_outlives_its_targets_port_and_serves_the_next(api: httpx.Client, site: Site) -> None:
    """The issue's walk: the port behind a whole-address forward goes; the forward stays (LXD), one object in both
    faces, and the next port on the address is its target."""
    web = holder(site, "private", "10.0.0.80")
    fwd = post(api, "private", {"listen_address": "192.0.2.60", "config": {"target_address": "10.0.0.80"}})
    assert as_fip(api, fwd["id"])["port_id"] == web["id"]
    mark = revision(api)
    assert api.delete(f"/ports/{web['id']}").status_code == 204
    untouched(api, mark, fwd)
    shown = as_fip(api, fwd["id"])
    assert (shown["port_id"], shown["fixed_ip_address"], shown["port_details"]) == (None, "10.0.0.80", None)
    assert [f["id"] for f in api.get("/floatingips").json()["floatingips"]] == [fwd["id"]]  # nothing else made
    # Its address is its own: a second forward on it is refused naming it; it is changed instead.
    r = api.post(url("private"), json={"listen_address": "192.0.2.60", "config": {"target_address": "10.0.0.81"}})
    error(r, 409, "already exists")
    r = api.patch(url("private", "192.0.2.60"), json={"config": {"target_address": "10.0.0.81"}})
    assert r.status_code == 200, r.text
    r = api.patch(url("private", "192.0.2.60"), json={"config": {"target_address": "10.0.0.80"}})
    assert r.status_code == 200, r.text
    again = holder(site, "private", "10.0.0.80")
    assert as_fip(api, fwd["id"])["port_id"] == again["id"]


def test_per_port_targets_stay_when_their_ports_go(api: httpx.Client, site: Site) -> None:
    ports = [holder(site, "private", ip) for ip in ("10.0.0.81", "10.0.0.82", "fd00::81")]
    specs = [
        {"protocol": "tcp", "listen_port": "80", "target_address": "10.0.0.81"},
        {"protocol": "udp", "listen_port": "53-54", "target_port": "5353", "target_address": "10.0.0.82"},
    ]
    v4 = post(api, "private", {"listen_address": "192.0.2.61", "ports": specs})
    v6 = post(api, "private", {"listen_address": "2001:db8::61", "config": {"target_address": "fd00::81"}})
    pfs = as_fip(api, v4["id"])["port_forwardings"]
    assert sorted(p["internal_port_id"] for p in pfs) == sorted(p["id"] for p in ports[:2])
    mark = revision(api)
    for p in ports:
        assert api.delete(f"/ports/{p['id']}").status_code == 204
    untouched(api, mark, v4)
    untouched(api, mark, v6)
    pfs = as_fip(api, v4["id"])["port_forwardings"]
    assert [(p["internal_ip_address"], p["internal_port_id"]) for p in pfs] == [("10.0.0.81", None),
                                                                               ("10.0.0.82", None)]  # fmt: skip
    back = holder(site, "private", "10.0.0.82")
    pfs = as_fip(api, v4["id"])["port_forwardings"]
    assert [p["internal_port_id"] for p in pfs] == [None, back["id"]]


def test_a_forward_keeps_the_address_its_port_lets_go_of(api: httpx.Client, site: Site) -> None:
    p = holder(site, "private", "10.0.0.83")
    fwd = post(api, "private", {"listen_address": "192.0.2.62", "config": {"target_address": "10.0.0.83"}})
    v4 = subnet_of(site, "private", 4)
    mark = revision(api)
    r = api.put(f"/ports/{p['id']}", json={"port": {"fixed_ips": [{"subnet_id": v4["id"], "ip_address": "10.0.0.84"}]}})
    assert r.status_code == 200, r.text
    untouched(api, mark, fwd)
    assert as_fip(api, fwd["id"])["port_id"] is None
    r = api.put(f"/ports/{p['id']}", json={"port": {"fixed_ips": [{"subnet_id": v4["id"], "ip_address": "10.0.0.83"}]}})
    assert r.status_code == 200, r.text
    assert as_fip(api, fwd["id"])["port_id"] == p["id"]


def test_an_instance_going_with_its_port_leaves_the_forward_and_nothing_to_realise(
    api: httpx.Client, site: Site
) -> None:
    """The host's desired state (what its agent realises) has the forward's target only while a port holds it."""
    register(api, "node-1")
    net = site.networks["private"]["id"]
    new_instance(api, "stay", host="node-1", nets=[{"network": net}])  # (keeps the router on the host)
    web = new_instance(api, "web", host="node-1", nets=[{"network": net, "v4-fixed-ip": "10.0.0.85"}])
    fwd = post(api, "private", {"listen_address": "192.0.2.63", "ports": [
        {"protocol": "tcp", "listen_port": "22", "target_address": "10.0.0.85"}]})  # fmt: skip

    def realised() -> Json:
        (router,) = api.get("/hosts/node-1/state").json()["routers"]
        (f,) = [f for f in router["forwards"] if f["id"] == fwd["id"]]
        return {k: f[k] for k in ("config", "ports", "idle")}

    assert len(realised()["ports"]) == 1 and realised()["idle"] == []
    mark = revision(api)
    assert api.delete(f"/instances/{web['id']}").status_code == 204
    untouched(api, mark, fwd)
    assert realised() == {"config": {}, "ports": [], "idle": ["10.0.0.85"]}
    new_instance(api, "web2", host="node-1", nets=[{"network": net, "v4-fixed-ip": "10.0.0.85"}])
    assert len(realised()["ports"]) == 1 and realised()["idle"] == []


def test_ipam_never_hands_a_forwards_target_to_a_port(api: httpx.Client, site: Site) -> None:
    """The next port on a target address is one that asks for it: an automatic address never is one (hostile: on a
    shared network, another project's port would get the forward's traffic)."""
    net = site.networks["private"]["id"]
    first = create(api, "ports", "port", network_id=net)
    v4 = next(f["ip_address"] for f in first["fixed_ips"] if "." in f["ip_address"])
    v6 = next(f["ip_address"] for f in first["fixed_ips"] if ":" in f["ip_address"])
    after = [str(ipaddress.ip_address(v4) + i) for i in range(1, 4)]
    after6 = str(ipaddress.ip_address(v6) + 1)
    post(api, "private", {"listen_address": "192.0.2.64", "config": {"target_address": after[0]},
                          "ports": [{"protocol": "tcp", "listen_port": "22", "target_address": after[1]}]})  # fmt: skip
    post(api, "private", {"listen_address": "2001:db8::64", "config": {"target_address": after6}})
    r = api.post("/ports", json={"ports": [{"network_id": net} for _ in range(3)]})
    assert r.status_code == 201, r.text
    given = {f["ip_address"] for p in r.json()["ports"] for f in p["fixed_ips"]}
    assert not given & {*after[:2], after6}, given
    assert after[2] in given  # (the one after the targets: next-fit went on past them)
    assert holder(site, "private", after[0])["fixed_ips"][0]["ip_address"] == after[0]  # asked for: given

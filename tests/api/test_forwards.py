"""Network forwards: /v2.0/networks/{network}/forwards[/{listen_address}] against the live server.

The behaviour followed is LXD's (../shared/reference/networking.md §1): its body shape, normalisation
(§1.2), every validation rule with its wording (§1.3) and HTTP semantics (§1.4), with the reference's
recommendations: 400 rather than 500, ports 1..65535, the path's listen address normalised, PATCH keeping
the description, If-Match checked.
"""

from __future__ import annotations

import ipaddress
import json
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from cloudnet.store import tables as t
from tests.support.api import create
from tests.support.server import RunningServer

Json = dict[str, Any]

PUBLIC_V4 = "192.0.2.0/24"
PUBLIC_V6 = "2001:db8::/64"
ROUTES = ["198.51.100.0/24", "2001:db8:100::/56"]
STALE = (
    "The configuration has been modified since this change began. "
    "Please retrieve the updated configuration before proceeding."
)


# -- helpers shared with test_network_config.py and test_forwards_cli.py ------------------------------------


def attach(api: httpx.Client, router_id: str, subnet_id: str) -> None:
    r = api.put(f"/routers/{router_id}/add_router_interface", json={"subnet_id": subnet_id})
    assert r.status_code == 200, r.text


def detach(api: httpx.Client, router_id: str, subnet_id: str) -> None:
    r = api.put(f"/routers/{router_id}/remove_router_interface", json={"subnet_id": subnet_id})
    assert r.status_code == 200, r.text


@dataclass
class Site:
    """An external network (subnets + cloudnet:routes), a router with its gateway there, and internal
    networks: `private` (10.0.0.0/24, fd00::/64) attached to the router, more through `network()`."""

    api: httpx.Client
    public: Json
    router: Json
    networks: dict[str, Json] = field(default_factory=dict)
    subnets: dict[str, list[Json]] = field(default_factory=dict)

    @property
    def gateway_ips(self) -> list[str]:
        return [ip["ip_address"] for ip in self.router["external_gateway_info"]["external_fixed_ips"]]

    def network(self, name: str, *cidrs: str, uplink: bool = True) -> Json:
        net = create(self.api, "networks", "network", name=name)
        self.networks[name] = net
        self.subnets[name] = [create(self.api, "subnets", "subnet", network_id=net["id"], cidr=c) for c in cidrs]
        if uplink:
            for sub in self.subnets[name]:
                attach(self.api, self.router["id"], sub["id"])
        return net


def build_site(api: httpx.Client) -> Site:
    public = create(api, "networks", "network", name="public", **{"router:external": True, "cloudnet:routes": ROUTES})
    create(api, "subnets", "subnet", network_id=public["id"], cidr=PUBLIC_V4)
    create(api, "subnets", "subnet", network_id=public["id"], cidr=PUBLIC_V6)
    router = create(api, "routers", "router", name="edge", external_gateway_info={"network_id": public["id"]})
    assert len(router["external_gateway_info"]["external_fixed_ips"]) == 2
    site = Site(api, public, router)
    site.network("private", "10.0.0.0/24", "fd00::/64")
    return site


def url(network: str, address: str | None = None) -> str:
    base = f"/networks/{quote(network, safe='')}/forwards"
    return base if address is None else f"{base}/{address}"


def post(api: httpx.Client, network: str, body: Json) -> Json:
    r = api.post(url(network), json=body)
    assert r.status_code == 201, r.text
    return dict(r.json()["forward"])


def show(api: httpx.Client, network: str, address: str) -> tuple[Json, str]:
    r = api.get(url(network, address))
    assert r.status_code == 200, r.text
    return dict(r.json()["forward"]), r.headers["etag"]


def error(r: httpx.Response, status: int, *fragments: str) -> str:
    assert r.status_code == status, r.text
    message = str(r.json()["NeutronError"]["message"])
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def revision(api: httpx.Client) -> int:
    r = api.get("/events", params={"since": 0, "limit": 1})
    assert r.status_code == 200, r.text
    return int(r.json()["revision"])


def events_since(api: httpx.Client, since: int) -> list[tuple[str, str, str]]:
    r = api.get("/events", params={"since": since})
    assert r.status_code == 200, r.text
    return [(e["resource"], e["operation"], e["resource_id"]) for e in r.json()["events"]]


def snapshot(api: httpx.Client) -> Json:
    """Everything a failed request must leave alone: every network (config, routes, revision) and every
    network's forwards, as the API shows them."""
    state: Json = {}
    for net in api.get("/networks").json()["networks"]:
        r = api.get(url(net["id"]))
        assert r.status_code == 200, r.text
        state[net["id"]] = {"network": net, "forwards": r.json()["forwards"]}
    return state


def lxd(forward: Json) -> Json:
    """The LXD part of a forward as the API shows it."""
    return {k: forward[k] for k in ("listen_address", "description", "config", "ports", "location")}


def port(**spec: Any) -> Json:
    return {"protocol": "tcp", "listen_port": "80", "target_address": "10.0.0.6", **spec}


@pytest.fixture
def site(api: httpx.Client) -> Site:
    return build_site(api)


# -- create, list, show, delete -----------------------------------------------------------------------------


def test_create_list_show_delete(api: httpx.Client, site: Site, server: RunningServer) -> None:
    net = site.networks["private"]
    before = revision(api)
    body = {
        "listen_address": "192.0.2.10",
        "description": "web",
        "config": {"target_address": "10.0.0.5", "user.owner": "ops"},
        "ports": [{"description": "https", "protocol": "tcp", "listen_port": "443", "target_port": "8443",
                   "target_address": "10.0.0.6"}],
    }  # fmt: skip
    r = api.post(url("private"), json=body)
    assert r.status_code == 201, r.text
    assert r.headers["location"] == "/v2.0/networks/private/forwards/192.0.2.10"
    created = r.json()["forward"]
    assert lxd(created) == {**body, "location": ""}
    assert created["network_id"] == net["id"]
    assert created["network"] == "private"
    assert created["project_id"] == net["project_id"]
    assert created["revision_number"] == 0
    # The Location is where the forward is.
    located = httpx.get(server.url + r.headers["location"], headers={"X-Auth-Token": "admin"})
    assert located.status_code == 200
    assert located.json()["forward"] == created

    shown, etag = show(api, "private", "192.0.2.10")
    assert shown == created
    assert re.fullmatch(r'"[0-9a-f]{64}"', etag), etag
    assert api.get(url("private")).json() == {"forwards": [created]}
    [(resource, operation, fid)] = events_since(api, before)
    assert (resource, operation, fid) == ("forward", "create", created["id"])

    mark = revision(api)
    r = api.delete(url("private", "192.0.2.10"))
    assert r.status_code == 204, r.text
    assert events_since(api, mark) == [("forward", "delete", created["id"])]
    error(api.get(url("private", "192.0.2.10")), 404, "Network forward not found")
    error(api.delete(url("private", "192.0.2.10")), 404, "Network forward not found")
    assert api.get(url("private")).json() == {"forwards": []}


def test_minimal_forward_has_empty_config_and_ports(api: httpx.Client, site: Site) -> None:
    created = post(api, "private", {"listen_address": "192.0.2.11"})
    assert lxd(created) == {"listen_address": "192.0.2.11", "description": "", "config": {}, "ports": [],
                            "location": ""}  # fmt: skip
    # null is "not given", as LXD's decoder makes of it
    created = post(api, "private", {"listen_address": "192.0.2.12", "config": None, "ports": None})
    assert (created["config"], created["ports"]) == ({}, [])


def test_network_by_id_or_name_and_envelope(api: httpx.Client, site: Site) -> None:
    net_id = site.networks["private"]["id"]
    r = api.post(url(net_id), json={"forward": {"listen_address": "192.0.2.13", "description": "enveloped"}})
    assert r.status_code == 201, r.text
    assert r.headers["location"] == f"/v2.0/networks/{net_id}/forwards/192.0.2.13"
    by_id = api.get(url(net_id)).json()["forwards"]
    by_name = api.get(url("private")).json()["forwards"]
    assert by_id == by_name
    assert [f["description"] for f in by_name] == ["enveloped"]
    assert show(api, "private", "192.0.2.13")[0] == show(api, net_id, "192.0.2.13")[0]
    r = api.patch(url(net_id, "192.0.2.13"), json={"forward": {"description": "patched"}})
    assert r.status_code == 200, r.text
    assert show(api, "private", "192.0.2.13")[0]["description"] == "patched"
    assert api.delete(url("private", "192.0.2.13")).status_code == 204
    error(api.get(url("nope")), 404, "Network not found")
    error(api.get(url("00000000-0000-4000-8000-000000000000")), 404, "Network not found")


def test_list_is_ordered_and_per_network(api: httpx.Client, site: Site) -> None:
    site.network("other", "10.1.0.0/24")
    for address in ("192.0.2.22", "192.0.2.20", "2001:db8::20"):
        post(api, "private", {"listen_address": address})
    post(api, "other", {"listen_address": "192.0.2.21"})
    assert [f["listen_address"] for f in api.get(url("private")).json()["forwards"]] == sorted(
        ["192.0.2.22", "192.0.2.20", "2001:db8::20"]
    )
    assert [f["listen_address"] for f in api.get(url("other")).json()["forwards"]] == ["192.0.2.21"]
    # A forward is found only through its own network.
    error(api.get(url("other", "192.0.2.20")), 404, "Network forward not found")
    error(api.delete(url("other", "192.0.2.20")), 404, "Network forward not found")


# -- canonical form ------------------------------------------------------------------------------------------


def test_bodies_are_stored_in_canonical_form(api: httpx.Client, site: Site) -> None:
    created = post(
        api,
        "private",
        {
            "listen_address": " 2001:DB8:0::10 ",
            "description": "  padded  ",
            "config": {"target_address": "FD00:0:0::5"},
            "ports": [
                {"description": " a ", "protocol": " tcp ", "listen_port": "80, 90-100", "target_port": " 443 ",
                 "target_address": " FD00::0:6 "},
                {"protocol": "udp", "listen_port": " 53 ,54 ", "target_address": "fd00::7", "target_port": "80-81"},
            ],
        },
    )  # fmt: skip
    expected = {
        "listen_address": "2001:db8::10",
        "description": "padded",
        "config": {"target_address": "fd00::5"},
        "ports": [
            {"description": "a", "protocol": "tcp", "listen_port": "80,90-100", "target_port": "443",
             "target_address": "fd00::6"},
            {"description": "", "protocol": "udp", "listen_port": "53,54", "target_port": "80-81",
             "target_address": "fd00::7"},
        ],
        "location": "",
    }  # fmt: skip
    assert lxd(created) == expected
    # The path's listen address is normalised too (LXD would answer 404 here).
    for path in ("2001:DB8::10", "2001:db8:0:0::10", quote("2001:DB8::10", safe="")):
        assert lxd(show(api, "private", path)[0]) == expected
    r = api.patch(url("private", "2001:DB8:0::10"), json={"description": "via odd path"})
    assert r.status_code == 200, r.text
    assert r.json()["forward"]["description"] == "via odd path"
    # Ranges are kept as written, not merged or expanded.
    r = api.put(url("private", "2001:db8::10"), json={"ports": [port(listen_port="80,81", target_address="fd00::6")]})
    assert r.status_code == 200, r.text
    assert r.json()["forward"]["ports"][0]["listen_port"] == "80,81"
    assert api.delete(url("private", "2001:DB8:0::10")).status_code == 204
    assert api.get(url("private")).json()["forwards"] == []


def test_ipv4_mapped_listen_address_is_ipv4(api: httpx.Client, site: Site) -> None:
    r = api.post(url("private"), json={"listen_address": "::ffff:192.0.2.14", "config": {"target_address": "10.0.0.5"}})
    assert r.status_code == 201, r.text
    assert r.json()["forward"]["listen_address"] == "192.0.2.14"
    assert r.headers["location"].endswith("/forwards/192.0.2.14")
    assert show(api, "private", "::ffff:192.0.2.14")[0]["listen_address"] == "192.0.2.14"


# -- ETag and If-Match -----------------------------------------------------------------------------------------


def test_etag_and_if_match(api: httpx.Client, site: Site) -> None:
    post(api, "private", {"listen_address": "192.0.2.10", "description": "one"})
    first, etag = show(api, "private", "192.0.2.10")
    assert show(api, "private", "192.0.2.10")[1] == etag  # stable while nothing changes

    wrong = '"' + "0" * 64 + '"'
    mark = revision(api)
    for method in ("PUT", "PATCH"):
        r = api.request(method, url("private", "192.0.2.10"), json={"description": "two"}, headers={"If-Match": wrong})
        message = error(r, 412)
        assert message == f"ETag does not match: {etag.strip(chr(34))} vs {'0' * 64}. {STALE}"
    assert show(api, "private", "192.0.2.10") == (first, etag)
    assert events_since(api, mark) == []

    # The ETag that GET gave passes, quoted or not; the change gives a new ETag.
    r = api.put(url("private", "192.0.2.10"), json={"description": "two"}, headers={"If-Match": etag})
    assert r.status_code == 200, r.text
    second, etag2 = show(api, "private", "192.0.2.10")
    assert second["description"] == "two"
    assert etag2 != etag
    r = api.patch(url("private", "192.0.2.10"), json={"description": "three"}, headers={"If-Match": etag2.strip('"')})
    assert r.status_code == 200, r.text
    # The first ETag is stale now.
    r = api.put(url("private", "192.0.2.10"), json={"description": "lost"}, headers={"If-Match": etag})
    error(r, 412, "ETag does not match: ", STALE)
    assert show(api, "private", "192.0.2.10")[0]["description"] == "three"
    # Without If-Match (or with an empty one) there is no check.
    r = api.put(url("private", "192.0.2.10"), json={"description": "four"})
    assert r.status_code == 200, r.text
    r = api.put(url("private", "192.0.2.10"), json={"description": "five"}, headers={"If-Match": ""})
    assert r.status_code == 200, r.text
    assert show(api, "private", "192.0.2.10")[0]["description"] == "five"


def test_etag_covers_every_lxd_field(api: httpx.Client, site: Site) -> None:
    post(api, "private", {"listen_address": "192.0.2.10"})
    seen = {show(api, "private", "192.0.2.10")[1]}
    for change in (
        {"description": "d"},
        {"config": {"user.a": "1"}},
        {"config": {"target_address": "10.0.0.5"}},
        {"ports": [port()]},
        {"ports": [port(target_port="8080")]},
    ):
        r = api.patch(url("private", "192.0.2.10"), json=change)
        assert r.status_code == 200, r.text
        etag = show(api, "private", "192.0.2.10")[1]
        assert etag not in seen, change
        seen.add(etag)
    # Same content on another address: another ETag (the listen address is part of it).
    post(api, "private", {"listen_address": "192.0.2.11"})
    assert show(api, "private", "192.0.2.11")[1] not in seen


# -- PUT and PATCH ----------------------------------------------------------------------------------------------


def test_patch_merges_config_and_keeps_what_is_absent(api: httpx.Client, site: Site) -> None:
    post(api, "private", {
        "listen_address": "192.0.2.10", "description": "keep me",
        "config": {"target_address": "10.0.0.5", "user.a": "1", "user.b": "2"},
        "ports": [port()],
    })  # fmt: skip
    r = api.patch(url("private", "192.0.2.10"), json={"config": {"user.a": "new", "user.b": "", "user.c": "3"}})
    assert r.status_code == 200, r.text
    patched = r.json()["forward"]
    # Request wins, "" deletes, keys not sent are kept; ports and description are kept when absent.
    assert patched["config"] == {"target_address": "10.0.0.5", "user.a": "new", "user.c": "3"}
    assert patched["ports"] == [{"description": "", "protocol": "tcp", "listen_port": "80", "target_port": "",
                                 "target_address": "10.0.0.6"}]  # fmt: skip
    assert patched["description"] == "keep me"
    assert show(api, "private", "192.0.2.10")[0] == patched

    # Ports given replace the whole list (no per-port merge); config and description stay.
    r = api.patch(url("private", "192.0.2.10"), json={"ports": [port(protocol="udp", listen_port="53")]})
    assert r.status_code == 200, r.text
    patched = r.json()["forward"]
    assert [(p["protocol"], p["listen_port"]) for p in patched["ports"]] == [("udp", "53")]
    assert patched["config"] == {"target_address": "10.0.0.5", "user.a": "new", "user.c": "3"}
    assert patched["description"] == "keep me"

    r = api.patch(url("private", "192.0.2.10"), json={"ports": [], "description": "", "config": {"target_address": ""}})
    assert r.status_code == 200, r.text
    patched = r.json()["forward"]
    assert (patched["ports"], patched["description"]) == ([], "")
    assert patched["config"] == {"user.a": "new", "user.c": "3"}


def test_put_replaces_everything(api: httpx.Client, site: Site) -> None:
    created = post(api, "private", {
        "listen_address": "192.0.2.10", "description": "old",
        "config": {"target_address": "10.0.0.5", "user.a": "1"}, "ports": [port()],
    })  # fmt: skip
    r = api.put(url("private", "192.0.2.10"), json={"description": "new"})
    assert r.status_code == 200, r.text
    replaced = r.json()["forward"]
    assert lxd(replaced) == {"listen_address": "192.0.2.10", "description": "new", "config": {}, "ports": [],
                             "location": ""}  # fmt: skip
    assert replaced["revision_number"] == created["revision_number"] + 1
    assert replaced["id"] == created["id"]
    assert replaced["created_at"] == created["created_at"]
    assert show(api, "private", "192.0.2.10")[0] == replaced

    r = api.put(url("private", "192.0.2.10"), json={"forward": {"config": {"user.b": "2"}, "ports": [port()]}})
    assert r.status_code == 200, r.text
    replaced = r.json()["forward"]
    assert (replaced["description"], replaced["config"]) == ("", {"user.b": "2"})
    assert len(replaced["ports"]) == 1


def test_update_emits_one_event(api: httpx.Client, site: Site) -> None:
    created = post(api, "private", {"listen_address": "192.0.2.10"})
    mark = revision(api)
    r = api.patch(url("private", "192.0.2.10"), json={"config": {"target_address": "10.0.0.5"}})
    assert r.status_code == 200, r.text
    assert events_since(api, mark) == [("forward", "update", created["id"])]


def test_nothing_changed_does_not_bump_revision(api: httpx.Client, site: Site) -> None:
    body = {"description": "same", "config": {"target_address": "10.0.0.5"}, "ports": [port(target_port="8080")]}
    created = post(api, "private", {"listen_address": "192.0.2.10", **body})
    _shown, etag = show(api, "private", "192.0.2.10")
    mark = revision(api)
    for method, change in (
        ("PUT", body),
        ("PUT", {**body, "description": "  same ", "config": {"target_address": "10.0.0.5", "user.gone": ""}}),
        ("PATCH", {}),
        ("PATCH", {"config": {}}),
        ("PATCH", {"ports": [port(target_port="8080", listen_port=" 80")]}),
        ("PATCH", {"description": "same"}),
    ):
        r = api.request(method, url("private", "192.0.2.10"), json=change, headers={"If-Match": etag})
        assert r.status_code == 200, (method, change, r.text)
        assert r.json()["forward"] == created, (method, change)
    assert show(api, "private", "192.0.2.10") == (created, etag)
    assert events_since(api, mark) == []


# -- IPv4 and IPv6 --------------------------------------------------------------------------------------------


def test_ipv4_and_ipv6_forwards_side_by_side(api: httpx.Client, site: Site) -> None:
    v4 = post(api, "private", {
        "listen_address": "192.0.2.10", "config": {"target_address": "10.0.0.5"},
        "ports": [port(listen_port="80,90-100", target_port="443", target_address="10.0.0.6"),
                  port(listen_port="82-83,84", target_port="90,91-92", target_address="10.0.0.7")],
    })  # fmt: skip
    v6 = post(api, "private", {
        "listen_address": "2001:db8::10", "config": {"target_address": "fd00::5"},
        "ports": [port(listen_port="80,90-100", target_port="443", target_address="fd00::6"),
                  port(protocol="udp", listen_port="53", target_address="fd00::7")],
    })  # fmt: skip
    listed = api.get(url("private")).json()["forwards"]
    assert [f["id"] for f in listed] == [v4["id"], v6["id"]]
    assert show(api, "private", "2001:db8::10")[0] == v6
    # Addresses routed to the uplink (cloudnet:routes) work as listen addresses, in both families.
    post(api, "private", {"listen_address": "198.51.100.7", "config": {"target_address": "10.0.0.8"}})
    post(api, "private", {"listen_address": "2001:db8:100::7", "config": {"target_address": "fd00::8"}})
    assert len(api.get(url("private")).json()["forwards"]) == 4


def test_port_rules_accept_what_they_should(api: httpx.Client, site: Site) -> None:
    created = post(api, "private", {
        "listen_address": "192.0.2.10", "config": {"target_address": "10.0.0.5"},
        "ports": [
            port(listen_port="1"),
            port(listen_port="65535", target_port="65535"),
            port(listen_port="2-3", target_port="1"),           # many-to-one
            port(listen_port="80-81", target_address="10.0.0.7"),
            port(protocol="udp", listen_port="80", target_port="90"),  # tcp 80 and udp 80 coexist
            port(listen_port="82-83,84", target_port="90,91-92"),  # index-wise
            port(listen_port="22,85", target_port="22,443"),
            port(listen_port="1000-2000", target_port="3000-4000", target_address="10.0.0.254"),
        ],
    })  # fmt: skip
    assert len(created["ports"]) == 8
    # The network's own addresses are fine as targets as long as they are not its network/broadcast address.
    r = api.put(url("private", "192.0.2.10"), json={"config": {"target_address": "10.0.0.1"}})
    assert r.status_code == 200, r.text


# -- bad input: every rule of reference §1.3, each leaving everything as it was ---------------------------------


@dataclass(frozen=True)
class Bad:
    name: str
    body: Any
    status: int
    message: str
    method: str = "POST"
    network: str = "private"
    address: str | None = None  # path address (PUT/PATCH/DELETE)
    headers: dict[str, str] | None = None


L = "192.0.2.77"  # a free, valid listen address
L6 = "2001:db8::77"
CFG = {"target_address": "10.0.0.5"}
BAD: list[Bad] = [
    # Listen address (rules 1-7, cloudnet's uplink rules)
    Bad("unparsable listen address", {"listen_address": "not-an-ip"}, 400,
        'Failed parsing address forward listen address "not-an-ip"'),
    Bad("IPv6 zone", {"listen_address": "2001:db8::5%eth0"}, 400,
        'Failed parsing address forward listen address "2001:db8::5%eth0"'),
    Bad("empty listen address", {"listen_address": ""}, 400, 'Failed parsing address forward listen address ""'),
    Bad("IPv4 with leading zeros", {"listen_address": "192.0.2.077"}, 400,
        'Failed parsing address forward listen address "192.0.2.077"'),
    Bad("missing listen address", {"description": "x"}, 400, "listen_address"),
    Bad("unspecified IPv4", {"listen_address": "0.0.0.0"}, 400, 'Cannot use unspecified address: "0.0.0.0"'),
    Bad("unspecified IPv6", {"listen_address": "::"}, 400, 'Cannot use unspecified address: "::"'),
    Bad("duplicate on the same network", {"listen_address": "192.0.2.10"}, 409,
        "A forward for that listen address already exists"),
    Bad("duplicate, non-canonical", {"listen_address": "2001:DB8:0::10"}, 409,
        "A forward for that listen address already exists"),
    Bad("another network's forward", {"listen_address": "192.0.2.50"}, 400,
        'Listen address "192.0.2.50" overlaps with another network or NIC'),
    Bad("another network's IPv4 SNAT address", {"listen_address": "192.0.2.60"}, 400,
        'Listen address "192.0.2.60" overlaps with another network or NIC'),
    Bad("another network's IPv6 SNAT address", {"listen_address": "2001:db8::60"}, 400,
        'Listen address "2001:db8::60" overlaps with another network or NIC'),
    Bad("router gateway port (IPv4)", {"listen_address": "{gw4}"}, 400, 'Listen address "{gw4}" is already in use'),
    Bad("router gateway port (IPv6)", {"listen_address": "{gw6}"}, 400, 'Listen address "{gw6}" is already in use'),
    Bad("a port on the uplink", {"listen_address": "192.0.2.30"}, 400, 'Listen address "192.0.2.30" is already in use'),
    Bad("uplink subnet gateway", {"listen_address": "192.0.2.1"}, 400, 'Listen address "192.0.2.1" is already in use'),
    Bad("uplink IPv6 subnet gateway", {"listen_address": "2001:db8::1"}, 400,
        'Listen address "2001:db8::1" is already in use'),
    Bad("outside uplink subnets and routes", {"listen_address": "203.0.113.5"}, 400,
        'Uplink network does not contain "203.0.113.5" in its routes'),
    Bad("outside uplink (IPv6)", {"listen_address": "2001:db8:200::1"}, 400,
        'Uplink network does not contain "2001:db8:200::1" in its routes'),
    Bad("an internal address", {"listen_address": "10.0.0.7"}, 400,
        'Uplink network does not contain "10.0.0.7" in its routes'),
    Bad("network without uplink", {"listen_address": L}, 400, "has no uplink", network="isolated"),
    Bad("unknown network", {"listen_address": L}, 404, "Network not found", network="nope"),
    Bad("unknown attribute", {"listen_address": L, "location": "x"}, 400, "Unrecognized attribute(s) 'location'"),
    Bad("body not an object", ["x"], 400, "Body contains invalid data"),
    Bad("description not a string", {"listen_address": L, "description": 5}, 400, "Invalid description"),
    Bad("description too long", {"listen_address": L, "description": "d" * 256}, 400, "Invalid description"),
    # Config (rules 8-9)
    Bad("invalid config key", {"listen_address": L, "config": {"bogus": "1"}}, 400, 'Invalid option "bogus"'),
    Bad("network key on a forward", {"listen_address": L, "config": {"ipv4.nat.address": "192.0.2.9"}}, 400,
        'Invalid option "ipv4.nat.address"'),
    Bad("config value not a string", {"listen_address": L, "config": {"user.a": 1}}, 400, "Invalid config"),
    Bad("config not a map", {"listen_address": L, "config": ["user.a"]}, 400, "Invalid config"),
    Bad("unparsable default target", {"listen_address": L, "config": {"target_address": "nope"}}, 400,
        "Invalid default target address"),
    Bad("default target IPv6 for IPv4", {"listen_address": L, "config": {"target_address": "fd00::5"}}, 400,
        "Cannot mix IP versions in listen address and default target address"),
    Bad("default target IPv4 for IPv6", {"listen_address": L6, "config": CFG}, 400,
        "Cannot mix IP versions in listen address and default target address"),
    Bad("default target outside subnet", {"listen_address": L, "config": {"target_address": "10.9.0.5"}}, 400,
        "Default target address is not within the network subnet"),
    Bad("default target outside IPv6 subnet", {"listen_address": L6, "config": {"target_address": "fd01::5"}}, 400,
        "Default target address is not within the network subnet"),
    Bad("default target broadcast", {"listen_address": L, "config": {"target_address": "10.0.0.255"}}, 400,
        "Default target address cannot be a broadcast address"),
    Bad("default target network address", {"listen_address": L, "config": {"target_address": "10.0.0.0"}}, 400,
        "Default target address cannot be a network address"),
    Bad("default target IPv6 network address", {"listen_address": L6, "config": {"target_address": "fd00::"}}, 400,
        "Default target address cannot be a network address"),
    # Ports (rules 10-18, 1..65535)
    Bad("protocol upper case", {"listen_address": L, "ports": [port(protocol="TCP")]}, 400,
        "Invalid port protocol in port specification 0, protocol must be one of: tcp, udp"),
    Bad("protocol icmp, second spec", {"listen_address": L, "ports": [port(), port(protocol="icmp", listen_port="81")]},
        400, "Invalid port protocol in port specification 1, protocol must be one of: tcp, udp"),
    Bad("protocol missing", {"listen_address": L, "ports": [{"listen_port": "80", "target_address": "10.0.0.6"}]},
        400, "Invalid port protocol in port specification 0"),
    Bad("unparsable target", {"listen_address": L, "ports": [port(), port(listen_port="81", target_address="x")]},
        400, "Invalid target address in port specification 1"),
    Bad("missing target", {"listen_address": L, "ports": [{"protocol": "tcp", "listen_port": "80"}]}, 400,
        "Invalid target address in port specification 0"),
    Bad("target equal to default target", {"listen_address": L, "config": CFG,
        "ports": [port(target_address="10.0.0.5")]}, 400,
        "Target address is same as default target address in port specification 0"),
    Bad("target family mix", {"listen_address": L, "ports": [port(target_address="fd00::6")]}, 400,
        "Cannot mix IP versions in listen address and port specification 0 target address"),
    Bad("target outside subnet", {"listen_address": L, "ports": [port(target_address="10.9.0.6")]}, 400,
        "Target address is not within the network subnet in port specification 0"),
    Bad("target in a subnet off the uplink router", {"listen_address": L, "ports": [port(target_address="10.3.0.6")]},
        400, 'Target address "10.3.0.6" is not reachable from the uplink router'),
    Bad("target broadcast", {"listen_address": L, "ports": [port(target_address="10.0.0.255")]}, 400,
        "Target address cannot be a broadcast address"),
    Bad("target network address", {"listen_address": L, "ports": [port(target_address="10.0.0.0")]}, 400,
        "Target address cannot be a network address"),
    Bad("missing listen port", {"listen_address": L, "ports": [{"protocol": "tcp", "target_address": "10.0.0.6"}]},
        400, "Missing listen port in port specification 0"),
    Bad("empty listen port", {"listen_address": L, "ports": [port(listen_port="")]}, 400,
        "Missing listen port in port specification 0"),
    Bad("blank listen port", {"listen_address": L, "ports": [port(listen_port="  ")]}, 400,
        "Missing listen port in port specification 0"),
    Bad("range 80-80", {"listen_address": L, "ports": [port(listen_port="80-80")]}, 400,
        "Invalid listen port in port specification 0: End port should be higher than start port"),
    Bad("range 90-80", {"listen_address": L, "ports": [port(listen_port="90-80")]}, 400,
        "Invalid listen port in port specification 0: End port should be higher than start port"),
    Bad("not a number", {"listen_address": L, "ports": [port(listen_port="a")]}, 400,
        "Invalid listen port in port specification 0"),
    Bad("three-part range", {"listen_address": L, "ports": [port(listen_port="80-90-100")]}, 400,
        'Invalid listen port in port specification 0: Invalid port range "80-90-100"'),
    Bad("port 0", {"listen_address": L, "ports": [port(listen_port="0")]}, 400,
        "Invalid listen port in port specification 0"),
    Bad("port 65536", {"listen_address": L, "ports": [port(listen_port="65536")]}, 400,
        "Invalid listen port in port specification 0"),
    Bad("range ending at 65536", {"listen_address": L, "ports": [port(listen_port="65530-65536")]}, 400,
        "Invalid listen port in port specification 0"),
    Bad("empty item", {"listen_address": L, "ports": [port(listen_port="80,,81")]}, 400,
        "Invalid listen port in port specification 0"),
    Bad("digits with underscore", {"listen_address": L, "ports": [port(listen_port="8_0")]}, 400,
        "Invalid listen port in port specification 0"),
    Bad("listen port not a string", {"listen_address": L, "ports": [port(listen_port=80)]}, 400,
        "Missing listen port in port specification 0"),
    Bad("duplicate listen port in one spec", {"listen_address": L, "ports": [port(listen_port="80,80")]}, 400,
        'Duplicate listen port 80 for protocol "tcp" in port specification 0'),
    Bad("duplicate through a range", {"listen_address": L, "ports": [port(listen_port="80-85,83")]}, 400,
        'Duplicate listen port 83 for protocol "tcp" in port specification 0'),
    Bad("duplicate across specs", {"listen_address": L, "ports": [
        port(listen_port="80-81"), port(listen_port="81", target_address="10.0.0.7")]}, 400,
        'Duplicate listen port 81 for protocol "tcp" in port specification 1'),
    Bad("duplicate udp across specs", {"listen_address": L, "ports": [
        port(protocol="udp", listen_port="53"), port(listen_port="53"), port(protocol="udp", listen_port="50-60")]},
        400, 'Duplicate listen port 53 for protocol "udp" in port specification 2'),
    Bad("one listen port, two target ports", {"listen_address": L, "ports": [port(target_port="80-81")]}, 400,
        "Mismatch of listen port(s) and target port(s) count in port specification 0"),
    Bad("three listen ports, two target ports", {"listen_address": L, "ports": [
        port(listen_port="82,83,84", target_port="90,91")]}, 400,
        "Mismatch of listen port(s) and target port(s) count in port specification 0"),
    Bad("unparsable target port", {"listen_address": L, "ports": [port(target_port="x")]}, 400,
        "Invalid target port in port specification 0"),
    Bad("target port 0", {"listen_address": L, "ports": [port(target_port="0")]}, 400,
        "Invalid target port in port specification 0"),
    Bad("target port 70000", {"listen_address": L, "ports": [port(target_port="70000")]}, 400,
        "Invalid target port in port specification 0"),
    Bad("target range backwards", {"listen_address": L, "ports": [port(target_port="90-80")]}, 400,
        "Invalid target port in port specification 0"),
    Bad("target port not a string", {"listen_address": L, "ports": [port(target_port=8080)]}, 400,
        "Invalid target port in port specification 0"),
    Bad("unknown port field", {"listen_address": L, "ports": [port(snat=True)]}, 400,
        "Invalid port specification 0"),
    Bad("port not an object", {"listen_address": L, "ports": ["80"]}, 400, "Invalid port specification 0"),
    Bad("ports not a list", {"listen_address": L, "ports": {"listen_port": "80"}}, 400, "Invalid ports"),
    # Updates run the same rules, and a few of their own.
    Bad("PUT with a bad port", {"ports": [port(protocol="TCP")]}, 400,
        "Invalid port protocol in port specification 0", method="PUT", address="192.0.2.10"),
    Bad("PUT onto a subnet off the uplink router", {"config": {"target_address": "10.3.0.5"}}, 400,
        'Target address "10.3.0.5" is not reachable from the uplink router', method="PUT", address="192.0.2.10"),
    Bad("PUT with an invalid option", {"config": {"bogus": "1"}}, 400, 'Invalid option "bogus"',
        method="PUT", address="192.0.2.10"),
    Bad("PATCH with an invalid option", {"config": {"bogus": "1"}}, 400, 'Invalid option "bogus"',
        method="PATCH", address="192.0.2.10"),
    Bad("PATCH config not a map", {"config": ["user.a"]}, 400, "Invalid config", method="PATCH", address="192.0.2.10"),
    Bad("PATCH ports not a list", {"ports": "80"}, 400, "Invalid ports", method="PATCH", address="192.0.2.10"),
    Bad("PATCH port target equal to the kept default", {"ports": [port(target_address="10.0.0.5")]}, 400,
        "Target address is same as default target address in port specification 0",
        method="PATCH", address="192.0.2.10"),
    Bad("PATCH default equal to a kept port's target", {"config": {"target_address": "10.0.0.6"}}, 400,
        "Target address is same as default target address in port specification 0",
        method="PATCH", address="192.0.2.10"),
    Bad("PATCH duplicate port on IPv6 forward", {"ports": [
        port(target_address="fd00::6"), port(target_address="fd00::7")]}, 400,
        'Duplicate listen port 80 for protocol "tcp" in port specification 1', method="PATCH", address="2001:db8::10"),
    Bad("PUT mixes families on IPv6 forward", {"config": CFG}, 400,
        "Cannot mix IP versions in listen address and default target address", method="PUT", address="2001:db8::10"),
    Bad("PUT changing the listen address", {"listen_address": "192.0.2.11"}, 400,
        "Unrecognized attribute(s) 'listen_address'", method="PUT", address="192.0.2.10"),
    Bad("PATCH description not a string", {"description": ["x"]}, 400, "Invalid description",
        method="PATCH", address="192.0.2.10"),
    Bad("PUT with a stale ETag", {"description": "x"}, 412, "ETag does not match: ", method="PUT",
        address="192.0.2.10", headers={"If-Match": '"stale"'}),
    Bad("PATCH with a stale ETag", {"description": "x"}, 412, STALE, method="PATCH", address="192.0.2.10",
        headers={"If-Match": "stale"}),
    Bad("PUT on an unknown forward", {"description": "x"}, 404, "Network forward not found", method="PUT",
        address="192.0.2.11"),
    Bad("PUT through another network", {"description": "x"}, 404, "Network forward not found", method="PUT",
        network="other", address="192.0.2.10"),
    Bad("DELETE an unknown forward", None, 404, "Network forward not found", method="DELETE", address="192.0.2.11"),
    Bad("DELETE through another network", None, 404, "Network forward not found", method="DELETE",
        network="other", address="192.0.2.10"),
    Bad("DELETE on an unknown network", None, 404, "Network not found", method="DELETE", network="nope",
        address="192.0.2.10"),
]  # fmt: skip


def bad_input_world(api: httpx.Client, site: Site) -> None:
    """What the table's cases run against: forwards of `private` (one each family), a subnet of `private` off the
    router, another network with a forward and SNAT addresses, a port on the uplink, and a network without
    uplink."""
    post(api, "private", {"listen_address": "192.0.2.10", "config": CFG, "ports": [port()]})
    create(api, "subnets", "subnet", network_id=site.networks["private"]["id"], cidr="10.3.0.0/24")
    post(api, "private", {"listen_address": "2001:db8::10", "ports": [port(target_address="fd00::6")]})
    other = site.network("other", "10.1.0.0/24", "fd01::/64")
    post(api, "other", {"listen_address": "192.0.2.50"})
    r = api.put(
        f"/networks/{other['id']}",
        json={"network": {"config": {"ipv4.nat.address": "192.0.2.60", "ipv6.nat.address": "2001:db8::60"}}},
    )
    assert r.status_code == 200, r.text
    create(api, "ports", "port", network_id=site.public["id"], fixed_ips=[{"ip_address": "192.0.2.30"}])
    site.network("isolated", "10.2.0.0/24", uplink=False)


def test_bad_inputs_are_refused_and_change_nothing(api: httpx.Client, site: Site) -> None:
    bad_input_world(api, site)
    gw4, gw6 = sorted(site.gateway_ips, key=lambda a: ":" in a)
    before = snapshot(api)
    failures: list[str] = []
    for case in BAD:
        text = json.dumps(case.body).replace("{gw4}", gw4).replace("{gw6}", gw6)
        message = case.message.replace("{gw4}", gw4).replace("{gw6}", gw6)
        path = url(case.network, case.address)
        mark = revision(api)
        kwargs: dict[str, Any] = {"headers": {"Content-Type": "application/json", **(case.headers or {})}}
        if case.body is not None:
            kwargs["content"] = text
        try:
            # A connection of its own: one the server drops must not poison `api`'s pool for the checks.
            with httpx.Client(base_url=api.base_url, headers=api.headers, timeout=30) as one:
                r = one.request(case.method, path, **kwargs)
        except httpx.TransportError as exc:  # the server dropped the connection (an unhandled error)
            failures.append(f"{case.name}: expected {case.status}, the request failed: {exc!r}")
            continue
        try:
            got = str(r.json()["NeutronError"]["message"])
        except (ValueError, KeyError, TypeError):
            got = r.text  # not an error at all
        if r.status_code != case.status or message not in got:
            failures.append(f"{case.name}: expected {case.status} with {message!r}, got {r.status_code} {got!r}")
        if events_since(api, mark):
            failures.append(f"{case.name}: emitted {events_since(api, mark)}")
        if r.is_success and case.method == "POST":  # wrongly created: remove it, so later cases still mean something
            api.delete(url(case.network, quote(r.json()["forward"]["listen_address"], safe="")))
        if snapshot(api) != before:
            failures.append(f"{case.name}: changed the stored state")
            before = snapshot(api)
    assert not failures, "\n".join(failures)


def test_every_bad_create_would_succeed_once_fixed(api: httpx.Client, site: Site) -> None:
    """Each rule is exercised alone: the same network and a valid body are accepted (so a 400 above comes
    from the rule named, not from something else in the request)."""
    bad_input_world(api, site)
    r = api.post(url("private"), json={"listen_address": L, "config": CFG, "ports": [port(target_address="10.0.0.7")]})
    assert r.status_code == 201, r.text
    r = api.post(url("private"), json={"listen_address": L6, "config": {"target_address": "fd00::5"},
                                       "ports": [port(target_address="fd00::6", target_port="8080")]})  # fmt: skip
    assert r.status_code == 201, r.text


def test_port_lists_of_hostile_size_are_refused_without_expanding_them(api: httpx.Client, site: Site) -> None:
    """Bodies of up to the 1 MiB the API reads whose ranges, expanded, would be hundreds of millions of ports or
    more: each answered 400 with the reason (the client's time limit fails the test if one is expanded)."""
    whole = port(listen_port="1-65535", target_port="1-65535")
    hostile: list[tuple[Json, str]] = [
        # ~10,000 specifications (about 650 million ports): refused for their number.
        ([whole] * 10_000, "Too many port specifications: 10000 (at most 1000 a forward)"),
        # One more than allowed, each small.
        ([port(listen_port=str(p)) for p in range(1, 1002)], "Too many port specifications: 1001"),
        # One specification listing the whole range 100,000 times: its first repeat ends the check.
        ([port(listen_port=",".join(["1-65535"] * 100_000))], 'Duplicate listen port 1 for protocol "tcp"'),
        # The whole range 100,000 times as target ports: counted, not expanded.
        ([port(listen_port="1-65535", target_port=",".join(["1-65535"] * 100_000))], "Mismatch of listen port(s)"),
    ]
    before = snapshot(api)
    with httpx.Client(base_url=api.base_url, headers=api.headers, timeout=10) as client:
        for ports, message in hostile:
            body = json.dumps({"listen_address": L, "ports": ports})
            assert len(body) <= 1 << 20
            r = client.post(url("private"), content=body, headers={"Content-Type": "application/json"})
            error(r, 400, message)
    assert snapshot(api) == before
    # At the limit, a thousand specifications are a forward like any other.
    fwd = post(api, "private", {"listen_address": L, "ports": [port(listen_port=str(p)) for p in range(1, 1001)]})
    assert len(fwd["ports"]) == 1000


# -- life cycle with the network ------------------------------------------------------------------------------


def test_deleting_a_network_deletes_its_forwards(api: httpx.Client, site: Site, server: RunningServer) -> None:
    """LXD deletes a network's forwards with it. A network with forwards keeps its router link (refused:
    test_forward_lifecycle.py), so this happens to forwards left on a detached network by earlier versions."""
    other = site.network("other", "10.1.0.0/24")
    kept = post(api, "other", {"listen_address": "192.0.2.11"})
    private = site.networks["private"]
    for sub in site.subnets["private"]:
        detach(api, site.router["id"], sub["id"])
    fwd_id = "00000000-0000-4000-8000-00000000f0f0"
    with server.store.write() as tx:  # as an earlier version left it
        tx.conn.execute(t.forwards.insert().values(
            id=fwd_id, network_id=private["id"], listen_address="192.0.2.10", description="", config=CFG, ports=[],
            project_id=private["project_id"], created_at=tx.now, updated_at=tx.now, revision_number=0))  # fmt: skip
    mark = revision(api)
    r = api.delete(f"/networks/{private['id']}")
    assert r.status_code == 204, r.text
    assert ("forward", "delete", fwd_id) in events_since(api, mark)
    error(api.get(url(private["id"])), 404, "Network not found")
    # Its listen address is free for another network now; the other network's forward is untouched.
    moved = post(api, "other", {"listen_address": "192.0.2.10", "config": {"target_address": "10.1.0.5"}})
    assert moved["network_id"] == other["id"]
    assert [f["id"] for f in api.get(url("other")).json()["forwards"]] == [moved["id"], kept["id"]]


# -- projects -------------------------------------------------------------------------------------------------------


def test_projects_only_reach_their_own_networks_forwards(server: RunningServer, tokens: dict[str, Any]) -> None:
    def client(token: str) -> httpx.Client:
        return httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": token}, timeout=30)

    with client("admin-token") as admin, client("alice-token") as alice, client("bob-token") as bob:
        public = create(admin, "networks", "network", name="public", **{"router:external": True})
        create(admin, "subnets", "subnet", network_id=public["id"], cidr=PUBLIC_V4)
        net = create(alice, "networks", "network", name="mine")
        sub = create(alice, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
        router = create(alice, "routers", "router", name="r", external_gateway_info={"network_id": public["id"]})
        attach(alice, router["id"], sub["id"])
        fwd = post(alice, "mine", {"listen_address": "192.0.2.10", "config": CFG})
        assert fwd["project_id"] == "alice"

        error(bob.get(url(net["id"])), 404, "Network not found")
        error(bob.get(url("mine")), 404, "Network not found")
        error(bob.get(url(net["id"], "192.0.2.10")), 404, "Network not found")
        error(bob.put(url(net["id"], "192.0.2.10"), json={"description": "x"}), 404, "Network not found")
        error(bob.delete(url(net["id"], "192.0.2.10")), 404, "Network not found")
        error(bob.post(url(net["id"]), json={"listen_address": "192.0.2.11"}), 404, "Network not found")
        # Not even on the shared external network.
        error(bob.post(url(public["id"]), json={"listen_address": "192.0.2.11"}), 404, "Network not found")
        assert admin.get(url(net["id"])).json()["forwards"] == [fwd]
        assert alice.get(url("mine")).json()["forwards"] == [fwd]


def test_concurrent_creates_of_one_address_give_one_forward(api: httpx.Client, site: Site) -> None:
    """Racing creates of the same listen address (same network, other network): one wins, the rest are told
    why, none is a 500."""
    site.network("other", "10.1.0.0/24")
    barrier = threading.Barrier(8)

    def attempt(i: int) -> httpx.Response:
        with httpx.Client(base_url=api.base_url, headers=api.headers, timeout=30) as client:
            barrier.wait()
            return client.post(url("private" if i % 2 else "other"), json={"listen_address": "192.0.2.10"})

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(attempt, range(8)))
    statuses = Counter(r.status_code for r in responses)
    assert statuses[201] == 1, [(r.status_code, r.text) for r in responses]
    assert set(statuses) <= {201, 400, 409}, [(r.status_code, r.text) for r in responses]
    [winner] = [r.json()["forward"] for r in responses if r.status_code == 201]
    listed = [f for n in ("private", "other") for f in api.get(url(n)).json()["forwards"]]
    assert listed == [winner]


def test_ipam_never_hands_a_forward_or_snat_address_to_a_port(api: httpx.Client, site: Site) -> None:
    v4 = ipaddress.ip_network(PUBLIC_V4)
    gw_v4 = next(ip for ip in site.gateway_ips if "." in ip)
    # The addresses right after the router's gateway address: what next-fit would hand out next.
    following = [str(ipaddress.ip_address(gw_v4) + i) for i in (1, 2)]
    post(api, "private", {"listen_address": following[0]})
    r = api.put(f"/networks/{site.networks['private']['id']}",
                json={"network": {"config": {"ipv4.nat.address": following[1]}}})  # fmt: skip
    assert r.status_code == 200, r.text
    ports = api.post("/ports", json={"ports": [{"network_id": site.public["id"]} for _ in range(3)]})
    assert ports.status_code == 201, ports.text
    given = {f["ip_address"] for p in ports.json()["ports"] for f in p["fixed_ips"] if "." in f["ip_address"]}
    assert given.isdisjoint(following) and all(ipaddress.ip_address(a) in v4 for a in given)
    taken = api.post("/ports", json={"port": {"network_id": site.public["id"],
                                              "fixed_ips": [{"ip_address": following[0]}]}})  # fmt: skip
    assert taken.status_code == 409 and taken.json()["NeutronError"]["type"] == "IpAddressAlreadyAllocated"

"""Availability zones (services/hosts/zones.py): hosts report a zone in their heartbeats, /v2.0/availability_zones
lists them with Neutron's filters, networks and routers take `availability_zone_hints` at create (Neutron's checks
and errors, read-only after) and show where they are realised in `availability_zones`. Hostile: unknown, too many,
malformed hints; zones a member or another host's certificate sets."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.config import ServerConfig
from tests.support.api import error
from tests.support.cli import Cli, table_dicts
from tests.support.mdata_raw import wait_for
from tests.support.server import RunningServer
from tests.support.tls import TlsServer, tls_serve

Json = dict[str, Any]


def beat(api: httpx.Client, host: str, zone: str | None = None, **report: Any) -> httpx.Response:
    body: Json = {"agent_version": "1", "report": report}
    if zone is not None:
        body["availability_zone"] = zone
    return api.put(f"/hosts/{host}", json={"host": body})


def zones(api: httpx.Client, **params: Any) -> list[tuple[str, str, str]]:
    r = api.get("/availability_zones", params=params)
    assert r.status_code == 200, r.text
    return sorted((z["name"], z["resource"], z["state"]) for z in r.json()["availability_zones"])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_hosts_report_their_zone_and_the_zones_are_listed(api: httpx.Client) -> None:
    az1, az2 = unique("az1"), unique("az2")
    assert beat(api, "h-default").json()["host"]["availability_zone"] == "nova"  # (Neutron's agents' default)
    assert beat(api, "h-1", az1).json()["host"]["availability_zone"] == az1
    assert beat(api, "h-1").json()["host"]["availability_zone"] == az1  # (a heartbeat without one keeps it)
    beat(api, "h-2", az2)
    shown = api.get("/hosts/h-2").json()["host"]
    assert shown["availability_zone"] == az2
    assert {h["name"]: h["availability_zone"] for h in api.get("/hosts").json()["hosts"]} == {
        "h-default": "nova", "h-1": az1, "h-2": az2}  # fmt: skip
    listed = zones(api)
    assert listed == sorted((z, res, "available") for z in ("nova", az1, az2) for res in ("network", "router"))
    # Neutron's filters (name, resource, state), and the agent filters the sdk sends for name and resource.
    assert zones(api, name=az1) == [(az1, "network", "available"), (az1, "router", "available")]
    assert zones(api, availability_zone=az2, resource="router") == [(az2, "router", "available")]
    assert zones(api, agent_type="DHCP agent", name=az1) == [(az1, "network", "available")]
    assert zones(api, state="unavailable") == []
    only = api.get("/availability_zones", params={"name": az1, "fields": "name"}).json()["availability_zones"]
    assert only == [{"name": az1}, {"name": az1}]
    error(api.get("/availability_zones", params={"colour": "red"}), 400)
    # A host that moves: its zone is the new one, the old one goes when no host is in it.
    beat(api, "h-2", az1)
    assert az2 not in {name for name, _r, _s in zones(api)}


def test_a_zone_whose_hosts_are_silent_is_unavailable(server_config: ServerConfig, api: httpx.Client) -> None:
    server_config.agent_down_time = 1.0  # (read per request: the zone's state follows at once)
    zone = unique("quiet")
    beat(api, "h-quiet", zone)
    wait_for(lambda: zones(api, name=zone, resource="network") == [(zone, "network", "unavailable")], timeout=15,
             what="the silent host's zone to be unavailable")  # fmt: skip
    beat(api, "h-quiet", zone)
    assert zones(api, name=zone, state="available") == [(zone, "network", "available"), (zone, "router", "available")]


def test_hints_on_networks_and_routers(api: httpx.Client) -> None:
    az1, az2 = unique("az1"), unique("az2")
    beat(api, "h-1", az1)
    beat(api, "h-2", az2)
    r = api.post("/networks", json={"network": {"name": "n", "availability_zone_hints": [az1]}})
    assert r.status_code == 201, r.text
    net = r.json()["network"]
    assert (net["availability_zone_hints"], net["availability_zones"]) == ([az1], [])
    sub = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.70.0.0/24"}}).json()["subnet"]
    # Realised where its ports are bound: a port on h-2 puts it in az2, whatever it hinted (no scheduler to steer).
    api.post("/ports", json={"port": {"network_id": net["id"], "binding:host_id": "h-2"}}).raise_for_status()
    assert api.get(f"/networks/{net['id']}").json()["network"]["availability_zones"] == [az2]
    listed = api.get("/networks", params={"id": net["id"]}).json()["networks"][0]
    assert (listed["availability_zone_hints"], listed["availability_zones"]) == ([az1], [az2])

    r = api.post("/routers", json={"router": {"name": "r", "availability_zone_hints": [az2, az1]}})
    assert r.status_code == 201, r.text
    router = r.json()["router"]
    assert (router["availability_zone_hints"], router["availability_zones"]) == ([az2, az1], [])
    api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).raise_for_status()
    assert api.get(f"/routers/{router['id']}").json()["router"]["availability_zones"] == [az2]
    # Read-only after create, as Neutron (allow_put False): a 400 naming it, nothing changed.
    for path, member in ((f"/networks/{net['id']}", "network"), (f"/routers/{router['id']}", "router")):
        r = api.put(path, json={member: {"availability_zone_hints": [az2]}})
        assert error(r, 400) == "Cannot update read-only attribute availability_zone_hints"
    assert api.get(f"/networks/{net['id']}").json()["network"]["availability_zone_hints"] == [az1]
    # No hints: [] (Neutron's default).
    plain = api.post("/routers", json={"router": {"name": "plain"}}).json()["router"]
    assert plain["availability_zone_hints"] == []


def test_hostile_hints_are_refused_as_neutron_refuses_them(api: httpx.Client) -> None:
    az1 = unique("az1")
    beat(api, "h-1", az1)
    before = {k: len(api.get(f"/{k}").json()[k]) for k in ("networks", "routers")}
    ghost = unique("ghost")
    for collection, member in (("networks", "network"), ("routers", "router")):
        r = api.post(f"/{collection}", json={member: {"name": "x", "availability_zone_hints": [az1, ghost]}})
        assert error(r, 404, "AvailabilityZoneNotFound") == f"AvailabilityZone {ghost} could not be found."
        cases = [
            ([az1, az1], 400, None, f"Duplicate items in the list: '{az1}'"),
            ("az1", 400, None, "is not a list"),
            ([1], 400, None, "'1' is not a valid string"),
            (["a" * 300], 400, "InvalidInput", "Too many availability_zone_hints specified"),
            ([f"z{i}" for i in range(60)], 400, "InvalidInput", "Too many availability_zone_hints specified"),
            ([""] * 100_000, 400, "InvalidInput", "Too many availability_zone_hints specified"),
            (["nova\x00x"], 400, None, "Null characters are not allowed"),
            (["a:b,c"], 404, "AvailabilityZoneNotFound", "AvailabilityZone a:b,c could not be found."),
        ]
        for hints, status, kind, words in cases:
            r = api.post(f"/{collection}", json={member: {"name": "x", "availability_zone_hints": hints}})
            assert words in error(r, status, kind), (hints if len(json.dumps(hints)) < 99 else "long", r.text)
    assert {k: len(api.get(f"/{k}").json()[k]) for k in ("networks", "routers")} == before


def test_zone_names_are_checked_and_only_admins_or_the_hosts_agent_set_them(
        api: httpx.Client, users: dict[str, httpx.Client]) -> None:  # fmt: skip
    for bad in ("", "a:b", "a,b", "a=b", "a b", "-lead", "z" * 256, "é", "nova\n"):
        r = beat(users["admin"], "h-bad", bad)
        assert "Invalid input for availability_zone" in error(r, 400), bad
    assert users["admin"].get("/hosts/h-bad").status_code == 404  # (nothing registered)
    beat(users["admin"], "h-ok", "az-ok")
    # A member may neither register a host nor move one to another zone (Neutron: agents are admin-only).
    r = beat(users["alice"], "h-ok", "az-evil")
    assert error(r, 403) == "Only admins (agents) may manage hosts"
    assert users["admin"].get("/hosts/h-ok").json()["host"]["availability_zone"] == "az-ok"
    # ... but a member reads the zones (Neutron's get_availability_zone: every reader).
    assert zones(users["alice"], name="az-ok") == [("az-ok", "network", "available"), ("az-ok", "router", "available")]


@pytest.fixture
def tls_server(tmp_path: Path) -> Any:
    with tls_serve(tmp_path / "server") as s:
        yield s


def test_a_hosts_certificate_sets_its_own_zone_only(tls_server: TlsServer, tmp_path: Path) -> None:
    cert = tls_server.join("host-b", tmp_path / "b")
    with tls_server.client(None, cert) as b:
        assert beat(b, "host-b", "az-b").json()["host"]["availability_zone"] == "az-b"
        r = beat(b, "host-a", "az-b")  # B's certificate reporting a zone for A
        assert error(r, 403, "HostCertificateRefused")
    with tls_server.client() as admin:
        assert admin.get("/hosts/host-a").status_code == 404
        assert admin.get("/hosts/host-b").json()["host"]["availability_zone"] == "az-b"


def test_the_cloudnet_cli_shows_host_zones_and_agents_check_theirs(server: RunningServer, api: httpx.Client) -> None:
    cli = Cli(server.url)
    beat(api, "h-cli", "az-cli")
    assert [(h["Name"], h["Availability Zone"]) for h in table_dicts(cli.out("host", "list"))] == [
        ("h-cli", "az-cli")]  # fmt: skip
    assert cli.json("host", "show", "h-cli")["availability_zone"] == "az-cli"
    net = cli.json("network", "create", "n-cli", "--availability-zone-hint", "az-cli")
    router = cli.json("router", "create", "r-cli", "--availability-zone-hint", "az-cli")
    assert net["availability_zone_hints"] == router["availability_zone_hints"] == ["az-cli"]
    line = cli.fail("router", "create", "r-lost", "--availability-zone-hint", "az-none")
    assert line == "Error: AvailabilityZone az-none could not be found. (404 AvailabilityZoneNotFound)", line
    # A zone name the heartbeat would refuse stops the agent (and `up`) before it starts anything.
    for command in ("agent", "up"):
        line = cli.fail(command, "--availability-zone", "a:b", url=False)
        assert line.startswith("Error: --availability-zone: 'a:b' is not an availability zone name"), line


@pytest.mark.ovn_dataplane
def test_a_routers_gateway_chassis_are_those_of_its_zones(api: httpx.Client) -> None:
    beat(api, "gw-b", "az-b", uplinks={"physnet1": "eth1"})
    beat(api, "gw-c", "az-c", uplinks={"physnet1": "eth1"})
    beat(api, "plain", "az-d", uplinks={})  # (in a zone, but no uplink: no gateway)
    flat = {"provider:network_type": "flat", "provider:physical_network": "physnet1"}
    pub = api.post("/networks", json={"network": {"name": "pub", "router:external": True, **flat}}).json()["network"]
    api.post("/subnets", json={"subnet": {"network_id": pub["id"], "cidr": "192.0.2.0/24"}}).raise_for_status()

    def chassis(hints: list[str]) -> Json:
        body = {"name": "r", "availability_zone_hints": hints, "external_gateway_info": {"network_id": pub["id"]}}
        router = api.post("/routers", json={"router": body}).json()["router"]
        r = api.get(f"/routers/{router['id']}/gateway_chassis")
        assert r.status_code == 200, r.text
        return dict(r.json()["gateway_chassis"])

    assert [(c["host"], c["availability_zone"]) for c in chassis([])["chassis"]] == [("gw-b", "az-b"), ("gw-c", "az-c")]
    got = chassis(["az-c"])
    assert ([c["host"] for c in got["chassis"]], got["availability_zone_hints"]) == (["gw-c"], ["az-c"])
    assert [c["host"] for c in chassis(["az-c", "az-b"])["chassis"]] == ["gw-b", "gw-c"]  # (priorities as without)
    got = chassis(["az-d"])
    assert (got["chassis"], got["failover"]) == ([], False)
    assert got["reason"].startswith("No gateway chassis in its availability zones (az-d)"), got["reason"]

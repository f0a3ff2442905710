"""Availability zones on OVN, with hosts joined from the command line (gateway_rig.py): host A (`cloudnet up
--availability-zone az-a`, no uplink), gateway hosts B and C (`cloudnet agent --uplink ... --availability-zone`)
in az-b and az-c. Their chassis carry `ovn-cms-options` as Neutron's OVN deployments set them; a router hinted to
one zone gets only that zone's chassis as gateway chassis (Neutron's OVN L3 scheduler filters its candidates so):
its gateway port is bound there, and when that chassis dies the other zone's never takes it, while an unhinted
router beside it fails over to that other zone's chassis as before."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cloudnet.ovn import daemons
from tests.ovn.gateway_rig import EXTERNAL, Edge, Gateways, gateway_hosts, holder, kill_chassis, sb, snat_out
from tests.ovn.test_join import _routed_out, external_network, host_of
from tests.support.netserve import Responder

ZONES = {"a": "az-a", "b": "az-b", "c": "az-c"}


@dataclass
class Site:
    g: Gateways
    pinned: Edge  # hinted to az-b, its instance on A (so that without the hint it could fail over to C)
    free: Edge  # no hints, beside it: gateway chassis B then C, its instance on A
    elsewhere: dict[str, Any]  # a router hinted to az-c, its gateway on the same external network


def _edge(g: Gateways, pub: dict[str, Any], index: int, **router: Any) -> Edge:
    h = g.h
    made, inst, gateway = _routed_out(h, host_of(h, "a"), pub, index, **router)
    ports = h.api("GET", f"/ports?device_id={made['id']}&device_owner=network:router_gateway").json()["ports"]
    return Edge(made, inst, gateway, ports[0], str(ipaddress.ip_network(EXTERNAL["physnet1"])[1]))


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with gateway_hosts({k: ("--availability-zone", v) for k, v in ZONES.items()}) as g:
        h = g.h
        pub = external_network(h, "physnet1", EXTERNAL["physnet1"])
        pinned = _edge(g, pub, 1, availability_zone_hints=[ZONES["b"]])
        free = _edge(g, pub, 2)
        elsewhere = h.create("routers", "router", {"name": "elsewhere", "availability_zone_hints": [ZONES["c"]],
                                                   "external_gateway_info": {"network_id": pub["id"]}})  # fmt: skip
        outside = Responder.start(h.outside, "OUT", udp=(53,))  # (what SNAT reaches: snat_out)
        try:
            yield Site(g, pinned, free, elsewhere)
        finally:
            outside.stop()


def cms_options(g: Gateways) -> dict[str, str]:
    rows = sb(g.h, "--columns=name,other_config", "list", "Chassis")["data"]
    return {name: dict(config[1]).get("ovn-cms-options", "") for name, config in rows}


def gateway_chassis(g: Gateways, router_id: str) -> list[tuple[str, str | None]]:
    r = g.h.api("GET", f"/routers/{router_id}/gateway_chassis")
    assert r.status_code == 200, r.text
    return [(c["host"], c["availability_zone"]) for c in r.json()["gateway_chassis"]["chassis"]]


def nb_gateway_chassis(g: Gateways, port_id: str) -> list[str]:
    """The chassis of the Gateway_Chassis rows NB holds for the gateway port (where OVN may bind it)."""
    state_a = g.h.root / "a"
    nb = ["ovn-nbctl", f"--db=unix:{state_a / 'ovn' / 'ovnnb_db.sock'}", "--timeout=5", "--format=json"]
    rows = json.loads(daemons.run(state_a / "ovn", [*nb, "--columns=name,chassis_name", "list", "Gateway_Chassis"]))
    return sorted(chassis for name, chassis in rows["data"] if name.startswith(f"lrp-{port_id}_"))


def test_chassis_report_their_zones_as_neutrons_ovn_deployments_set_them(site: Site) -> None:
    h = site.g.h
    a, b, c = (host_of(h, letter) for letter in "abc")
    options = cms_options(site.g)
    assert options[a] == "availability-zones=az-a"  # (no uplink: not a gateway chassis)
    assert options[b] == "enable-chassis-as-gw,availability-zones=az-b"
    assert options[c] == "enable-chassis-as-gw,availability-zones=az-c"
    listed = h.api("GET", "/availability_zones?resource=router").json()["availability_zones"]
    assert sorted((z["name"], z["state"]) for z in listed) == [(z, "available") for z in sorted(ZONES.values())]
    hosts = {x["name"]: x["availability_zone"] for x in h.api("GET", "/hosts").json()["hosts"]}
    assert hosts == {a: "az-a", b: "az-b", c: "az-c"}


def test_a_hinted_routers_gateway_is_bound_in_its_zone_only_even_when_that_chassis_dies(site: Site) -> None:
    g, h = site.g, site.g.h
    b, c = host_of(h, "b"), host_of(h, "c")
    assert gateway_chassis(g, site.pinned.router["id"]) == [(b, "az-b")]
    assert gateway_chassis(g, site.free.router["id"]) == [(b, "az-b"), (c, "az-c")]
    assert gateway_chassis(g, site.elsewhere["id"]) == [(c, "az-c")]
    assert nb_gateway_chassis(g, site.pinned.gateway_port["id"]) == [b]
    found = h.api("GET", f"/ports?device_id={site.elsewhere['id']}&device_owner=network:router_gateway")
    elsewhere = Edge(site.elsewhere, {}, "", found.json()["ports"][0], "")
    assert nb_gateway_chassis(g, elsewhere.gateway_port["id"]) == [c]
    # Bound where hinted: az-c's router on C (its only gateway chassis), az-b's on B, SNAT out through B's uplink.
    h.until("the az-c router's gateway bound on C", lambda: holder(h, elsewhere) == c)
    h.until(
        "both routers' gateways on B, SNAT through it",
        lambda: holder(h, site.pinned) == b == holder(h, site.free) and snat_out(h, site.pinned) == "o-upb",
    )

    kill_chassis(h, "b")
    # The unhinted router fails over to C (C's BFD saw B go, and C decided every port it is a candidate for in the
    # pass that claimed it); the hinted one stays with no chassis of az-c: C is none of its gateway chassis.
    h.until("the unhinted router's gateway on C", lambda: holder(h, site.free) == c)
    h.until("the unhinted router's SNAT through C", lambda: snat_out(h, site.free) == "o-upc")
    assert holder(h, site.pinned) != c
    assert snat_out(h, site.pinned) is None  # (its gateway went with B: no other zone's chassis took it)
    assert nb_gateway_chassis(g, site.pinned.gateway_port["id"]) == [b]
    assert holder(h, site.pinned) != c

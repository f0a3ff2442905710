"""An address-scope site for traffic tests on either dataplane: an external network whose subnet comes from a pool in
scope S, and behind one router three networks: `s` from a pool in S, `t` from a pool in scope T, `n` with no pool (no
scope); an instance answering "S", "T", "N" on tcp 80 in each, and "O" on the outside."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tests.support.cloud import Cloud, ns_run
from tests.support.netserve import Responder, tcp_ask

OUT = "192.0.2.1"


@dataclass
class ScopeSite:
    cloud: Cloud
    outside: str
    router: dict[str, Any]
    gateway: str  # the router's address on the external network
    pools: dict[str, dict[str, Any]]  # "s", "t" -> the pool
    scopes: dict[str, dict[str, Any]]  # "s", "t" -> the scope
    insts: dict[str, tuple[dict[str, Any], str]]  # "s", "t", "n" -> (instance, its address)


def _pool(cloud: Cloud, prefix: str, scope_id: str) -> dict[str, Any]:
    return cloud.create("subnetpools", "subnetpool", {"prefixes": [prefix], "address_scope_id": scope_id,
                                                      "default_prefixlen": 24})  # fmt: skip


@contextmanager
def scope_site(cloud: Cloud, outside: str) -> Iterator[ScopeSite]:
    """The site, on `outside` (a namespace at 192.0.2.1/24 on physnet1's uplink) with the agent already running."""
    api = cloud.api
    scopes = {n: cloud.create("address-scopes", "address_scope", {"ip_version": 4, "name": n}) for n in "st"}
    ext_pool = _pool(cloud, "192.0.2.0/24", scopes["s"]["id"])
    pools = {"s": _pool(cloud, "10.72.0.0/16", scopes["s"]["id"]), "t": _pool(cloud, "10.73.0.0/16", scopes["t"]["id"])}
    pub = cloud.create("networks", "network", {"name": "pub", "router:external": True, "provider:network_type": "flat",
                                               "provider:physical_network": "physnet1"})  # fmt: skip
    cloud.create("subnets", "subnet", {"network_id": pub["id"], "subnetpool_id": ext_pool["id"], "cidr": "192.0.2.0/24",
                                       "gateway_ip": OUT,
                                       "allocation_pools": [{"start": "192.0.2.2", "end": "192.0.2.9"}]})  # fmt: skip
    router = cloud.create("routers", "router", {"name": "edge", "external_gateway_info": {"network_id": pub["id"]}})
    group = cloud.create("security-groups", "security_group", {"name": "open"})["id"]
    cloud.create("security-group-rules", "security_group_rule",
                 {"security_group_id": group, "direction": "ingress", "ethertype": "IPv4"})  # fmt: skip
    insts = {}
    for label, body in (("s", {"subnetpool_id": pools["s"]["id"]}), ("t", {"subnetpool_id": pools["t"]["id"]}),
                        ("n", {"cidr": "10.74.0.0/24"})):  # fmt: skip
        net = cloud.create("networks", "network", {"name": label})
        sub = cloud.create("subnets", "subnet", {"network_id": net["id"], "ip_version": 4, **body})
        r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
        port = cloud.create("ports", "port", {"network_id": net["id"], "security_groups": [group]})
        insts[label] = (cloud.instance(f"as{label}", [{"port": port["id"]}]), port["fixed_ips"][0]["ip_address"])
    router = api.get(f"/routers/{router['id']}").json()["router"]
    gateway = router["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
    for cidr in ("10.72.0.0/24", "10.73.0.0/24", "10.74.0.0/24"):  # the outside routes them to the router
        ns_run(outside, "ip", "route", "add", cidr, "via", gateway, check=True)
    responders = [Responder.start(outside, "O", tcp=(80,))]
    responders += [Responder.start(inst["netns"], label.upper(), tcp=(80,)) for label, (inst, _ip) in insts.items()]
    try:
        yield ScopeSite(cloud, outside, router, gateway, pools, scopes, insts)
    finally:
        for responder in responders:
            responder.stop()


def check_scopes(site: ScopeSite, settled: Callable[[], None], blocked: float, outside_kept_out: bool) -> None:
    """What Neutron's address scopes make of the site's traffic (`settled`: the dataplane holds what the database
    says, before what must fail is tried; `outside_kept_out`: the outside's new connections into another scope are
    dropped, as Neutron's L3 agent drops them)."""
    (s, s_ip), (t, t_ip), (n, n_ip) = site.insts["s"], site.insts["t"], site.insts["n"]
    gw, out = site.gateway, site.outside
    site.cloud.wait_for(lambda: tcp_ask(s["netns"], OUT, 80, 1) == f"O {s_ip} 80", timeout=30,
                        what="the external scope's subnet routed out with its own address")  # fmt: skip
    settled()
    assert tcp_ask(t["netns"], OUT, 80) == f"O {gw} 80"  # another scope: SNATed as before
    assert tcp_ask(n["netns"], OUT, 80) == f"O {gw} 80"  # no scope: SNATed as before
    assert tcp_ask(out, s_ip, 80) == f"S {OUT} 80"  # routed in, the client's address kept
    if outside_kept_out:
        assert tcp_ask(out, t_ip, 80, blocked) == ""  # no way in across scopes
        assert tcp_ask(out, n_ip, 80, blocked) == ""
    for src, dst in ((s, t_ip), (t, s_ip), (s, n_ip), (n, s_ip), (t, n_ip), (n, t_ip)):
        assert tcp_ask(src["netns"], dst, 80, blocked) == "", (src["name"], dst)
    # The scope is the pool's: t's pool joins S, and s and t are routed to one another, t's way out unNATed.
    r = site.cloud.api.put(f"/subnetpools/{site.pools['t']['id']}",
                           json={"subnetpool": {"address_scope_id": site.scopes["s"]["id"]}})  # fmt: skip
    assert r.status_code == 200, r.text
    site.cloud.wait_for(lambda: tcp_ask(s["netns"], t_ip, 80, 1) == f"T {s_ip} 80", timeout=30,
                        what="one scope: routed between them")  # fmt: skip
    assert tcp_ask(t["netns"], s_ip, 80) == f"S {t_ip} 80"
    site.cloud.wait_for(lambda: tcp_ask(t["netns"], OUT, 80, 1) == f"O {t_ip} 80", timeout=30,
                        what="t in the external scope: routed out")  # fmt: skip
    assert tcp_ask(n["netns"], t_ip, 80, blocked) == ""  # (no scope is still a scope of its own)

"""Address scopes on a router of the Linux dataplane, with real traffic, as Neutron's L3 agent treats them: a subnet
in the external subnet's scope reaches the outside with its own address (routed, no SNAT) and is reachable from it;
one in another scope is SNATed as before and the outside cannot open connections to it; new connections between
internal subnets of different scopes (no scope counting as one of its own) are dropped, replies never are."""

from __future__ import annotations

from typing import Any

from cloudnet.dataplane.linux import names
from tests.support.cloud import Cloud, ns_run
from tests.support.netserve import Responder, tcp_ask


def _pool(cloud: Cloud, prefix: str, scope_id: str) -> dict[str, Any]:
    return cloud.create("subnetpools", "subnetpool", {"prefixes": [prefix], "address_scope_id": scope_id,
                                                      "default_prefixlen": 24})  # fmt: skip


def test_scopes_decide_nat_and_reach(cloud: Cloud) -> None:
    api = cloud.api
    outside = cloud.outside("physnet1", "192.0.2.1/24")
    cloud.start_agent()
    inside, other = (cloud.create("address-scopes", "address_scope", {"ip_version": 4, "name": n}) for n in "st")
    ext_pool = _pool(cloud, "192.0.2.0/24", inside["id"])
    p_in, p_other = _pool(cloud, "10.72.0.0/16", inside["id"]), _pool(cloud, "10.73.0.0/16", other["id"])
    pub = cloud.create("networks", "network", {"name": "pub", "router:external": True, "provider:network_type": "flat",
                                               "provider:physical_network": "physnet1"})  # fmt: skip
    cloud.create("subnets", "subnet", {"network_id": pub["id"], "subnetpool_id": ext_pool["id"], "cidr": "192.0.2.0/24",
                                       "gateway_ip": "192.0.2.1",
                                       "allocation_pools": [{"start": "192.0.2.2", "end": "192.0.2.9"}]})  # fmt: skip
    router = cloud.create("routers", "router", {"name": "edge", "external_gateway_info": {"network_id": pub["id"]}})
    group = cloud.create("security-groups", "security_group", {"name": "open"})["id"]
    cloud.create("security-group-rules", "security_group_rule",
                 {"security_group_id": group, "direction": "ingress", "ethertype": "IPv4"})  # fmt: skip
    insts = {}
    for label, body in (("s", {"subnetpool_id": p_in["id"]}), ("t", {"subnetpool_id": p_other["id"]}),
                        ("n", {"cidr": "10.74.0.0/24"})):  # fmt: skip
        net = cloud.create("networks", "network", {"name": label})
        sub = cloud.create("subnets", "subnet", {"network_id": net["id"], "ip_version": 4, **body})
        r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
        port = cloud.create("ports", "port", {"network_id": net["id"], "security_groups": [group]})
        insts[label] = (cloud.instance(f"as{label}", [{"port": port["id"]}]), port["fixed_ips"][0]["ip_address"])
    router = api.get(f"/routers/{router['id']}").json()["router"]
    gw = router["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
    for cidr in ("10.72.0.0/24", "10.73.0.0/24", "10.74.0.0/24"):  # the outside routes them to the router
        ns_run(outside, "ip", "route", "add", cidr, "via", gw, check=True)
    responders = [Responder.start(outside, "O", tcp=(80,))]
    responders += [Responder.start(inst["netns"], label.upper(), tcp=(80,)) for label, (inst, _ip) in insts.items()]
    try:
        (s, s_ip), (t, t_ip), (n, n_ip) = insts["s"], insts["t"], insts["n"]
        cloud.wait_for(lambda: tcp_ask(s["netns"], "192.0.2.1", 80) == f"O {s_ip} 80", timeout=20,
                       what="the external scope's subnet routed out with its own address")  # fmt: skip
        assert tcp_ask(t["netns"], "192.0.2.1", 80) == f"O {gw} 80"  # another scope: SNATed as before
        assert tcp_ask(n["netns"], "192.0.2.1", 80) == f"O {gw} 80"  # no scope: SNATed as before
        assert tcp_ask(outside, s_ip, 80) == "S 192.0.2.1 80"  # routed in, the client's address kept
        assert tcp_ask(outside, t_ip, 80, timeout=1) == ""  # no way in across scopes
        assert tcp_ask(outside, n_ip, 80, timeout=1) == ""
        for src, dst in ((s, t_ip), (t, s_ip), (s, n_ip), (n, s_ip), (t, n_ip), (n, t_ip)):
            assert tcp_ask(src["netns"], dst, 80, timeout=1) == "", (src["name"], dst)
        ruleset = ns_run(names.router_ns(cloud.host, router["id"]), "nft", "list", "ruleset").stdout
        assert "10.72.0.0/24" not in ruleset.split("snat ip to")[0].rsplit("\n", 1)[-1]
        # The scope goes from the pool: the subnets become one scope's, and are routed to one another again.
        r = api.put(f"/subnetpools/{p_other['id']}", json={"subnetpool": {"address_scope_id": inside["id"]}})
        assert r.status_code == 200, r.text
        cloud.wait_for(lambda: tcp_ask(s["netns"], t_ip, 80, timeout=1) == f"T {s_ip} 80", timeout=20,
                       what="one scope: routed between them")  # fmt: skip
        assert tcp_ask(t["netns"], "192.0.2.1", 80) == f"O {t_ip} 80"
    finally:
        for r in responders:
            r.stop()

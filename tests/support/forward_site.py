"""A forwarding site for kernel tests: an outside namespace on the uplink, an external network with a routed
range, a dual-stack network behind a router, and two instances answering on a few ports."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cloudnet.dataplane.linux import names
from tests.support.cloud import Cloud, ns_run
from tests.support.netserve import Responder


@dataclass
class Site:
    cloud: Cloud
    outside: str
    net: dict[str, Any]
    router: dict[str, Any]
    a: dict[str, Any]  # the usual target
    b: dict[str, Any]  # another instance on the network

    @staticmethod
    def ip(inst: dict[str, Any], version: int = 4) -> str:
        return next(f["ip_address"] for f in inst["nets"][0]["fixed_ips"] if (":" in f["ip_address"]) == (version == 6))

    def forward(self, body: dict[str, Any]) -> dict[str, Any]:
        r = self.cloud.api.post(f"/networks/{self.net['id']}/forwards", json=body)
        assert r.status_code == 201, r.text
        return dict(r.json()["forward"])

    def router_ruleset(self) -> str:
        return ns_run(names.router_ns(self.cloud.host, self.router["id"]), "nft", "list", "ruleset").stdout

    def until(self, check: Any, what: str) -> None:
        self.cloud.wait_for(check, timeout=15, what=what)


@contextmanager
def forward_site(cloud: Cloud) -> Iterator[Site]:
    outside = cloud.outside("physnet1", "192.0.2.1/24")
    ns_run(outside, "ip", "addr", "add", "2001:db8:1::1/64", "dev", "eth0", "nodad", check=True)
    cloud.start_agent()
    pub = cloud.create("networks", "network", {"name": "pub", "router:external": True, "provider:network_type": "flat",
                                               "provider:physical_network": "physnet1",
                                               "cloudnet:routes": ["198.51.100.0/24"]})  # fmt: skip
    cloud.create("subnets", "subnet", {"network_id": pub["id"], "cidr": "192.0.2.0/24", "gateway_ip": "192.0.2.1",
                                       "allocation_pools": [{"start": "192.0.2.2", "end": "192.0.2.9"}]})  # fmt: skip
    pool6 = [{"start": "2001:db8:1::2", "end": "2001:db8:1::9"}]
    cloud.create("subnets", "subnet", {"network_id": pub["id"], "cidr": "2001:db8:1::/64",
                                       "gateway_ip": "2001:db8:1::1", "allocation_pools": pool6})  # fmt: skip
    net, sub = cloud.network("inner", "10.71.0.0/24")
    sub6 = cloud.create("subnets", "subnet", {"network_id": net["id"], "cidr": "fd00:71::/64"})
    router = cloud.create("routers", "router", {"name": "edge", "external_gateway_info": {"network_id": pub["id"]}})
    for s in (sub, sub6):
        assert (
            cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": s["id"]}).status_code
            == 200
        )
    router = cloud.api.get(f"/routers/{router['id']}").json()["router"]
    gw_v4 = next(
        f["ip_address"] for f in router["external_gateway_info"]["external_fixed_ips"] if "." in f["ip_address"]
    )
    ns_run(outside, "ip", "route", "add", "198.51.100.0/24", "via", gw_v4, check=True)  # the routed range
    # Forwarded connections come from anywhere (the outside, the router's hairpin): the targets let them in.
    published = cloud.create("security-groups", "security_group", {"name": "published"})["id"]
    for ethertype in ("IPv4", "IPv6"):
        rule = {"security_group_id": published, "direction": "ingress", "ethertype": ethertype}
        cloud.create("security-group-rules", "security_group_rule", rule)
    ports = [cloud.create("ports", "port", {"network_id": net["id"], "security_groups": [published]}) for _ in "ab"]
    a = cloud.instance("fa", [{"port": ports[0]["id"]}])
    b = cloud.instance("fb", [{"port": ports[1]["id"]}])
    responders = [
        Responder.start(a["netns"], "A", tcp=(80, 443, 2222, 8080, 90, 91, 92), udp=(53, 5353)),
        Responder.start(b["netns"], "B", tcp=(80, 8000, 8001), udp=(53,)),
        Responder.start(a["netns"], "A6", tcp=(80,), v6=True),
    ]
    try:
        yield Site(cloud, outside, net, router, a, b)
    finally:
        for r in responders:
            r.stop()

"""Routers on the Linux dataplane: extra routes realised in the router's namespace (read back and carrying
traffic), a gateway on an external network without a subnet, and the router and metadata ports ACTIVE once
realised (root)."""

from __future__ import annotations

from typing import Any

from cloudnet.dataplane.linux import names
from tests.support.cloud import Cloud, ns_run, ping


def _router_routes(cloud: Cloud, router_id: str) -> str:
    return ns_run(names.router_ns(cloud.host, router_id), "ip", "route", "show").stdout


def _failures(cloud: Cloud) -> list[dict[str, Any]]:
    return list(cloud.api.get(f"/hosts/{cloud.host}").json()["host"]["report"].get("failures", []))


def test_extra_routes_are_realised_and_carry_traffic(cloud: Cloud) -> None:
    cloud.start_agent()
    n1, s1 = cloud.network("er-left", "10.71.0.0/24")
    n2, s2 = cloud.network("er-right", "10.72.0.0/24")
    router = cloud.create("routers", "router", {"name": "er"})
    for sub in (s1, s2):
        r = cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
    left = cloud.instance("er-l", [{"network": n1["id"]}])
    hop = cloud.instance("er-h", [{"network": n2["id"], "v4-fixed-ip": "10.72.0.50"}])
    # The hop answers for 192.168.77.1 (on its loopback), which its port may send from (an address pair).
    ns_run(hop["netns"], "ip", "addr", "add", "192.168.77.1/32", "dev", "lo", check=True)
    pairs = {"port": {"allowed_address_pairs": [{"ip_address": "192.168.77.0/24"}]}}
    assert cloud.api.put(f"/ports/{hop['nets'][0]['port_id']}", json=pairs).status_code == 200
    assert not ping(left["netns"], "192.168.77.1")  # no route yet

    route = {"destination": "192.168.77.0/24", "nexthop": "10.72.0.50"}
    r = cloud.api.put(f"/routers/{router['id']}/add_extraroutes", json={"router": {"routes": [route]}})
    assert r.status_code == 200, r.text
    leg = names.router_iface(next(p["id"] for p in cloud.api.get("/ports", params={
        "device_id": router["id"], "network_id": n2["id"]}).json()["ports"]))  # fmt: skip
    cloud.wait_for(lambda: f"192.168.77.0/24 via 10.72.0.50 dev {leg}" in _router_routes(cloud, router["id"]),
                   what="the extra route in the router's namespace")  # fmt: skip
    cloud.wait_for(lambda: ping(left["netns"], "192.168.77.1"), what="left -> 192.168.77.1 through the hop")

    r = cloud.api.put(f"/routers/{router['id']}/remove_extraroutes", json={"router": {"routes": [route]}})
    assert r.status_code == 200, r.text
    cloud.wait_for(lambda: "192.168.77.0" not in _router_routes(cloud, router["id"]), what="the route removed")
    assert not ping(left["netns"], "192.168.77.1")
    assert _failures(cloud) == []


def test_gateway_without_subnet_and_router_ports_active(cloud: Cloud) -> None:
    cloud.start_agent()
    ext = cloud.create("networks", "network", {"name": "er-ext", "router:external": True})
    net, sub = cloud.network("er-in", "10.73.0.0/24")
    router = cloud.create("routers", "router", {"name": "er-gw", "external_gateway_info": {"network_id": ext["id"]}})
    assert router["external_gateway_info"]["external_fixed_ips"] == []
    r = cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    assert r.status_code == 200, r.text
    inst = cloud.instance("er-i", [{"network": net["id"]}])
    assert ping(inst["netns"], sub["gateway_ip"])  # the router's leg answers

    def statuses() -> dict[str, str]:
        owned = cloud.api.get("/ports", params={"device_id": router["id"]}).json()["ports"]
        meta = cloud.api.get("/ports", params={"network_id": net["id"], "device_owner": "network:distributed"})
        return {p["device_owner"]: p["status"] for p in owned + meta.json()["ports"]}

    want = {"network:router_gateway": "ACTIVE", "network:router_interface": "ACTIVE", "network:distributed": "ACTIVE"}
    cloud.wait_for(lambda: statuses() == want, what=f"router and metadata ports ACTIVE ({statuses()})")
    (gw_port,) = cloud.api.get("/ports", params={"device_id": router["id"], "device_owner": "network:router_gateway"}
                               ).json()["ports"]  # fmt: skip
    assert gw_port["fixed_ips"] == []
    links = ns_run(names.router_ns(cloud.host, router["id"]), "ip", "-o", "link", "show").stdout
    assert names.router_gw(gw_port["id"]) in links  # the gateway leg is there, without an address
    assert "default" not in _router_routes(cloud, router["id"])  # and no default route: nothing to route to
    assert _failures(cloud) == []


def test_host_route_through_the_instance_itself_is_left_out(cloud: Cloud) -> None:
    """A subnet's host route whose next hop is the instance's own address leads nowhere, and the kernel refuses it
    for IPv6: it is left out, and the instance's other routes are realised (it used to fail the whole instance)."""
    cloud.start_agent()
    routes = [{"destination": "fd99:9::/64", "nexthop": "fd77:551::8"},
              {"destination": "fd99:7::/64", "nexthop": "fd77:551::9"}]  # fmt: skip
    net, sub = cloud.network("hr-self", "fd77:551::/64")
    r = cloud.api.put(f"/subnets/{sub['id']}", json={"subnet": {"host_routes": routes}})
    assert r.status_code == 200, r.text
    inst = cloud.instance("hr-self", [{"network": net["id"], "v6-fixed-ip": "fd77:551::8"}])
    shown = ns_run(inst["netns"], "ip", "-6", "route", "show", "proto", "149").stdout
    assert "fd99:7::/64 via fd77:551::9 dev eth0" in shown
    assert "fd99:9::" not in shown
    assert _failures(cloud) == []

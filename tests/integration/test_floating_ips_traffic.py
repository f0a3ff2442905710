"""Floating IPs and port forwardings made through Neutron's API carry real traffic, as the forwards they are."""

from __future__ import annotations

import re

from tests.support.forward_site import Site
from tests.support.netserve import tcp_ask


def test_floating_ip_and_port_forwarding_carry_traffic(site: Site) -> None:
    api, out = site.cloud.api, site.outside
    pub = site.router["external_gateway_info"]["network_id"]
    r = api.post("/floatingips", json={"floatingip": {"floating_network_id": pub}})
    assert r.status_code == 201, r.text
    fip = r.json()["floatingip"]
    address = fip["floating_ip_address"]
    assert tcp_ask(out, address, 80) == ""  # held, not associated: nothing answers

    r = api.put(f"/floatingips/{fip['id']}", json={"floatingip": {"port_id": site.a["nets"][0]["port_id"]}})
    assert r.status_code == 200, r.text
    site.until(lambda: tcp_ask(out, address, 80).startswith("A "), "floating IP associated")
    assert tcp_ask(out, address, 443) == "A 192.0.2.1 443"  # the whole address, the client's address kept
    assert address in site.router_ruleset()

    # Port forwardings on a second floating IP (an address an admin chose): one port, and a range onto one port.
    r = api.post("/floatingips", json={"floatingip": {"floating_network_id": pub, "floating_ip_address": "192.0.2.70"}})
    assert r.status_code == 201, r.text
    pf_ip = r.json()["floatingip"]
    base = f"/floatingips/{pf_ip['id']}/port_forwardings"
    b_port = site.b["nets"][0]["port_id"]
    for body in ({"internal_port": 8000, "external_port": 8080},
                 {"internal_port_range": "8001:8001", "external_port_range": "9000:9003"}):  # fmt: skip
        r = api.post(base, json={"port_forwarding": {"protocol": "tcp", "internal_port_id": b_port, **body}})
        assert r.status_code == 201, r.text
    site.until(lambda: tcp_ask(out, "192.0.2.70", 8080).startswith("B "), "port forwarding")
    assert tcp_ask(out, "192.0.2.70", 8080) == "B 192.0.2.1 8000"
    assert [tcp_ask(out, "192.0.2.70", p) for p in (9000, 9003)] == ["B 192.0.2.1 8001"] * 2
    assert tcp_ask(out, "192.0.2.70", 80) == ""  # only the forwarded ports

    # Disassociated: the address answers no more (and is still held).
    r = api.put(f"/floatingips/{fip['id']}", json={"floatingip": {"port_id": None}})
    assert r.status_code == 200, r.text
    site.until(lambda: tcp_ask(out, address, 80) == "", "floating IP disassociated")
    assert api.get(f"/floatingips/{fip['id']}").json()["floatingip"]["floating_ip_address"] == address


def test_a_floating_ip_is_disassociated_when_its_port_goes(site: Site) -> None:
    """Neutron's rule for what Neutron's face made: the port going disassociates the floating IP and deletes the port
    forwardings to it (kept, DOWN, no rule left); the next port on that address is not its target until associated."""
    api, out = site.cloud.api, site.outside
    pub = site.router["external_gateway_info"]["network_id"]
    b_ip, b_port = site.ip(site.b), site.b["nets"][0]["port_id"]
    r = api.post("/floatingips", json={"floatingip": {"floating_network_id": pub, "port_id": b_port}})
    assert r.status_code == 201, r.text
    fip = r.json()["floatingip"]
    address = fip["floating_ip_address"]
    site.until(lambda: tcp_ask(out, address, 80).startswith("B "), "floating IP associated")
    r = api.post("/floatingips", json={"floatingip": {"floating_network_id": pub, "floating_ip_address": "192.0.2.71"}})
    assert r.status_code == 201, r.text
    forwarding = r.json()["floatingip"]
    a_port = site.a["nets"][0]["port_id"]
    pf = {"protocol": "tcp", "internal_port_id": a_port, "internal_port": 8080, "external_port": 8080}
    r = api.post(f"/floatingips/{forwarding['id']}/port_forwardings", json={"port_forwarding": pf})
    assert r.status_code == 201, r.text
    site.until(lambda: tcp_ask(out, "192.0.2.71", 8080) == "A 192.0.2.1 8080", "port forwarding")

    for inst, port in ((site.a, a_port), (site.b, b_port)):
        assert api.delete(f"/instances/{inst['id']}").status_code == 204
        assert api.delete(f"/ports/{port}").status_code == 204
    got = api.get(f"/floatingips/{fip['id']}").json()["floatingip"]
    assert (got["port_id"], got["fixed_ip_address"], got["status"]) == (None, None, "DOWN")
    got = api.get(f"/floatingips/{forwarding['id']}").json()["floatingip"]
    assert (got["port_forwardings"], got["status"]) == ([], "DOWN")  # its port forwarding went with the port
    site.until(lambda: address not in site.router_ruleset() and "192.0.2.71" not in site.router_ruleset(),
               "no rule for a floating IP associated to nothing")  # fmt: skip
    assert not re.search(rf"\b{re.escape(b_ip)}\b", site.router_ruleset())
    assert tcp_ask(out, address, 80, timeout=1) == ""

    (group,) = api.get("/security-groups", params={"name": "published"}).json()["security_groups"]
    subnet = next(f["subnet_id"] for f in site.b["nets"][0]["fixed_ips"] if f["ip_address"] == b_ip)
    again = site.cloud.create("ports", "port", {"network_id": site.net["id"], "security_groups": [group["id"]],
                                                "fixed_ips": [{"subnet_id": subnet, "ip_address": b_ip}]})  # fmt: skip
    site.cloud.instance("fb2", [{"port": again["id"]}], netns_name=site.b["netns"])  # (where B's responders are)
    assert tcp_ask(out, address, 80, timeout=1) == ""  # (the agent's pass that made it ACTIVE had it)
    assert api.get(f"/floatingips/{fip['id']}").json()["floatingip"]["port_id"] is None
    r = api.put(f"/floatingips/{fip['id']}", json={"floatingip": {"port_id": again["id"]}})
    assert r.status_code == 200, r.text
    site.until(lambda: tcp_ask(out, address, 80).startswith("B "), "associated to the next port")

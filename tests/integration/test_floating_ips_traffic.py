"""Floating IPs and port forwardings made through Neutron's API carry real traffic, as the forwards they are."""

from __future__ import annotations

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

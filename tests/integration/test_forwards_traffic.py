"""Network forwards and SNAT addresses with real traffic from an "outside" namespace (root)."""

from __future__ import annotations

import re
from typing import Any

from cloudnet.dataplane.linux import names
from tests.support.cloud import ns_run
from tests.support.forward_site import Site
from tests.support.netserve import Responder, tcp_ask, udp_ask

Json = dict[str, Any]


def test_port_forwards_whole_address_ranges_and_overrides(site: Site) -> None:
    a_ip, b_ip = site.ip(site.a), site.ip(site.b)
    site.forward({"listen_address": "192.0.2.50", "ports": [
        {"protocol": "tcp", "listen_port": "8080", "target_address": a_ip},                     # same port
        {"protocol": "tcp", "listen_port": "2000", "target_port": "2222", "target_address": a_ip},
        {"protocol": "udp", "listen_port": "53", "target_address": a_ip},
        {"protocol": "tcp", "listen_port": "1080,1090-1100", "target_port": "443", "target_address": a_ip},
        {"protocol": "tcp", "listen_port": "82-83,84", "target_port": "90,91-92", "target_address": a_ip},
    ]})  # fmt: skip
    site.forward({"listen_address": "198.51.100.7", "config": {"target_address": a_ip}, "ports": [
        {"protocol": "tcp", "listen_port": "80", "target_address": b_ip},                       # override
        {"protocol": "udp", "listen_port": "53", "target_address": b_ip},
    ]})  # fmt: skip
    out = site.outside
    site.until(lambda: tcp_ask(out, "192.0.2.50", 8080).startswith("A "), "tcp forward")
    assert tcp_ask(out, "192.0.2.50", 8080) == "A 192.0.2.1 8080"  # the target sees the real client
    assert tcp_ask(out, "192.0.2.50", 2000) == "A 192.0.2.1 2222"
    assert udp_ask(out, "192.0.2.50", 53) == "A 192.0.2.1 53"
    for port in (1080, 1090, 1095, 1100):  # many-to-one
        assert tcp_ask(out, "192.0.2.50", port) == "A 192.0.2.1 443", port
    assert [tcp_ask(out, "192.0.2.50", p).split()[-1] for p in (82, 83, 84)] == ["90", "91", "92"]  # index-wise
    assert tcp_ask(out, "192.0.2.50", 1101) == ""  # not forwarded
    # Whole address with per-port overrides: specific ports win, everything else goes to the default.
    site.until(lambda: tcp_ask(out, "198.51.100.7", 80).startswith("B "), "override")
    assert udp_ask(out, "198.51.100.7", 53) == "B 192.0.2.1 53"
    assert tcp_ask(out, "198.51.100.7", 443) == "A 192.0.2.1 443"
    assert udp_ask(out, "198.51.100.7", 5353) == "A 192.0.2.1 5353"


def test_hairpin_from_the_target_and_from_another_instance(site: Site) -> None:
    a_ip = site.ip(site.a)
    site.forward(
        {"listen_address": "192.0.2.51", "ports": [{"protocol": "tcp", "listen_port": "80", "target_address": a_ip}]}
    )
    site.until(lambda: tcp_ask(site.outside, "192.0.2.51", 80).startswith("A "), "forward")
    assert tcp_ask(site.b["netns"], "192.0.2.51", 80).startswith("A ")  # another instance of the network
    assert tcp_ask(site.a["netns"], "192.0.2.51", 80).startswith("A ")  # the target itself


def test_snat_address_is_what_the_outside_sees(site: Site) -> None:
    server = Responder.start(site.outside, "OUT", tcp=(7000,))
    try:
        default = tcp_ask(site.a["netns"], "192.0.2.1", 7000)
        gw_v4 = next(
            f["ip_address"]
            for f in site.router["external_gateway_info"]["external_fixed_ips"]
            if "." in f["ip_address"]
        )
        assert default == f"OUT {gw_v4} 7000"  # before: the router's external address
        r = site.cloud.api.put(
            f"/networks/{site.net['id']}", json={"network": {"config": {"ipv4.nat.address": "192.0.2.60"}}}
        )
        assert r.status_code == 200, r.text
        site.until(lambda: tcp_ask(site.a["netns"], "192.0.2.1", 7000) == "OUT 192.0.2.60 7000", "SNAT address")
        # A forward of the same network may listen on its own SNAT address.
        site.forward({"listen_address": "192.0.2.60", "ports": [{"protocol": "tcp", "listen_port": "80",
                                                                   "target_address": site.ip(site.b)}]})  # fmt: skip
        site.until(lambda: tcp_ask(site.outside, "192.0.2.60", 80).startswith("B "), "forward on the SNAT address")
    finally:
        server.stop()


def test_update_and_delete_take_effect_and_leave_nothing(site: Site) -> None:
    a_ip, b_ip = site.ip(site.a), site.ip(site.b)
    site.forward(
        {"listen_address": "192.0.2.52", "ports": [{"protocol": "tcp", "listen_port": "80", "target_address": a_ip}]}
    )
    site.until(lambda: tcp_ask(site.outside, "192.0.2.52", 80).startswith("A "), "forward")
    path = f"/networks/{site.net['id']}/forwards/192.0.2.52"
    r = site.cloud.api.put(path, json={"ports": [{"protocol": "tcp", "listen_port": "80", "target_address": b_ip}]})
    assert r.status_code == 200, r.text
    site.until(lambda: tcp_ask(site.outside, "192.0.2.52", 80).startswith("B "), "updated target")
    assert site.cloud.api.delete(path).status_code == 204
    site.until(lambda: "192.0.2.52" not in site.router_ruleset(), "no rule left")
    assert tcp_ask(site.outside, "192.0.2.52", 80, timeout=1) == ""
    qg = ns_run(names.router_ns(site.cloud.host, site.router["id"]), "ip", "-o", "addr").stdout
    assert "192.0.2.52" not in qg  # the router no longer answers for it


def test_ipv6_forward(site: Site) -> None:
    a6 = site.ip(site.a, 6)
    port = {"protocol": "tcp", "listen_port": "8080", "target_port": "80", "target_address": a6}
    site.forward({"listen_address": "2001:DB8:1::50", "ports": [port]})
    site.until(lambda: tcp_ask(site.outside, "2001:db8:1::50", 8080).startswith("A6 "), "IPv6 forward")
    assert tcp_ask(site.outside, "2001:db8:1::50", 8080) == "A6 2001:db8:1::1 80"


def _published(site: Site) -> str:
    (group,) = site.cloud.api.get("/security-groups", params={"name": "published"}).json()["security_groups"]
    return str(group["id"])


def test_a_forward_outlives_its_targets_ports_and_serves_the_next(site: Site) -> None:
    """Issue 27: the instances and ports behind a forward go (instance and port deleted, an instance deleted with its
    own port, the address taken off a port); the forward stays as made, nft holds nothing for the target meanwhile,
    and the address answers again as soon as a port holds the target address."""
    api, out, a_ip = site.cloud.api, site.outside, site.ip(site.a)
    spec = {"protocol": "tcp", "listen_port": "2000", "target_port": "2222", "target_address": a_ip}
    fwds = [site.forward({"listen_address": "192.0.2.53", "config": {"target_address": a_ip}}),
            site.forward({"listen_address": "192.0.2.54", "ports": [spec]})]  # fmt: skip

    def answers() -> bool:
        return (
            tcp_ask(out, "192.0.2.53", 80).startswith("A ") and tcp_ask(out, "192.0.2.54", 2000) == "A 192.0.2.1 2222"
        )

    def gone() -> bool:
        if re.search(rf"\b{re.escape(a_ip)}\b", site.router_ruleset()):
            return False
        assert tcp_ask(out, "192.0.2.53", 80, timeout=1) == "" and tcp_ask(out, "192.0.2.54", 2000, timeout=1) == ""
        assert api.get(f"/networks/{site.net['id']}/forwards").json()["forwards"] == fwds  # as made
        return True

    site.until(answers, "the forwards")
    port_id = site.a["nets"][0]["port_id"]
    assert api.delete(f"/instances/{site.a['id']}").status_code == 204
    assert api.delete(f"/ports/{port_id}").status_code == 204
    site.until(gone, "no rule for a target no port holds")

    # An instance with a port of its own on the address: the forwards serve it; it goes with its port.
    fixed = {"network": site.net["id"], "v4-fixed-ip": a_ip}
    own = site.cloud.create("instances", "instance", {"name": "fa2", "host": site.cloud.host,
                                                      "netns": site.a["netns"], "nets": [fixed]})  # fmt: skip
    own_port = own["nets"][0]["port_id"]
    r = api.put(f"/ports/{own_port}", json={"port": {"security_groups": [_published(site)]}})
    assert r.status_code == 200, r.text
    site.cloud.wait_active(own["id"])
    site.until(answers, "the forwards serving the next port on the address")
    assert api.delete(f"/instances/{own['id']}").status_code == 204
    site.until(gone, "no rule once the instance went with its port")

    # A port taking the address by a fixed_ips change, and letting go of it.
    subnet = next(f["subnet_id"] for f in site.a["nets"][0]["fixed_ips"] if "." in f["ip_address"])
    moved = site.cloud.create(
        "ports",
        "port",
        {
            "network_id": site.net["id"],
            "security_groups": [_published(site)],
            "fixed_ips": [{"subnet_id": subnet, "ip_address": "10.71.0.200"}],
        },
    )
    site.cloud.instance("fa3", [{"port": moved["id"]}], netns_name=site.a["netns"])  # (where A's responders are)
    take = {"port": {"fixed_ips": [{"subnet_id": subnet, "ip_address": a_ip}]}}
    assert api.put(f"/ports/{moved['id']}", json=take).status_code == 200
    site.until(answers, "the forwards serving a port that took the address")
    leave = {"port": {"fixed_ips": [{"subnet_id": subnet, "ip_address": "10.71.0.201"}]}}
    assert api.put(f"/ports/{moved['id']}", json=leave).status_code == 200
    site.until(gone, "no rule once the port let go of the address")

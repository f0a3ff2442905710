"""Issue 17 with real traffic (root): leftovers in cloudnet's nft maps, entries removed by hand, forwards re-created
on the same address, the drift check (`cloudnet host check`), and refused requests that leave the kernel alone."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from cloudnet.dataplane.linux import names
from tests.support.cloud import ns_run
from tests.support.forward_site import Site
from tests.support.netserve import Responder, tcp_ask
from tests.support.process import CLOUDNET


def router_ns(site: Site) -> str:
    return names.router_ns(site.cloud.host, site.router["id"])


def nft(site: Site, *script: str) -> None:
    """Change the router's tables by hand, behind the agent's back."""
    ns_run(router_ns(site), "nft", "-f", "-", check=True, input="\n".join(script) + "\n")


def elements(site: Site, family: str, name: str) -> str:
    return ns_run(router_ns(site), "nft", "list", "map", family, "cloudnet", name, check=True).stdout


def host_check(site: Site) -> tuple[int, list[dict[str, str]]]:
    """`cloudnet host check` as an operator runs it: its exit status and the differences it printed."""
    proc = subprocess.run([CLOUDNET, "--url", site.cloud.server.url, "host", "check", site.cloud.host, "-f", "json"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def port(listen: str, target: str, target_port: str = "") -> dict[str, Any]:
    return {"protocol": "tcp", "listen_port": listen, "target_port": target_port, "target_address": target}


def test_leftover_and_missing_entries_are_repaired_while_a_new_instance_goes_active(site: Site) -> None:
    """Case 1's shape: a leftover entry on a listen address about to be forwarded again (the `File exists` that
    wedged every pass), and an entry of a live forward removed by hand; both address families."""
    a4, a6, b4 = site.ip(site.a), site.ip(site.a, 6), site.ip(site.b)
    site.forward({"listen_address": "192.0.2.53", "ports": [port("80", a4)]})
    site.forward({"listen_address": "2001:db8:1::53", "ports": [port("80", a6)]})
    out = site.outside
    site.until(lambda: tcp_ask(out, "192.0.2.53", 80).startswith("A "), "forward")
    site.until(lambda: tcp_ask(out, "2001:db8:1::53", 80).startswith("A6 "), "IPv6 forward")
    nft(site, f"add element ip cloudnet fwd_tcp_1 {{ 192.0.2.54 . 80 : {b4} . 80 }}",
        "add element ip6 cloudnet fwd_tcp_1 { 2001:db8:1::54 . 80 : fd00:71::99 . 80 }",
        "delete element ip cloudnet fwd_tcp_1 { 192.0.2.53 . 80 }",
        "delete element ip6 cloudnet fwd_tcp_1 { 2001:db8:1::53 . 80 }")  # fmt: skip
    assert tcp_ask(out, "192.0.2.53", 80, timeout=1) == ""  # (really gone)
    site.forward({"listen_address": "192.0.2.54", "ports": [port("80", a4)]})
    site.forward({"listen_address": "2001:db8:1::54", "ports": [port("80", a6)]})
    c = site.cloud.instance("fc", [{"network": site.net["id"]}])  # the host still converges: ACTIVE
    assert c["status"] == "ACTIVE"
    site.until(lambda: tcp_ask(out, "192.0.2.54", 80).startswith("A "), "forward over the leftover")
    site.until(lambda: tcp_ask(out, "2001:db8:1::54", 80).startswith("A6 "), "IPv6 forward over the leftover")
    assert tcp_ask(out, "192.0.2.53", 80).startswith("A ")  # restored
    assert tcp_ask(out, "2001:db8:1::53", 80).startswith("A6 ")
    assert b4 not in elements(site, "ip", "fwd_tcp_1") and "fd00:71::99" not in elements(site, "ip6", "fwd_tcp_1")
    failures = site.cloud.api.get(f"/hosts/{site.cloud.host}").json()["host"]["report"].get("failures", [])
    assert failures == []
    assert host_check(site) == (0, [])


def test_the_drift_check_reports_and_repairs_what_was_changed_by_hand(site: Site) -> None:
    a4 = site.ip(site.a)
    site.forward({"listen_address": "192.0.2.55", "ports": [port("80", a4)]})
    site.until(lambda: tcp_ask(site.outside, "192.0.2.55", 80).startswith("A "), "forward")
    assert host_check(site) == (0, [])
    nft(site, "delete element ip cloudnet fwd_tcp_1 { 192.0.2.55 . 80 }",
        f"add element ip cloudnet fwd_default {{ 192.0.2.56 : {a4} }}",
        "add rule ip cloudnet prerouting ip saddr 192.0.2.1 drop")  # fmt: skip
    ns_run(router_ns(site), "ip", "route", "del", "default", check=True)
    # A neighbour entry on the router's internal leg for an address no port of the host has (a deleted instance's).
    addresses = ns_run(router_ns(site), "ip", "-o", "-4", "addr", "show", check=True).stdout.splitlines()
    leg = next(line.split()[1].split("@")[0] for line in addresses if " 10.71.0.1/" in line)
    ns_run(router_ns(site), "ip", "neigh", "replace", "10.71.0.200", "lladdr", "02:00:00:00:00:99", "dev", leg,
           "nud", "stale", check=True)  # fmt: skip
    # And one of a port the host has, which stays (a check flushes no leg's neighbours).
    a_mac = site.cloud.api.get("/ports", params={"fixed_ips": f"ip_address={a4}"}).json()["ports"][0]["mac_address"]
    ns_run(router_ns(site), "ip", "neigh", "replace", a4, "lladdr", a_mac, "dev", leg, "nud", "stale", check=True)
    code, found = host_check(site)
    assert code == 1
    text = "\n".join(f"{d['object']}: {d['difference']}" for d in found)
    for expected in (f"router:{site.router['id']}: table ip cloudnet: 1 foreign rule(s) in chain prerouting",
                     "missing route 0.0.0.0/0 via 192.0.2.1",
                     "stale neighbour 10.71.0.200 at 02:00:00:00:00:99"):  # fmt: skip
        assert expected in text, text
    assert tcp_ask(site.outside, "192.0.2.55", 80).startswith("A ")  # repaired
    assert "192.0.2.56" not in elements(site, "ip", "fwd_default")
    neighbours = ns_run(router_ns(site), "ip", "neigh", "show", "dev", leg, check=True).stdout
    assert "10.71.0.200" not in neighbours and f"{a4} lladdr {a_mac}" in neighbours, neighbours
    assert host_check(site) == (0, [])


@pytest.mark.parametrize("version", [4, 6])
def test_a_forward_deleted_and_recreated_on_its_address_works(site: Site, version: int) -> None:
    listen = "192.0.2.57" if version == 4 else "2001:db8:1::57"
    a, b = site.ip(site.a, version), site.ip(site.b, version)
    b6 = Responder.start(site.b["netns"], "B6", tcp=(80,), v6=True)
    try:
        name = {4: ("A ", "B "), 6: ("A6 ", "B6 ")}[version]
        path = f"/networks/{site.net['id']}/forwards/{listen}"
        site.forward({"listen_address": listen, "ports": [port("80", a)]})
        site.until(lambda: tcp_ask(site.outside, listen, 80).startswith(name[0]), "forward")
        assert site.cloud.api.delete(path).status_code == 204
        site.until(lambda: tcp_ask(site.outside, listen, 80, timeout=1) == "", "forward gone")
        site.forward({"listen_address": listen, "ports": [port("80", b)]})
        site.until(lambda: tcp_ask(site.outside, listen, 80).startswith(name[1]), "re-created forward")
        # Deleted and re-created at once (the agent sees both in one pass), to the other target.
        assert site.cloud.api.delete(path).status_code == 204
        site.forward({"listen_address": listen, "ports": [port("80", a)]})
        site.until(lambda: tcp_ask(site.outside, listen, 80).startswith(name[0]), "re-created at once")
    finally:
        b6.stop()


def test_refused_requests_leave_the_kernel_as_it_was(site: Site) -> None:
    """Cases 2 and 3: routes a forward and a SNAT address use, and network/broadcast/gateway listen addresses."""
    api, out = site.cloud.api, site.outside
    site.forward({"listen_address": "198.51.100.7", "ports": [port("80", site.ip(site.a))]})
    r = api.put(f"/networks/{site.net['id']}", json={"network": {"config": {"ipv4.nat.address": "198.51.100.9"}}})
    assert r.status_code == 200, r.text
    server = Responder.start(out, "OUT", tcp=(7000,))
    try:
        site.until(lambda: tcp_ask(site.a["netns"], "192.0.2.1", 7000) == "OUT 198.51.100.9 7000", "SNAT address")
        site.until(lambda: tcp_ask(out, "198.51.100.7", 80).startswith("A "), "forward on a routed address")
        assert host_check(site) == (0, [])
        before = {name: elements(site, "ip", name) for name in ("fwd_tcp_1", "fwd_default")}
        revision = api.get("/events", params={"since": 0, "limit": 1}).json()["revision"]
        pub = api.get("/networks", params={"name": "pub"}).json()["networks"][0]
        r = api.put(f"/networks/{pub['id']}", json={"network": {"cloudnet:routes": []}})
        assert r.status_code == 409 and "198.51.100.7" in r.text, r.text
        for address in ("192.0.2.0", "192.0.2.255", "192.0.2.1", "2001:db8:1::", "2001:db8:1::1"):
            body = {"listen_address": address, "ports": [port("80", site.ip(site.a))]}
            r = api.post(f"/networks/{site.net['id']}/forwards", json=body)
            assert r.status_code == 400, (address, r.text)
        assert api.get("/events", params={"since": 0, "limit": 1}).json()["revision"] == revision
        assert host_check(site) == (0, [])  # a check: nothing to do, nothing done
        assert {name: elements(site, "ip", name) for name in before} == before
        assert tcp_ask(out, "198.51.100.7", 80).startswith("A ")
        assert tcp_ask(site.a["netns"], "192.0.2.1", 7000) == "OUT 198.51.100.9 7000"
    finally:
        server.stop()

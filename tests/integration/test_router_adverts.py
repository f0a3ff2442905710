"""Router advertisements on the Linux dataplane (issue 28): a router's leg on an IPv6 subnet with an ipv6_ra_mode
advertises from the router's namespace (a real dnsmasq), with the flags of the subnet's mode, the network's MTU and
the subnet's DNS servers; a subnet with no ra mode, or no router, is not advertised to; the advertiser is restarted
when killed and goes with the router. Asked by a raw-socket router solicitation from an instance's namespace, as a
guest's kernel asks (root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cloudnet.dataplane.linux import names, radverts
from cloudnet.dataplane.linux.dnsmasq import PID_FILE
from tests.support import ndisc_probe
from tests.support.cloud import Cloud, ns_run

PROBE = Path(ndisc_probe.__file__)


def solicit(ns: str, seconds: float = 5) -> dict[str, Any] | None:
    done = ns_run(ns, sys.executable, str(PROBE), "eth0", str(seconds), timeout=seconds + 10)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def routed_v6(cloud: Cloud, name: str, prefix: str, mode: str | None) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A network with an IPv4 subnet and an IPv6 /64 in `mode`, both on a router; an instance on it."""
    net, v4 = cloud.network(name, f"10.{60 + len(name)}.0.0/24", mtu=1400)
    modes = {"ipv6_ra_mode": mode, "ipv6_address_mode": mode} if mode else {}
    v6 = cloud.create("subnets", "subnet", {"network_id": net["id"], "cidr": f"{prefix}::/64", "ip_version": 6,
                                            "dns_nameservers": [f"{prefix}::53"], **modes})  # fmt: skip
    router = cloud.create("routers", "router", {"name": f"r-{name}"})
    for sub in (v4, v6):
        r = cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
    vm = cloud.instance(f"{name}-vm", [{"network": net["id"]}])
    return router, v6, vm["netns"]


@pytest.mark.parametrize(
    ("mode", "managed", "other", "autonomous"),
    [("slaac", False, False, True), ("dhcpv6-stateless", False, True, True), ("dhcpv6-stateful", True, None, False)],
)
def test_a_router_advertises_its_subnets_mode(
    cloud: Cloud, mode: str, managed: bool, other: bool | None, autonomous: bool
) -> None:
    """(with M set, O is redundant, RFC 4861 section 4.2: dnsmasq sets both, radvd in Neutron only M)"""
    cloud.start_agent()
    _router, v6, ns = routed_v6(cloud, mode.replace("dhcpv6-", "")[:6], "fd73", mode)
    ra = solicit(ns)
    assert ra is not None, "no router advertisement"
    assert ra["managed"] == managed and other in (None, ra["other"]), ra
    assert ra["router_lifetime"] == radverts.LIFETIME and ra["source"].startswith("fe80:"), ra
    assert ra["prefixes"] == [{"prefix": "fd73::/64", "on_link": True, "autonomous": autonomous}], ra
    assert ra["mtu"] == 1400 and ra["rdnss"] == ["fd73::53"], ra
    assert v6["gateway_ip"] == "fd73::1"


def test_no_mode_no_router_no_advertisement(cloud: Cloud) -> None:
    cloud.start_agent()
    _router, _v6, ns = routed_v6(cloud, "nomode", "fd74", None)
    assert solicit(ns, 3) is None
    net = cloud.create("networks", "network", {"name": "norouter"})
    modes = {"ipv6_ra_mode": "slaac", "ipv6_address_mode": "slaac"}
    cloud.create("subnets", "subnet", {"network_id": net["id"], "cidr": "fd75::/64", "ip_version": 6, **modes})
    vm = cloud.instance("norouter-vm", [{"network": net["id"]}])
    assert solicit(vm["netns"], 3) is None


def test_the_advertiser_is_restarted_and_goes_with_its_router(cloud: Cloud) -> None:
    cloud.start_agent()
    router, _v6, ns = routed_v6(cloud, "restart", "fd76", "slaac")
    where = radverts.RUN_ROOT / names.host_ns(cloud.host) / router["id"]
    pid = int((where / PID_FILE).read_text())
    os.kill(pid, signal.SIGKILL)
    cloud.wait_for(lambda: (where / PID_FILE).exists() and int((where / PID_FILE).read_text()) != pid
                   and solicit(ns, 2) is not None, timeout=20, what="a restarted advertiser")  # fmt: skip
    new = int((where / PID_FILE).read_text())
    for port in cloud.api.get("/ports", params={"device_id": router["id"]}).json()["ports"]:
        r = cloud.api.put(f"/routers/{router['id']}/remove_router_interface", json={"port_id": port["id"]})
        assert r.status_code == 200, r.text
    cloud.wait_for(lambda: not Path(f"/proc/{new}").exists() and not where.exists(), what="the advertiser gone")


def test_a_guests_advertisements_reach_no_neighbour(cloud: Cloud) -> None:
    """A guest that plays router: its advertisements are dropped where they enter (port security); a port without
    port security is not filtered, which shows the rogue's advertisements are real."""
    cloud.start_agent()
    net, _v4 = cloud.network("rogue", "10.77.0.0/24")
    victim = cloud.instance("victim", [{"network": net["id"]}])["netns"]
    rogue = cloud.instance("rogue", [{"network": net["id"]}])["netns"]
    with subprocess.Popen(["ip", "netns", "exec", rogue, sys.executable, str(PROBE), "eth0", "4", "advertise"]) as p:
        assert solicit(victim, 3) is None
        p.wait(timeout=10)
    open_port = cloud.create("ports", "port", {"network_id": net["id"], "port_security_enabled": False})
    unfiltered = cloud.instance("unfiltered", [{"port": open_port["id"]}])["netns"]
    with subprocess.Popen(["ip", "netns", "exec", unfiltered, sys.executable, str(PROBE), "eth0", "4", "advertise"]
                          ) as p:  # fmt: skip
        ra = solicit(victim, 3)
        p.wait(timeout=10)
    assert ra is not None and ra["prefixes"][0]["prefix"] == "2001:db8:bad::/64", ra

"""Router advertisements on the Linux driver, where Neutron's L3 agent sends them (radvd in the router's
namespace): from each router leg on an IPv6 subnet with an `ipv6_ra_mode`, so that a guest's default route is the
router's link-local address. The sender is dnsmasq (the DHCP server's package: one real server for both), one per
router with such a leg, advertising only (port 0: no DNS; no leases of its own: the network's dnsmasq, dhcp.py,
answers DHCPv6). Flags as radvd's template in Neutron (neutron/agent/linux/ra.py):

    slaac             prefix with A (autonomous): the guest forms its EUI-64 address (the port's: networks/ipam.py
                      in services/)
    dhcpv6-stateless  A and the O flag: addresses by SLAAC, options by DHCPv6 (this dnsmasq answers
                      information requests with the subnet's DNS servers, as the network's does)
    dhcpv6-stateful   the M flag, no A: the address comes from the network's DHCPv6 server

The MTU and the subnet's DNS servers (RDNSS) go into the advertisements. No router leg, no advertisement (as in
Neutron). A router whose dnsmasq cannot start fails alone (its step, `ra:<id>`)."""

from __future__ import annotations

import contextlib
import ipaddress
from pathlib import Path
from typing import Any

from cloudnet.dataplane.base import DesiredState
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.dnsmasq import PID_FILE, Dnsmasqs
from cloudnet.dataplane.linux.passes import Pass, fingerprint_of
from cloudnet.dataplane.steps import StepFailed

RUN_ROOT = Path("/run/cloudnet/ra")
# dnsmasq's --dhcp-range mode for each ipv6_ra_mode (flags above)
RANGE_MODES = {"slaac": "ra-only", "dhcpv6-stateless": "ra-stateless", "dhcpv6-stateful": "static"}
INTERVAL, LIFETIME = 30, 300  # seconds: radvd's MinRtrAdvInterval in Neutron, and 3 x its MaxRtrAdvInterval (100)


def advertised(router: dict[str, Any], state: DesiredState) -> list[tuple[str, dict[str, Any], int]]:
    """(leg inside the router namespace, subnet, MTU) for each interface on an IPv6 subnet with an ipv6_ra_mode."""
    found = []
    gw = router["gateway"]["port_id"] if router["gateway"] else None
    for pid, port in sorted(router["ports"].items()):
        if pid == gw:
            continue  # (an external network is not advertised to)
        network = state["networks"].get(port["network_id"]) or {}
        for f in port["fixed_ips"]:
            subnet = state["subnets"].get(f["subnet_id"])
            if subnet and subnet["ip_version"] == 6 and subnet.get("ipv6_ra_mode") in RANGE_MODES:
                found.append((names.router_iface(pid), subnet, int(network.get("mtu") or 1500)))
    return found


def command(where: Path, legs: list[tuple[str, dict[str, Any], int]]) -> list[str]:
    """An advertising-only dnsmasq on these legs (only them)."""
    cmd = ["dnsmasq", "--no-hosts", "--no-resolv", "--port=0", f"--pid-file={where / PID_FILE}",
           f"--dhcp-leasefile={where / 'leases'}", "--conf-file=/dev/null", "--bind-dynamic", "--except-interface=lo",
           "--enable-ra"]  # fmt: skip
    for iface in sorted({leg for leg, _s, _m in legs}):
        cmd.append(f"--interface={iface}")
    for iface, subnet, mtu in legs:
        prefixlen = ipaddress.ip_network(subnet["cidr"]).prefixlen
        tag = f"subnet-{subnet['id']}"
        cmd.append(f"--dhcp-range=set:{tag},::,constructor:{iface},{RANGE_MODES[subnet['ipv6_ra_mode']]},{prefixlen}")
        cmd.append(f"--ra-param={iface},mtu:{mtu},{INTERVAL},{LIFETIME}")
        servers = [s for s in subnet.get("dns_nameservers") or [] if ":" in s]
        if servers:
            cmd.append(f"--dhcp-option=tag:{tag},option6:dns-server,{','.join(f'[{s}]' for s in servers)}")
    return cmd


class RouterAdverts:
    """The advertisements job of the Linux driver: one step per router with an advertised leg."""

    def __init__(self, host: str, root: Path | None = None) -> None:
        self.host = host
        self.servers = Dnsmasqs((root or RUN_ROOT) / names.host_ns(host), "router")
        self._applied: dict[str, str] = {}

    def apply(self, run: Pass) -> None:
        wanted = set()
        for router in run.state["routers"]:
            legs = advertised(router, run.state)
            if not legs:
                continue
            rid = router["id"]
            wanted.add(rid)
            cmd = command(self.servers.directory(rid), legs)
            fingerprint = fingerprint_of(cmd)
            if not run.full and self._applied.get(rid) == fingerprint:
                continue
            ns = names.router_ns(self.host, rid)
            with contextlib.suppress(StepFailed):
                run.steps.run(f"ra:{rid}", lambda r=rid, c=cmd, n=ns: self.servers.ensure(r, n, c, {}, run.full),
                              fingerprint)  # fmt: skip
                self._applied[rid] = fingerprint
        self.servers.keep_only(wanted, run.full)
        self._applied = {k: v for k, v in self._applied.items() if k in wanted}

    def step_keys(self, state: DesiredState) -> list[str]:
        return [f"ra:{r['id']}" for r in state["routers"] if advertised(r, state)]

    def forget(self) -> None:
        self._applied.clear()

    def close(self) -> None:
        self.servers.close()

    def teardown(self) -> None:
        self.servers.teardown()

"""What a network's dnsmasq is told, in the formats of Neutron's DHCP agent (neutron/agent/linux/dhcp.py): the
command line, the hosts file (static leases only: MAC -> address and hostname, no dynamic pool) and the options
file (router, DNS servers, classless static routes with the metadata hop). IPv6 subnets are served as Neutron's
dnsmasq serves them: DHCPv6 in `dhcpv6-stateful` (addresses and options) and `dhcpv6-stateless` (options only)
address mode; `slaac` ones are not (their addresses come from router advertisements). Pure: dhcp.py runs them."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudnet.dataplane.kernel.addressing import metadata_hop
from cloudnet.wire.guest_net import METADATA_ROUTE

DesiredState = dict[str, Any]
LEASE = "86400s"  # Neutron's dhcp_lease_duration default
DOMAIN = "openstacklocal"  # Neutron's dns_domain default
DHCPV6 = ("dhcpv6-stateful", "dhcpv6-stateless")
PORT_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,63}")  # (no dot first: dnsmasq skips dotfiles, our temporaries)


@dataclass(frozen=True)
class Files:
    """A network's dnsmasq files, in a directory of its own."""

    dir: Path

    @property
    def pid(self) -> Path:
        return self.dir / "pid"

    @property
    def hosts(self) -> Path:
        return self.dir / "host"

    @property
    def new_hosts(self) -> Path:
        """Static leases of ports added since the hosts file was last written, a file each (LXD's way): dnsmasq
        reads one as it appears, so a new port costs one small file, not a reread of every lease of the network."""
        return self.dir / "hosts.d"

    @property
    def opts(self) -> Path:
        return self.dir / "opts"

    @property
    def leases(self) -> Path:
        return self.dir / "leases"


def dhcp_subnets(state: DesiredState) -> dict[str, list[dict[str, Any]]]:
    """By network: its subnets served by DHCP (enable_dhcp; IPv6 ones in a DHCPv6 address mode), on which its
    metadata port (the server's address) has an address."""
    found: dict[str, list[dict[str, Any]]] = {}
    for s in sorted(state["subnets"].values(), key=lambda s: str(s["id"])):
        if not s.get("enable_dhcp") or s["network_id"] not in state["networks"]:
            continue
        if s["ip_version"] == 6 and s.get("ipv6_address_mode") not in DHCPV6:
            continue
        port = state["networks"][s["network_id"]].get("metadata_port") or {}
        if any(f["subnet_id"] == s["id"] for f in port.get("fixed_ips", [])):
            found.setdefault(s["network_id"], []).append(s)
    return found


def ports_by_network(state: DesiredState) -> dict[str, list[dict[str, Any]]]:
    """This host's instance and pool ports, by network: the ones its servers know."""
    found: dict[str, list[dict[str, Any]]] = {}
    for port in [*state["ports"].values(), *state.get("pool_ports", {}).values()]:
        found.setdefault(port["network_id"], []).append(port)
    return found


def hostname(address: str) -> str:
    """Neutron's default host name of an address (without the DNS extension): host-10-0-0-5."""
    return "host-" + address.replace(".", "-").replace(":", "-")


def leased(subnets: list[dict[str, Any]]) -> set[str]:
    """The served subnets whose addresses DHCP hands out (IPv4, and IPv6 in `dhcpv6-stateful` mode)."""
    return {s["id"] for s in subnets if s["ip_version"] == 4 or s.get("ipv6_address_mode") == "dhcpv6-stateful"}


def hosts_lines(ports: list[dict[str, Any]], subnet_ids: set[str]) -> list[str]:
    """`<mac>,<name>,<ip>` (`[<ip>]` for IPv6) for every address of these ports (the network's) on these subnets."""
    lines = set()
    for port in ports:
        for f in port["fixed_ips"]:
            if f["subnet_id"] in subnet_ids:
                ip = ipaddress.ip_address(f["ip_address"])  # (normalised: nothing else reaches the file)
                shown = f"[{ip}]" if ip.version == 6 else str(ip)
                lines.add(f"{_mac(port['mac_address'])},{hostname(str(ip))},{shown}")
    return sorted(lines)


def hosts_files(
    ports: list[dict[str, Any]], subnet_ids: set[str], known: dict[tuple[Any, ...], str] | None = None
) -> dict[str, str]:
    """Static leases by port: port id -> its lines (a port with no address served has none). `known`: lines
    rendered before, by what they depend on (kept by the caller from pass to pass: most ports do not change)."""
    found, rendered = {}, {}
    for port in ports:
        if not PORT_ID.fullmatch(port["id"]):
            raise ValueError(f"not a port id: {port['id']!r}")  # (it names a file)
        key = (port["id"], port["mac_address"], *((f["subnet_id"], f["ip_address"]) for f in port["fixed_ips"]
                                                  if f["subnet_id"] in subnet_ids))  # fmt: skip
        text = known.get(key) if known is not None else None
        if text is None:
            text = "".join(f"{line}\n" for line in hosts_lines([port], subnet_ids))
        rendered[key] = text
        if text:
            found[port["id"]] = text
    if known is not None:
        known.clear()
        known.update(rendered)
    return found


def _mac(mac: str) -> str:
    parts = mac.lower().split(":")
    if len(parts) != 6 or not all(len(p) == 2 and all(c in "0123456789abcdef" for c in p) for p in parts):
        raise ValueError(f"not a MAC address: {mac!r}")
    return ":".join(parts)


def opts_lines(state: DesiredState, network_id: str, subnets: list[dict[str, Any]]) -> list[str]:
    """Per subnet: DNS servers, router, and the classless static routes (121, and 249 for Windows) when there are
    host routes or a metadata hop: then the list ends with the default route, as clients ignore option 3 with 121."""
    lines = []
    v4 = [ipaddress.ip_network(s["cidr"]) for s in subnets if s["ip_version"] == 4]
    for s in subnets:
        tag = f"tag:subnet-{s['id']}"
        if s["ip_version"] == 6:
            servers = [f"[{ipaddress.ip_address(a)}]" for a in s.get("dns_nameservers") or [] if ":" in a]
            lines += [f"{tag},option6:dns-server,{','.join(servers)}"] if servers else []
            lines.append(f"{tag},option6:domain-search,{DOMAIN}")
            continue
        servers = [str(ipaddress.ip_address(a)) for a in s.get("dns_nameservers") or [] if ":" not in a]
        if servers:
            lines.append(f"{tag},option:dns-server,{','.join(servers)}")
        gateway = s.get("gateway_ip")
        routes = [(str(ipaddress.ip_network(r["destination"], strict=False)), str(ipaddress.ip_address(r["nexthop"])))
                  for r in s.get("host_routes") or [] if ":" not in r["destination"]]  # fmt: skip
        hop = metadata_hop(state, network_id, s["id"])
        if hop and hop != gateway:
            routes.append((METADATA_ROUTE, hop))
        # Other subnets of the segment are on-link (Neutron's isolated-subnet rule).
        routes += [(str(n), "0.0.0.0") for n in v4 if str(n) != str(ipaddress.ip_network(s["cidr"]))]
        if routes:
            if gateway:
                routes.append(("0.0.0.0/0", str(ipaddress.ip_address(gateway))))
            flat = ",".join(f"{d},{h}" for d, h in routes)
            lines += [f"{tag},option:classless-static-route,{flat}", f"{tag},249,{flat}"]
        lines.append(f"{tag},option:router,{ipaddress.ip_address(gateway)}" if gateway else f"{tag},option:router")
    return lines


def command(files: Files, iface: str, mtu: int, subnets: list[dict[str, Any]]) -> list[str]:
    """Neutron's dnsmasq command line for a network, DHCP only (port 0: no DNS server), on the metadata port's
    interface only; `--conf-file=/dev/null` so that no system configuration comes in."""
    ranges, size = [], 0
    for s in subnets:
        net = ipaddress.ip_network(s["cidr"])
        size += net.num_addresses
        mask = net.netmask if net.version == 4 else net.prefixlen
        ranges.append(f"--dhcp-range=set:subnet-{s['id']},{net.network_address},static,{mask},{LEASE}")
    return [
        "dnsmasq", "--no-hosts", "--no-resolv", "--port=0", f"--pid-file={files.pid}",
        f"--dhcp-hostsfile={files.hosts}", f"--dhcp-hostsdir={files.new_hosts}", f"--dhcp-optsfile={files.opts}",
        f"--dhcp-leasefile={files.leases}",
        "--bind-dynamic", f"--interface={iface}", "--except-interface=lo", *ranges,
        f"--dhcp-option-force=option:mtu,{int(mtu)}", f"--dhcp-lease-max={min(size, 2**24)}",
        "--conf-file=/dev/null", f"--domain={DOMAIN}",
    ]  # fmt: skip

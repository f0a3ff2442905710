"""DHCP_Options: one row per subnet with DHCP enabled, as Neutron's OVN driver writes them, so that ovn-controller
answers a port's DHCP itself (the LSP links the row of its first such subnet in `dhcpv4_options` / `dhcpv6_options`).

IPv4: router and server_id are the gateway, server_mac a MAC derived from the subnet id (stable across resyncs),
lease_time, mtu (option 26), dns_server, domain_name (Neutron's default domain, as the Linux dataplane's dnsmasq
gives it), and classless_static_route (121) carrying 169.254.169.254/32 via the network's metadata localport, the
subnet's host routes and the default route (a client that takes classless routes ignores `router`, RFC 3442).
IPv6 (DHCPv6 address modes only): server_id, dns_server, domain_search, and dhcpv6_stateless for the stateless
mode (options only: the address comes from the router's RA, desired_routers.ra_configs).
Every value is re-parsed as an address or CIDR here: what cannot be is left out and reported, so no stored text
reaches ovn-controller's option parser as anything but an address.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from cloudnet.northbound.rows import Desired, Row, address, ids, network

LEASE_TIME = 43200  # seconds (Neutron's dhcp_lease_duration default is a day; half keeps renewals frequent)
METADATA_ROUTE = "169.254.169.254/32"
DHCPV6_MODES = ("dhcpv6-stateful", "dhcpv6-stateless")
DOMAIN = "openstacklocal"  # Neutron's dns_domain default (the Linux dataplane's dnsmasq: --domain)
# A port's budget of DHCP asks, as the Linux dataplane's (fw_render.DHCP_RATE): a guest that floods ovn-controller's
# DHCP (each ask is a packet-in) does not starve the others. OVN meters QoS rows by bandwidth, not packets: about 20
# discovers a second of 300 bytes, a burst of about 60 (a client asks a handful of times a lease). Each row's
# `set_meter` is a meter of its own (ovn-controller names it by the logical flow), so the budget is per port.
BUDGET_RATE_KBPS = 48
BUDGET_BURST_KBIT = 144
BUDGET_PRIORITY = 32700  # (QoS rows' range is 0-32767: above any policy's rule, which DHCP asks need not meet)
DHCP_ASKS = "((udp.src == 68 && udp.dst == 67) || (udp.src == 546 && udp.dst == 547))"


def server_mac(subnet_id: str) -> str:
    digest = hashlib.sha256(subnet_id.encode()).digest()
    return "fa:16:3e:" + ":".join(f"{b:02x}" for b in digest[:3])


def _set(values: Iterable[str]) -> str:
    """OVN's set syntax for an option with several values."""
    return "{" + ", ".join(values) + "}"


def add(out: Desired, subnets: Iterable[Any], mtus: dict[str, int], metadata_ip: dict[str, str]) -> dict[str, str]:
    """Rows for every DHCP-enabled subnet of these (switch) networks; returns {subnet id: row key}."""
    keys: dict[str, str] = {}
    for s in subnets:
        if not s.enable_dhcp or s.network_id not in mtus:
            continue
        try:
            options = _v4(s, mtus[s.network_id], metadata_ip.get(s.network_id)) if s.ip_version == 4 else _v6(s)
        except (ValueError, TypeError, KeyError) as exc:
            out.refused.append(f"subnet {s.id!r}: DHCP options left out ({exc})")
            continue
        if options is None:
            continue
        key = f"dhcp/{s.id}"
        out.rows.append(Row("DHCP_Options", key, {
            "cidr": network(s.cidr), "options": options,
            "external_ids": ids(key, subnet_id=s.id, network_id=s.network_id),
        }))  # fmt: skip
        keys[s.id] = key
    return keys


def _v4(s: Any, mtu: int, metadata: str | None) -> dict[str, str]:
    options = {"lease_time": str(LEASE_TIME), "mtu": str(int(mtu)), "server_mac": server_mac(s.id),
               "domain_name": f'"{DOMAIN}"'}  # fmt: skip
    routes: list[str] = []
    if metadata:
        routes.append(f"{METADATA_ROUTE},{address(metadata)}")
    for route in s.host_routes or []:
        routes.append(f"{network(route['destination'])},{address(route['nexthop'])}")
    if s.gateway_ip:
        gateway = address(s.gateway_ip)
        options.update(router=gateway, server_id=gateway)
        routes.append(f"0.0.0.0/0,{gateway}")
    elif metadata:
        options["server_id"] = address(metadata)  # (no gateway: the network's own service address answers)
    else:
        raise ValueError("no gateway and no metadata port to answer from")
    options["classless_static_route"] = _set(routes)
    servers = [address(d) for d in s.dns_nameservers or [] if ":" not in str(d)]
    if servers:
        options["dns_server"] = _set(servers)
    return options


def _v6(s: Any) -> dict[str, str] | None:
    if s.ipv6_address_mode not in DHCPV6_MODES:
        return None  # SLAAC or static: nothing for a DHCPv6 server to say
    options = {"server_id": server_mac(s.id), "domain_search": f'"{DOMAIN}"'}
    if s.ipv6_address_mode == "dhcpv6-stateless":
        options["dhcpv6_stateless"] = "true"
    servers = [address(d) for d in s.dns_nameservers or [] if ":" in str(d)]
    if servers:
        options["dns_server"] = _set(servers)
    return options


def budget(lsp: Row) -> Row | None:
    """The port's budget of DHCP asks: a QoS row metering what it sends to DHCP servers, v4 and v6 together (None
    for a port that gets no DHCP answer from OVN). The match names the port by its id (checked: a plain name)."""
    if lsp.columns["type"] != "" or not (lsp.refs.get("dhcpv4_options") or lsp.refs.get("dhcpv6_options")):
        return None
    port = lsp.columns["name"]
    key = f"qos/dhcp/{port}"
    return Row("QoS", key, {
        "priority": BUDGET_PRIORITY, "direction": "from-lport", "action": {},
        "match": f'inport == "{port}" && {DHCP_ASKS}',
        "bandwidth": {"rate": BUDGET_RATE_KBPS, "burst": BUDGET_BURST_KBIT},
        "external_ids": ids(key, port_id=port),
    }, parent=lsp.parent, parent_column="qos_rules")  # fmt: skip

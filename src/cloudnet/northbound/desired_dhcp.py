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

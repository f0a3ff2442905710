"""A subnet's request bodies and the checks of its CIDR, gateway, allocation pools, DNS servers and host routes,
as Neutron words them (services/networks/subnets.py applies them)."""

from __future__ import annotations

import ipaddress
import itertools
from typing import Literal

from pydantic import Field, field_validator

from cloudnet.errors import BadRequest, Conflict, InvalidInput
from cloudnet.services.validation import Body, Tags, check_ip

Net = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_DNS_NAMESERVERS = 5
MAX_HOST_ROUTES = 20


class Pool(Body):
    start: str
    end: str

    _ip = field_validator("start", "end")(check_ip)


class HostRoute(Body):
    destination: str
    nexthop: str

    @field_validator("destination")
    @classmethod
    def _cidr(cls, v: str) -> str:
        return str(network(v))

    _nexthop = field_validator("nexthop")(check_ip)


Ipv6Mode = Literal["slaac", "dhcpv6-stateful", "dhcpv6-stateless"]

# Sentinel so that an explicit `"gateway_ip": null` (no gateway) differs from an omitted one.
AUTO = "auto"


class SubnetCreate(Body):
    network_id: str
    cidr: str | None = Field(None, max_length=64)  # none: from a subnet pool (subnet_alloc.py)
    prefixlen: int | None = Field(None, ge=0, le=128)
    ip_version: Literal[4, 6] | None = None
    name: str = Field("", max_length=255)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    gateway_ip: str | None = AUTO
    allocation_pools: list[Pool] | None = None
    dns_nameservers: list[str] = Field(default_factory=list)
    host_routes: list[HostRoute] = Field(default_factory=list)
    enable_dhcp: bool = True
    ipv6_ra_mode: Ipv6Mode | None = None
    ipv6_address_mode: Ipv6Mode | None = None
    subnetpool_id: str | None = Field(None, max_length=36)
    use_default_subnetpool: bool = False
    tags: Tags

    _dns = field_validator("dns_nameservers")(lambda v: dns_list(v))


class SubnetUpdate(Body):
    name: str | None = Field(None, max_length=255)
    description: str | None = Field(None, max_length=255)
    gateway_ip: str | None = AUTO
    allocation_pools: list[Pool] | None = None
    dns_nameservers: list[str] | None = None
    host_routes: list[HostRoute] | None = None
    enable_dhcp: bool | None = None

    _dns = field_validator("dns_nameservers")(lambda v: None if v is None else dns_list(v))


def network(text: str) -> Net:
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError(f"'{text}' is not a valid IP subnet") from None
    if ipaddress.ip_address(text.split("/")[0]) != net.network_address:
        raise ValueError(f"'{text}' isn't a recommended CIDR, use '{net}'")
    return net


def dns_list(values: list[str]) -> list[str]:
    out = [check_ip(v) for v in values]
    seen: set[str] = set()
    for v in out:
        if v in seen:
            raise ValueError(f"Duplicate nameserver '{v}'")
        seen.add(v)
    if len(out) > MAX_DNS_NAMESERVERS:
        raise ValueError(f"Exceeded maximum amount of DNS nameservers ({MAX_DNS_NAMESERVERS})")
    return out


def hosts(cidr: Net) -> tuple[int, int]:
    """First and last assignable host address of a CIDR, as integers."""
    first, last = int(cidr.network_address), int(cidr.broadcast_address)
    if cidr.version == 4 and cidr.prefixlen < 31:
        return first + 1, last - 1
    if cidr.version == 6 and cidr.prefixlen < 128:
        return first + 1, last
    return first, last


def default_gateway(cidr: Net) -> str | None:
    lo, hi = hosts(cidr)
    return str(ipaddress.ip_address(lo)) if lo <= hi else None


def check_gateway(cidr: Net, gateway: str | None) -> str | None:
    if gateway is None:
        return None
    try:
        ip = ipaddress.ip_address(gateway)
    except ValueError:
        raise BadRequest(f"Invalid input for gateway_ip. Reason: '{gateway}' is not a valid IP address.") from None
    lo, hi = hosts(cidr)
    if ip.version != cidr.version or not lo <= int(ip) <= hi:
        raise InvalidInput(f"Gateway is not valid on subnet: {ip} is not a host address of {cidr}")
    return str(ip)


def check_pools(cidr: Net, pools: list[Pool] | None, gateway: str | None) -> list[dict[str, str]]:
    lo, hi = hosts(cidr)
    if pools is None:
        if lo > hi:
            return []
        gw = int(ipaddress.ip_address(gateway)) if gateway else None
        ranges = [(lo, hi)]
        if gw is not None and lo <= gw <= hi:
            ranges = [(a, b) for a, b in ((lo, gw - 1), (gw + 1, hi)) if a <= b]
        return [{"start": str(ipaddress.ip_address(a)), "end": str(ipaddress.ip_address(b))} for a, b in ranges]
    spans: list[tuple[int, int]] = []
    for pool in pools:
        start, end = ipaddress.ip_address(pool.start), ipaddress.ip_address(pool.end)
        if start.version != cidr.version or end.version != cidr.version:
            raise InvalidInput(f"Allocation pool {pool.start}-{pool.end} is not of IP version {cidr.version}")
        if not (lo <= int(start) <= hi and lo <= int(end) <= hi):
            raise BadRequest(
                f"The allocation pool {pool.start}-{pool.end} spans beyond the subnet cidr {cidr}.",
                type="OutOfBoundsAllocationPool",
            )
        if int(start) > int(end):
            raise InvalidInput(f"Allocation pool start {pool.start} is after its end {pool.end}")
        spans.append((int(start), int(end)))
    spans.sort()
    for (a0, a1), (b0, b1) in itertools.pairwise(spans):
        if b0 <= a1:
            raise BadRequest(
                "Found overlapping allocation pools: "
                f"{ipaddress.ip_address(a0)}-{ipaddress.ip_address(a1)} and "
                f"{ipaddress.ip_address(b0)}-{ipaddress.ip_address(b1)} for subnet {cidr}.",
                type="OverlappingAllocationPools",
            )
    if gateway is not None:
        gw = int(ipaddress.ip_address(gateway))
        for a, b in spans:
            if a <= gw <= b:
                raise Conflict(
                    f"Gateway ip {gateway} conflicts with allocation pool "
                    f"{ipaddress.ip_address(a)}-{ipaddress.ip_address(b)}.",
                    type="GatewayConflictWithAllocationPools",
                )
    return [{"start": str(ipaddress.ip_address(a)), "end": str(ipaddress.ip_address(b))} for a, b in spans]


def check_routes(cidr: Net, routes: list[HostRoute]) -> list[dict[str, str]]:
    if len(routes) > MAX_HOST_ROUTES:
        raise BadRequest(
            f"Unable to complete operation for subnet: exceeded maximum of {MAX_HOST_ROUTES} host routes.",
            type="HostRoutesExhausted",
        )
    out: list[dict[str, str]] = []
    for r in routes:
        if (
            ipaddress.ip_network(r.destination).version != cidr.version
            or ipaddress.ip_address(r.nexthop).version != cidr.version
        ):
            raise InvalidInput(f"Host route {r.destination} via {r.nexthop} is not of IP version {cidr.version}")
        item = {"destination": r.destination, "nexthop": r.nexthop}
        if item in out:
            raise InvalidInput(f"Duplicate hostroute '{r.destination} {r.nexthop}'")
        out.append(item)
    return out


def check_dns_versions(cidr: Net, servers: list[str]) -> None:
    for dns in servers:
        if ipaddress.ip_address(dns).version != cidr.version:
            raise InvalidInput(f"DNS nameserver {dns} is not of IP version {cidr.version}")


def check_ipv6_modes(cidr: Net, ra_mode: str | None, address_mode: str | None) -> None:
    """Neutron's rules for the IPv6 modes: both given means the same value, and an automatic address mode (SLAAC,
    DHCPv6-stateless: a port's address is its MAC's EUI-64) needs a /64."""
    if ra_mode and address_mode and ra_mode != address_mode:
        raise InvalidInput(f"ipv6_ra_mode set to '{ra_mode}' with ipv6_address_mode set to '{address_mode}' is not "
                           "valid. If both attributes are set, they must be the same value")  # fmt: skip
    if address_mode in ("slaac", "dhcpv6-stateless") and cidr.prefixlen != 64:
        raise InvalidInput(f"Invalid CIDR {cidr} for IPv6 address mode. OpenStack uses the EUI-64 address format, "
                           "which requires the prefix to be /64")  # fmt: skip

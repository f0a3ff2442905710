"""Where a network's external addresses come from, and who already uses which one.

A network reaches its uplink through a router of its own project with an external gateway: the uplink is that
router's external network. Listen addresses of forwards and outbound SNAT addresses must lie in the uplink's
subnets or its `cloudnet:routes`, and must not be taken by a port, a gateway, or another network's
forward or SNAT address. Nor may they be the network, broadcast or gateway address of an uplink subnet.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select

from cloudnet.errors import BadRequest
from cloudnet.store import tables as t

P, A, S, N, R, F = t.ports, t.ip_allocations, t.subnets, t.networks, t.routers, t.forwards
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network
NAT_KEYS = ("ipv4.nat.address", "ipv6.nat.address")
ROUTER_INTERFACE = "network:router_interface"


def parse_ip(value: str) -> IP:
    """An address as Go's net.ParseIP reads it: no IPv6 zone (`%eth0`), IPv4-mapped IPv6 is IPv4.

    Raises ValueError for anything else (Python alone would accept `2001:db8::1%x` and keep
    `::ffff:192.0.2.1` as an IPv6 address).
    """
    text = value.strip()
    if "%" in text:
        raise ValueError(f"{value!r} has a zone")
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def quoted(value: object) -> str:
    """`value` as Go's %q prints a string: the wording of LXD's messages ("10.0.0.1", not '10.0.0.1')."""
    return json.dumps(str(value), ensure_ascii=False)


@dataclass(frozen=True)
class Uplink:
    network_id: str
    router_id: str
    ranges: tuple[Net, ...]  # subnets + cloudnet:routes
    gateways: frozenset[str]
    subnets: tuple[Net, ...] = ()  # on the link: their network and broadcast addresses are nobody's


def uplink_of(conn: Connection, network_id: str) -> Uplink | None:
    """The external network reached through a router of the network's project attached to `network_id` (None: no
    uplink)."""
    router_ids = [
        r[0]
        for r in conn.execute(
            select(P.c.device_id).where(P.c.network_id == network_id, P.c.device_owner == ROUTER_INTERFACE)
        )
    ]
    if not router_ids:
        return None
    owner = select(N.c.project_id).where(N.c.id == network_id).scalar_subquery()
    row = conn.execute(
        select(R.c.id, P.c.network_id)
        .join(P, P.c.id == R.c.gw_port_id)
        # Only the network's own routers: another project may attach its router to a shared network (through a
        # port of its own), which must not move the owner's forwards and SNAT address onto that router.
        .where(R.c.id.in_(router_ids), R.c.project_id == owner)
        .order_by(R.c.created_at, R.c.id)
    ).first()
    if row is None:
        return None
    router_id, ext_id = row
    subnets = conn.execute(select(S.c.cidr, S.c.gateway_ip).where(S.c.network_id == ext_id)).all()
    routes = conn.execute(select(N.c.routes).where(N.c.id == ext_id)).scalar() or []
    on_link = tuple(ipaddress.ip_network(c) for c, _gw in subnets)
    ranges = on_link + tuple(ipaddress.ip_network(r) for r in routes)
    return Uplink(ext_id, router_id, ranges, frozenset(gw for _c, gw in subnets if gw), on_link)


def lock_networks(conn: Connection, network_ids: set[str] | list[str]) -> None:
    """Take turns, until commit, with every other writer of these networks' forwards, SNAT addresses and router
    links (FOR NO KEY UPDATE, always in id order so that two such writers cannot wait for each other)."""
    ids = sorted(set(network_ids))
    if ids:
        conn.execute(select(N.c.id).where(N.c.id.in_(ids)).order_by(N.c.id).with_for_update(key_share=True)).all()


def require_uplink(conn: Connection, network_id: str, *, lock: bool = False) -> Uplink:
    """The network's uplink (400 without one). `lock`: take turns with every other writer of addresses on
    that uplink (forwards, SNAT addresses) until commit, so that the checks that follow see what they
    committed; otherwise two requests could both find an address free and both take it."""
    uplink = uplink_of(conn, network_id)
    if uplink is None:
        raise BadRequest(
            f"Network {network_id} has no uplink: attach it to a router with an external gateway first",
            type="NetworkHasNoUplink",
        )
    if lock:
        conn.execute(select(N.c.id).where(N.c.id == uplink.network_id).with_for_update(key_share=True))
        return require_uplink(conn, network_id)  # as it is now that the others' changes are in
    return uplink


def check_external_address(
    conn: Connection, uplink: Uplink, network_id: str, address: IP, *, what: str, skip_forward: str | None = None
) -> None:
    """The rules shared by listen addresses and SNAT addresses (400 with the reason otherwise)."""
    text = str(address)
    if address.is_unspecified:
        raise BadRequest(f"Cannot use unspecified address: {quoted(text)}")
    if not any(address.version == r.version and address in r for r in uplink.ranges):
        raise BadRequest(f"Uplink network does not contain {quoted(text)} in its routes")
    for subnet in (s for s in uplink.subnets if address.version == s.version and address in s):
        reserved = reserved_addresses(subnet)
        if address in reserved:
            raise BadRequest(f"{what} {quoted(text)} cannot be a {reserved[address]} address (subnet {subnet})")
    if text in _all_gateways(conn):
        raise BadRequest(f"{what} {quoted(text)} is already in use by a gateway")
    if conn.execute(select(A.c.port_id).where(A.c.ip_address == text)).first() is not None:
        # Which port is not said: it may be another project's (a router gateway), not the caller's to know of.
        raise BadRequest(f"{what} {quoted(text)} is already in use by a port")
    fwd = conn.execute(select(F.c.network_id, F.c.id).where(F.c.listen_address == text)).first()
    if fwd is not None and fwd.id != skip_forward and fwd.network_id != network_id:
        raise BadRequest(f"{what} {quoted(text)} overlaps with another network or NIC")
    for (config,) in conn.execute(select(N.c.config).where(N.c.id != network_id)):
        if any(_canonical((config or {}).get(k)) == text for k in NAT_KEYS):
            raise BadRequest(f"{what} {quoted(text)} overlaps with another network or NIC")


def external_addresses_in_use(conn: Connection) -> set[str]:
    """Addresses that forwards listen on or networks source-NAT to: not for ports (IPAM skips them)."""
    used = {a for (a,) in conn.execute(select(F.c.listen_address))}
    for (config,) in conn.execute(select(N.c.config)):
        used.update(c for c in (_canonical((config or {}).get(k)) for k in NAT_KEYS) if c)
    return used


def reserved_addresses(subnet: Net) -> dict[IP, str]:
    """A subnet's addresses that name the subnet rather than a host: its network address (IPv6: the subnet-router
    anycast address) and its IPv4 broadcast address; none on point-to-point (/31, /127) and single-host prefixes."""
    if subnet.prefixlen >= subnet.max_prefixlen - 1:
        return {}
    out: dict[IP, str] = {subnet.network_address: "network"}
    if subnet.version == 4:
        out[subnet.broadcast_address] = "broadcast"
    return out


def _all_gateways(conn: Connection) -> set[str]:
    return {g for (g,) in conn.execute(select(S.c.gateway_ip).where(S.c.gateway_ip.isnot(None)))}


def _canonical(value: Any) -> str | None:
    if not value:
        return None
    try:
        return str(parse_ip(value))
    except ValueError:
        return None

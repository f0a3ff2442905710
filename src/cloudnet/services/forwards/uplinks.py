"""Where a network's external addresses come from, and who already uses which one.

A network reaches its uplink through a router of its own project with an external gateway: the uplink is that
router's external network. Listen addresses of forwards and outbound SNAT addresses must lie in the uplink's
subnets or its `cloudnet:routes`, and must not be taken by a port, a gateway, or another network's
forward or SNAT address. Nor may they be the network, broadcast or gateway address of an uplink subnet.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, or_, select

from cloudnet.errors import BadRequest
from cloudnet.services.ports.owners import ROUTER_INTERFACE
from cloudnet.store import tables as t

P, A, S, N, R, F = t.ports, t.ip_allocations, t.subnets, t.networks, t.routers, t.forwards
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network
NAT_KEYS = ("ipv4.nat.address", "ipv6.nat.address")
FORWARD, SNAT = "network forward", "SNAT address"  # the kinds of external addresses, as refusals name them


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


def router_of(conn: Connection, network_id: str) -> tuple[str, str] | None:
    """(router, external network) through which `network_id` reaches its uplink: the oldest router of the network's
    own project attached to it with a gateway (None: no uplink)."""
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
    return None if row is None else (row[0], row[1])


def uplink_of(conn: Connection, network_id: str) -> Uplink | None:
    """The external network reached through a router of the network's project attached to `network_id`, with its
    ranges (None: no uplink)."""
    found = router_of(conn, network_id)
    return None if found is None else _uplink(conn, *found)


def _uplink(conn: Connection, router_id: str, ext_id: str) -> Uplink:
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
    """The network's uplink (400 without one). `lock`: take turns until commit with every other writer of the
    network's router link (forward_deps refuses taking it away from what uses it), then with every other writer of
    addresses on the uplink (forwards, SNAT addresses, its ranges), so that the checks that follow see what they
    committed; otherwise two requests could both find an address free and both take it. The network's lock comes
    first because it decides which uplink there is; the uplink's ranges are read once both are held."""
    if lock:
        lock_networks(conn, {network_id})
    found = router_of(conn, network_id)
    if found is None:
        raise BadRequest(
            f"Network {network_id} has no uplink: attach it to a router with an external gateway first",
            type="NetworkHasNoUplink",
        )
    if lock:
        lock_networks(conn, {found[1]})
    return _uplink(conn, *found)


def check_external_address(conn: Connection, uplink: Uplink, network_id: str, address: IP, *, what: str) -> None:
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
    if conn.execute(select(S.c.id).where(S.c.gateway_ip == text).limit(1)).first() is not None:
        raise BadRequest(f"{what} {quoted(text)} is already in use by a gateway")
    if conn.execute(select(A.c.port_id).where(A.c.ip_address == text)).first() is not None:
        # Which port is not said: it may be another project's (a router gateway), not the caller's to know of.
        raise BadRequest(f"{what} {quoted(text)} is already in use by a port")
    if any(nid != network_id for nid, _address, _kind in external_addresses(conn, addresses=[text])):
        raise BadRequest(f"{what} {quoted(text)} overlaps with another network or NIC")


def external_addresses(
    conn: Connection, *, networks: Iterable[str] | None = None, addresses: Iterable[str] | None = None,
    kinds: tuple[str, ...] = (FORWARD, SNAT),
) -> Iterator[tuple[str, str, str]]:  # fmt: skip
    """(network, address, kind) of the addresses forwards listen on (kind FORWARD) and networks source-NAT to
    (SNAT): of `networks` only, and only those among `addresses` (canonical, as both are stored); None: all."""
    ids = None if networks is None else sorted(set(networks))
    wanted = None if addresses is None else sorted(set(addresses))
    if ids == [] or wanted == []:
        return
    if FORWARD in kinds:
        forwards = select(F.c.network_id, F.c.listen_address)
        if ids is not None:
            forwards = forwards.where(F.c.network_id.in_(ids))
        if wanted is not None:
            forwards = forwards.where(F.c.listen_address.in_(wanted))
        for nid, listen in conn.execute(forwards).all():  # (read whole: the caller may stop early, or query)
            yield nid, listen, FORWARD
    if SNAT in kinds:
        values = [N.c.config[key].as_string() for key in NAT_KEYS]
        snat = select(N.c.id, *values).where(or_(*(v.isnot(None) if wanted is None else v.in_(wanted) for v in values)))
        if ids is not None:
            snat = snat.where(N.c.id.in_(ids))
        for nid, *found in conn.execute(snat).all():
            for address in filter(None, map(_canonical, found)):
                if wanted is None or address in wanted:
                    yield nid, address, SNAT


def external_addresses_in_use(conn: Connection) -> set[str]:
    """Addresses that forwards listen on or networks source-NAT to: not for ports (IPAM skips them)."""
    return {address for _nid, address, _kind in external_addresses(conn)}


def reserved_addresses(subnet: Net) -> dict[IP, str]:
    """A subnet's addresses that name the subnet rather than a host: its network address (IPv6: the subnet-router
    anycast address) and its IPv4 broadcast address; none on point-to-point (/31, /127) and single-host prefixes."""
    if subnet.prefixlen >= subnet.max_prefixlen - 1:
        return {}
    out: dict[IP, str] = {subnet.network_address: "network"}
    if subnet.version == 4:
        out[subnet.broadcast_address] = "broadcast"
    return out


def _canonical(value: Any) -> str | None:
    if not value:
        return None
    try:
        return str(parse_ip(value))
    except ValueError:
        return None

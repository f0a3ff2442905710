"""What a network's forwards and SNAT addresses depend on, and the refusals that keep it there.

A forward (and a network's `ipvN.nat.address`) belongs to its network and uses things it does not own: the
network's router link to its uplink (router interface on the network's subnets, that router's gateway on an
external network), the uplink's subnets and `cloudnet:routes` its address lies in, and the subnets its targets
are in. As LXD does:
- the network going takes its forwards and SNAT addresses with it, in the same transaction (LXD's
  `networks_forwards.network_id ... ON DELETE CASCADE`, and its test suite: "deleting the network clears the
  forward firewall rules");
- anything else they use is refused (409, the reason named) while they use it: LXD refuses uplink `ipv4.routes`
  / `ipv6.routes` that no longer contain a forward's listen address (`validateRoutes`: "ipv4.routes" is missing
  network for listener ...) and an OVN network's subnet that no longer contains a forward's target ("Network
  forward for ... has a ... target address ... that is not within the network subnet"); Neutron refuses a router
  interface or gateway its floating IPs need (RouterInterfaceInUseByFloatingIP,
  RouterExternalGatewayInUseByFloatingIp).
Both address families alike. Callers lock first (uplinks.lock_networks), then check, so that a forward or SNAT
address created concurrently is either seen here or sees the change.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from cloudnet.errors import BadRequest, Conflict
from cloudnet.services import uplinks
from cloudnet.services.forward_rules import targets
from cloudnet.services.uplinks import NAT_KEYS, ROUTER_INTERFACE, Net, parse_ip
from cloudnet.store import tables as t

F, N, S, P, A = t.forwards, t.networks, t.subnets, t.ports, t.ip_allocations
SHOWN = 5  # addresses named in a refusal


def _version(address: str) -> int:
    return parse_ip(address).version


@dataclass
class Users:
    """A network's forwards and SNAT addresses: what needs its router link."""

    listen: list[str] = field(default_factory=list)
    snat: list[str] = field(default_factory=list)
    targets: dict[str, list[str]] = field(default_factory=dict)  # target address -> listen addresses

    def families(self) -> set[int]:
        return {_version(a) for a in self.listen + self.snat}

    def describe(self, version: int | None = None) -> str:
        def pick(addresses: list[str]) -> list[str]:
            return sorted(a for a in addresses if version is None or _version(a) == version)

        parts = []
        if listen := pick(self.listen):
            parts.append(f"network forwards ({_names(listen)})")
        if snat := pick(self.snat):
            parts.append(f"SNAT addresses ({_names(snat)})")
        return " and ".join(parts)


def _names(addresses: list[str]) -> str:
    more = len(addresses) - SHOWN
    return ", ".join(addresses[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def users_of(conn: Connection, network_ids: Iterable[str]) -> dict[str, Users]:
    """The networks among `network_ids` that have forwards or SNAT addresses, with them."""
    ids = sorted(set(network_ids))
    found: dict[str, Users] = {}
    if not ids:
        return found
    for nid, listen, config, ports in conn.execute(
        select(F.c.network_id, F.c.listen_address, F.c.config, F.c.ports).where(F.c.network_id.in_(ids))
    ):
        users = found.setdefault(nid, Users())
        users.listen.append(listen)
        for target in targets(config, ports):
            users.targets.setdefault(target, []).append(listen)
    for nid, config in conn.execute(select(N.c.id, N.c.config).where(N.c.id.in_(ids))):
        snat = [(config or {}).get(k) for k in NAT_KEYS]
        if any(snat):
            found.setdefault(nid, Users()).snat.extend(a for a in snat if a)
    return found


@dataclass(frozen=True)
class Link:
    """How a network reaches its uplink: the router, its external network, and the network's subnets on it."""

    router_id: str | None
    external_id: str | None
    subnets: frozenset[str]


def _link(conn: Connection, network_id: str) -> Link:
    uplink = uplinks.uplink_of(conn, network_id)
    if uplink is None:
        return Link(None, None, frozenset())
    attached = conn.execute(
        select(A.c.subnet_id)
        .join(P, P.c.id == A.c.port_id)
        .where(P.c.network_id == network_id, P.c.device_owner == ROUTER_INTERFACE, P.c.device_id == uplink.router_id)
    ).all()
    return Link(uplink.router_id, uplink.network_id, frozenset(r[0] for r in attached))


def require_link(conn: Connection, network_id: str, version: int, what: str) -> None:
    """A forward or SNAT address of IP version `version` needs a subnet of that version of its network on the
    router that is its uplink (else its traffic has no way in or out): 400 without one."""
    link = _link(conn, network_id)
    subnets = _subnets(conn, network_id)
    if not any(subnets[s].version == version for s in link.subnets if s in subnets):
        raise BadRequest(
            f"{what}: network {network_id} has no IPv{version} subnet on its uplink router; attach one first",
            type="NetworkHasNoUplink",
        )


def _subnets(conn: Connection, network_id: str) -> dict[str, Net]:
    rows = conn.execute(select(S.c.id, S.c.cidr).where(S.c.network_id == network_id))
    return {sid: ipaddress.ip_network(cidr) for sid, cidr in rows}


@contextmanager
def links_kept(conn: Connection, network_ids: Iterable[str], what: str, type_: str) -> Iterator[None]:
    """Refuse the change made in the body if it takes from a network with forwards or SNAT addresses its uplink
    (or moves it to another router or external network), its last subnet of a family they use on that router,
    or the router interface on a subnet a forward sends traffic to. `what` starts the refusal's message."""
    ids = set(network_ids)
    uplinks.lock_networks(conn, ids)
    users = users_of(conn, ids)
    before = {nid: _link(conn, nid) for nid in users}
    yield
    for nid, used in sorted(users.items()):
        old, new = before[nid], _link(conn, nid)
        if old.router_id is None:
            continue  # nothing reached the outside before either
        if (new.router_id, new.external_id) != (old.router_id, old.external_id):
            raise Conflict(
                f"{what}: network {nid} reaches its uplink (external network {old.external_id}) through router "
                f"{old.router_id}, and its {used.describe()} need that; delete them first",
                type=type_,
            )
        subnets = _subnets(conn, nid)
        for version in sorted(used.families()):
            had = {s for s in old.subnets if subnets.get(s) is not None and subnets[s].version == version}
            if had and not had & new.subnets:
                raise Conflict(
                    f"{what}: it is the last IPv{version} link of network {nid} to its uplink router "
                    f"{old.router_id}, and its {used.describe(version)} need it; delete them first",
                    type=type_,
                )
        for sid in sorted(old.subnets - new.subnets):
            hit = sorted(a for a in used.targets if sid in subnets and parse_ip(a) in subnets[sid])
            if hit:
                listen = sorted({x for a in hit for x in used.targets[a]})
                raise Conflict(
                    f"{what}: network forwards ({_names(listen)}) send traffic to {_names(hit)} in subnet {sid} "
                    "through it; change or delete them first",
                    type=type_,
                )


def ranges_kept(conn: Connection, external_id: str, remaining: list[Net], what: str, type_: str) -> None:
    """Refuse shrinking an external network's address ranges (its subnets and `cloudnet:routes`) to `remaining`
    while a forward listens on, or a SNAT address is, an address that only the removed part held."""
    uplinks.lock_networks(conn, {external_id})  # forwards and SNAT addresses on it are made under this lock too
    uplink_ranges = _ranges(conn, external_id)
    candidates = [(nid, a, "network forward") for nid, a in conn.execute(select(F.c.network_id, F.c.listen_address))]
    for nid, config in conn.execute(select(N.c.id, N.c.config)):
        candidates += [(nid, a, "SNAT address") for a in ((config or {}).get(k) for k in NAT_KEYS) if a]
    for nid, text, kind in sorted(candidates):
        address = parse_ip(text)
        inside = any(address.version == r.version and address in r for r in uplink_ranges)
        kept = any(address.version == r.version and address in r for r in remaining)
        if not inside or kept:
            continue
        uplink = uplinks.uplink_of(conn, nid)
        if uplink is not None and uplink.network_id == external_id:
            raise Conflict(
                f"{what}: {kind} {text} of network {nid} uses it (the uplink would no longer contain it); "
                "delete or move that first",
                type=type_,
            )


def _ranges(conn: Connection, external_id: str) -> list[Net]:
    cidrs = [c for (c,) in conn.execute(select(S.c.cidr).where(S.c.network_id == external_id))]
    routes = conn.execute(select(N.c.routes).where(N.c.id == external_id)).scalar() or []
    return [ipaddress.ip_network(c) for c in [*cidrs, *routes]]


def subnet_kept(conn: Connection, subnet: Any) -> None:
    """Refuse deleting a subnet that forwards or SNAT addresses use: an uplink subnet their address is in (unless
    another range of the uplink holds it too), or a subnet of their network they send traffic to (LXD: a forward's
    targets stay within the network's subnets)."""
    what = f"Unable to complete operation on subnet {subnet.id}"
    network = conn.execute(select(N.c.router_external, N.c.routes).where(N.c.id == subnet.network_id)).one()
    if network.router_external:
        others = conn.execute(select(S.c.cidr).where(S.c.network_id == subnet.network_id, S.c.id != subnet.id))
        remaining = [ipaddress.ip_network(c) for c in [*(c for (c,) in others), *(network.routes or [])]]
        ranges_kept(conn, subnet.network_id, remaining, what, "SubnetInUse")
    users = users_of(conn, {subnet.network_id}).get(subnet.network_id)
    cidr = ipaddress.ip_network(subnet.cidr)
    hit = sorted(a for a in (users.targets if users else {}) if parse_ip(a) in cidr)
    if users and hit:
        listen = sorted({x for a in hit for x in users.targets[a]})
        raise Conflict(
            f"{what}: network forwards ({_names(listen)}) send traffic to {_names(hit)} in it; change or delete them "
            "first",
            type="SubnetInUse",
        )


def addresses_free(conn: Connection, addresses: dict[str, str], network_id: str) -> None:
    """Refuse a subnet whose gateway, network or broadcast address (`addresses`: address -> which) a forward
    listens on or a network source-NATs to."""
    uplinks.lock_networks(conn, {network_id})
    taken = uplinks.external_addresses_in_use(conn)
    for address, which in sorted(addresses.items()):
        if address in taken:
            raise Conflict(
                f"The {which} address {address} is already in use by a network forward or SNAT address",
                type="IpAddressInUse",
            )


def subnet_addresses(cidr: Net, gateway: str | None) -> dict[str, str]:
    """A subnet's addresses that no forward or SNAT address may be: its gateway, network and broadcast address."""
    out = {str(a): kind for a, kind in uplinks.reserved_addresses(cidr).items()}
    if gateway:
        out[gateway] = "gateway"
    return out

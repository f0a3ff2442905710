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
The other way round, a forward's targets must be reachable from its uplink: each in a subnet of its network that
is attached to the uplink router (400 at create and update otherwise), as Neutron refuses port forwarding to a
port whose subnet the floating IP's router is not on ("External network ... is not reachable from subnet ...").
Both address families alike. Every check here runs after the network's row is locked (uplinks.lock_networks; the
checks below take it themselves, and forward and SNAT address writers take it too), so that a forward or SNAT
address created or changed concurrently is either seen here or sees the change.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from cloudnet.errors import BadRequest, Conflict
from cloudnet.services.forwards import uplinks
from cloudnet.services.forwards.forward_rules import targets
from cloudnet.services.forwards.uplinks import Net, Uplink, parse_ip, quoted
from cloudnet.services.ports.owners import ROUTER_INTERFACE
from cloudnet.store import tables as t

F, N, S, P, A, R = t.forwards, t.networks, t.subnets, t.ports, t.ip_allocations, t.routers
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

    def refuse_targets_in(self, cidr: Net | None, where: str, what: str, type_: str) -> None:
        """409 if a forward sends traffic to an address in `cidr` (a subnet about to be taken away, `where`)."""
        hit = sorted(a for a in self.targets if cidr is not None and parse_ip(a) in cidr)
        if hit:
            listen = sorted({x for a in hit for x in self.targets[a]})
            raise Conflict(
                f"{what}: network forwards ({_names(listen)}) send traffic to {_names(hit)} {where}; change or "
                "delete them first",
                type=type_,
            )


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
    for nid, address, _kind in uplinks.external_addresses(conn, networks=ids, kinds=(uplinks.SNAT,)):
        found.setdefault(nid, Users()).snat.append(address)
    return found


@dataclass(frozen=True)
class Link:
    """How a network reaches its uplink: the router, its external network, the network's subnets (`subnets`) and
    those of them on that router (`attached`)."""

    router_id: str | None
    external_id: str | None
    subnets: Mapping[str, Net]
    attached: frozenset[str]


def link_of(conn: Connection, network_id: str, uplink: Uplink | None = None) -> Link:
    """The network's link to its uplink (`uplink`: already known, else looked up)."""
    subnets = {sid: ipaddress.ip_network(cidr) for sid, cidr in conn.execute(
        select(S.c.id, S.c.cidr).where(S.c.network_id == network_id))}  # fmt: skip
    router = (uplink.router_id, uplink.network_id) if uplink is not None else uplinks.router_of(conn, network_id)
    if router is None:
        return Link(None, None, subnets, frozenset())
    attached = conn.execute(
        select(A.c.subnet_id)
        .join(P, P.c.id == A.c.port_id)
        .where(P.c.network_id == network_id, P.c.device_owner == ROUTER_INTERFACE, P.c.device_id == router[0])
    ).all()
    return Link(*router, subnets, frozenset(r[0] for r in attached))


def require_link(conn: Connection, uplink: Uplink, network_id: str, version: int, what: str) -> Link:
    """A forward or SNAT address of IP version `version` needs a subnet of that version of its network on the
    router that is its uplink (else its traffic has no way in or out): 400 without one. Returns the link."""
    link = link_of(conn, network_id, uplink)
    if not any(link.subnets[s].version == version for s in link.attached):
        raise BadRequest(
            f"{what}: network {network_id} has no IPv{version} subnet on its uplink router; attach one first",
            type="NetworkHasNoUplink",
        )
    return link


def require_reachable(link: Link, addresses: Iterable[str]) -> None:
    """Every address a forward sends traffic to lies in a subnet of its network on the uplink router: traffic from
    the uplink reaches no other (Neutron: "External network ... is not reachable from subnet ..."). 400 otherwise."""
    for text in sorted(set(addresses)):
        address = parse_ip(text)
        inside = sorted(sid for sid, cidr in link.subnets.items() if address in cidr)
        if link.attached.intersection(inside):
            continue
        if link.router_id is None:  # (a forward an earlier version left on a detached network)
            where, why = "the uplink", "the network has no uplink router"
        else:
            where = f"the uplink router {link.router_id}"
            why = f"its subnet {inside[0]} is not attached to it; attach it first" if inside else "it is in no subnet"
        raise BadRequest(f"Target address {quoted(text)} is not reachable from {where}: {why}",
                         type="ForwardTargetNotReachable")  # fmt: skip


@contextmanager
def links_kept(conn: Connection, network_ids: Iterable[str], what: str, type_: str) -> Iterator[None]:
    """Refuse the change made in the body if it takes from a network with forwards or SNAT addresses its uplink
    (or moves it to another router or external network), its last subnet of a family they use on that router,
    or the router interface on a subnet a forward sends traffic to. `what` starts the refusal's message."""
    ids = set(network_ids)
    uplinks.lock_networks(conn, ids)
    users = users_of(conn, ids)
    before = {nid: link_of(conn, nid) for nid in users}
    yield
    for nid, used in sorted(users.items()):
        old, new = before[nid], link_of(conn, nid)
        if old.router_id is None:
            continue  # nothing reached the outside before either
        if (new.router_id, new.external_id) != (old.router_id, old.external_id):
            raise Conflict(
                f"{what}: network {nid} reaches its uplink (external network {old.external_id}) through router "
                f"{old.router_id}, and its {used.describe()} need that; delete them first",
                type=type_,
            )
        for version in sorted(used.families()):
            had = {s for s in old.attached if s in new.subnets and new.subnets[s].version == version}
            if had and not had & new.attached:
                raise Conflict(
                    f"{what}: it is the last IPv{version} link of network {nid} to its uplink router "
                    f"{old.router_id}, and its {used.describe(version)} need it; delete them first",
                    type=type_,
                )
        for sid in sorted(old.attached - new.attached):
            used.refuse_targets_in(new.subnets.get(sid), f"in subnet {sid} through it", what, type_)


def ranges_kept(
    conn: Connection, external_id: str, what: str, type_: str, *, without_subnet: str | None = None,
    routes: list[str] | None = None,
) -> None:  # fmt: skip
    """Refuse a change of an external network's address ranges (its subnets and `cloudnet:routes`): deleting its
    subnet `without_subnet`, or setting its routes to `routes`, while a forward listens on, or a SNAT address is,
    an address that only the part taken away held."""
    uplinks.lock_networks(conn, {external_id})  # forwards and SNAT addresses on it are made under this lock too
    subnets = conn.execute(select(S.c.id, S.c.cidr).where(S.c.network_id == external_id)).all()
    current = conn.execute(select(N.c.routes).where(N.c.id == external_id)).scalar() or []
    before = [ipaddress.ip_network(c) for c in [*(c for _sid, c in subnets), *current]]
    after = [ipaddress.ip_network(c) for sid, c in subnets if sid != without_subnet]
    after += [ipaddress.ip_network(r) for r in (current if routes is None else routes)]
    # Only networks behind a router with its gateway there can have it as their uplink.
    gateways = select(R.c.id).join(P, P.c.id == R.c.gw_port_id).where(P.c.network_id == external_id)
    behind = select(P.c.network_id).where(P.c.device_owner == ROUTER_INTERFACE, P.c.device_id.in_(gateways))
    behind_ids = {nid for (nid,) in conn.execute(behind.distinct())}
    # Floating IPs associated to nothing use it too (Neutron: their port's address is in the subnet).
    loose = select(F.c.listen_address).where(F.c.floating_network_id == external_id, F.c.network_id.is_(None))
    for (text,) in conn.execute(loose):
        address = parse_ip(text)
        if any(address in r for r in before if r.version == address.version) and not any(
                address in r for r in after if r.version == address.version):  # fmt: skip
            raise Conflict(f"{what}: floating IP {text} is in it; delete that first", type=type_)
    for nid, text, kind in sorted(uplinks.external_addresses(conn, networks=behind_ids)):
        address = parse_ip(text)
        inside = any(address.version == r.version and address in r for r in before)
        kept = any(address.version == r.version and address in r for r in after)
        if not inside or kept:
            continue
        router = uplinks.router_of(conn, nid)
        if router is not None and router[1] == external_id:
            raise Conflict(
                f"{what}: {kind} {text} of network {nid} uses it (the uplink would no longer contain it); "
                "delete or move that first",
                type=type_,
            )


def subnet_kept(conn: Connection, subnet: Any) -> None:
    """Refuse deleting a subnet that forwards or SNAT addresses use: an uplink subnet their address is in (unless
    another range of the uplink holds it too), or a subnet of their network they send traffic to (LXD: a forward's
    targets stay within the network's subnets; such a subnet is on the uplink router, whose interface keeps it,
    unless an earlier version let a forward target a subnet that was not)."""
    what = f"Unable to complete operation on subnet {subnet.id}"
    uplinks.lock_networks(conn, {subnet.network_id})
    if conn.execute(select(N.c.router_external).where(N.c.id == subnet.network_id)).scalar():
        ranges_kept(conn, subnet.network_id, what, "SubnetInUse", without_subnet=subnet.id)
    users = users_of(conn, {subnet.network_id}).get(subnet.network_id)
    if users is not None:
        users.refuse_targets_in(ipaddress.ip_network(subnet.cidr), "in it", what, "SubnetInUse")


def addresses_free(conn: Connection, addresses: dict[str, str], network_id: str) -> None:
    """Refuse a subnet whose gateway, network or broadcast address (`addresses`: address -> which) a forward
    listens on or a network source-NATs to."""
    uplinks.lock_networks(conn, {network_id})
    taken = {address for _nid, address, _kind in uplinks.external_addresses(conn, addresses=addresses)}
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

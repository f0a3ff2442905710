"""A router's gateway chassis on OVN and whether its gateway port can fail over (`GET /v2.0/routers/{id}/
gateway_chassis`, admins only: chassis are hosts).

The chassis are the ones the northbound writer gives the port (desired_routers.gateways), highest priority first.
OVN moves the port by BFD (ovn-controller's ha-chassis.c): a gateway chassis holds it when no chassis of higher
priority is up in its BFD view, but only while it has a session up to another chassis: another gateway chassis of
the port, or a reference chassis (ovn-northd's ref_chassis: one holding a port of a network of the router, or of
any router those networks join, transitively). With none up, a chassis cannot tell a dead peer from its own
isolation and claims nothing: OVN's guard against two active gateways. So two gateway chassis fail over only when
a third chassis holds a port there; three or more see each other. One has nothing to fail over to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, or_, select

from cloudnet.errors import NotFound, not_found
from cloudnet.northbound import desired_routers
from cloudnet.northbound.rows import SAFE_NAME, Desired
from cloudnet.services.context import Context
from cloudnet.services.hosts import zones
from cloudnet.services.hosts.hosts import admin_only
from cloudnet.services.ports import metadata_ports
from cloudnet.services.ports.port_specs import ROUTER_GATEWAY, ROUTER_INTERFACE
from cloudnet.store import tables as t
from cloudnet.store.db import Store

P, N = t.ports, t.networks
ROUTER_OWNERS = (ROUTER_INTERFACE, ROUTER_GATEWAY)


def show(store: Store, ctx: Context, router_id: str, configured: list[str], dataplane: str) -> dict[str, Any]:
    admin_only(ctx)
    with store.read() as conn:
        R = t.routers
        router = conn.execute(select(R.c.id, R.c.gw_port_id, R.c.availability_zone_hints)
                              .where(R.c.id == router_id)).first()  # fmt: skip
        if router is None:
            raise not_found("router", router_id)
        if dataplane != "ovn":
            raise NotFound(f"Router {router_id} has no gateway chassis: they are OVN's (this dataplane is {dataplane})",
                           type="GatewayChassisNotFound")  # fmt: skip
        return assess(conn, router_id, router.gw_port_id, configured, list(router.availability_zone_hints or []))


def assess(conn: Connection, router_id: str, gw_port_id: str | None, configured: list[str],
           hints: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    physnet = None
    if gw_port_id:
        physnet = conn.execute(select(N.c.physical_network).join(P, P.c.network_id == N.c.id)
                               .where(P.c.id == gw_port_id)).scalar()  # fmt: skip
    by_physnet, reporting = desired_routers.uplink_hosts(conn, Desired(0))
    chosen = [c for c in configured if SAFE_NAME.fullmatch(c)]
    chassis = desired_routers.gateways(chosen, physnet, by_physnet, reporting) if gw_port_id else []
    zone_of = zones.host_zones(conn)
    chassis = desired_routers.in_zones(chassis, hints or [], zone_of)
    others = sorted(reference_hosts(conn, router_id) - set(chassis))
    listed = [{"host": name, "priority": len(chassis) - i, "availability_zone": zone_of.get(name)}
              for i, name in enumerate(chassis)]  # fmt: skip
    out: dict[str, Any] = {
        "router_id": router_id,
        "chassis": listed,
        "availability_zone_hints": hints or [],
        "reference_chassis": others,  # chassis beside the gateways that hold ports of the router's networks
    }
    out["failover"], out["reason"] = verdict(gw_port_id is not None, physnet, chassis, others, hints or [])
    return out


def verdict(has_gateway: bool, physnet: str | None, chassis: list[str], others: list[str],
            hints: Sequence[str] = ()) -> tuple[bool, str]:  # fmt: skip
    where = f"physical network {physnet}" if physnet else "the external network"
    if not has_gateway:
        return False, "The router has no external gateway."
    if not chassis and hints:
        return False, (f"No gateway chassis in its availability zones ({', '.join(hints)}): no host of them has an "
                       f"uplink on {where}; its gateway goes to no other zone.")  # fmt: skip
    if not chassis:
        return False, f"No gateway chassis: no host has an uplink on {where} (cloudnet agent --uplink PHYSNET:IFACE)."
    if len(chassis) == 1:
        return False, (
            f"One gateway chassis ({chassis[0]}): nothing to fail over to; give another host an uplink on {where}."
        )
    if len(chassis) == 2 and not others:
        return False, (
            f"Its two gateway chassis ({', '.join(chassis)}) are the only chassis holding ports of the networks it "
            "joins: when the active one dies, the other has no BFD session up to any chassis and does not claim the "
            f"gateway port (OVN's guard against two active gateways). Give a third host an uplink on {where}, or "
            "bind a port of these networks on a chassis that is not a gateway."
        )  # fmt: skip
    return True, ""


def reference_hosts(conn: Connection, router_id: str) -> set[str]:
    """The hosts ports are bound to on the networks of the router and of every router reachable through them (OVN's
    reference chassis of its gateway; router and metadata ports are bound to no chassis)."""
    legs: dict[str, set[str]] = {}  # router -> its networks
    on: dict[str, set[str]] = {}  # network -> its routers
    for device_id, network_id in conn.execute(select(P.c.device_id, P.c.network_id)
                                              .where(P.c.device_owner.in_(ROUTER_OWNERS))):  # fmt: skip
        legs.setdefault(device_id, set()).add(network_id)
        on.setdefault(network_id, set()).add(device_id)
    routers, networks, todo = {router_id}, set[str](), [router_id]
    while todo:
        for network in legs.get(todo.pop(), set()) - networks:
            networks.add(network)
            for other in on.get(network, set()) - routers:
                routers.add(other)
                todo.append(other)
    if not networks:
        return set()
    owners = (*ROUTER_OWNERS, metadata_ports.DEVICE_OWNER)
    rows = conn.execute(select(P.c.host_id).distinct().where(P.c.network_id.in_(sorted(networks)),
                                                              P.c.host_id.is_not(None), P.c.host_id != "",
                                                              or_(P.c.device_owner.is_(None),
                                                                  P.c.device_owner.not_in(owners))))  # fmt: skip
    return {host for (host,) in rows}

"""A router's extra routes (Neutron's `extraroute` and `extraroute-atomic`): parsed, bounded and checked against
the subnets the router is on, with Neutron's errors (InvalidRoutes, RoutesExhausted, RouterInterfaceInUseByRoute).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, select

from cloudnet.errors import BadRequest, Conflict
from cloudnet.services.networks.subnet_specs import HostRoute
from cloudnet.store import tables as t

# Neutron's max_routes (the same default).
MAX_ROUTES = 30

Route = dict[str, str]


def _exhausted(router_id: str) -> BadRequest:
    return BadRequest(
        f"Unable to complete operation for {router_id}. The number of routes exceeds the maximum {MAX_ROUTES}.",
        type="RoutesExhausted",
    )


def _invalid(routes: list[Route], reason: str) -> BadRequest:
    return BadRequest(f"Invalid format for routes: {routes}, {reason}.", type="InvalidRoutes")


def parse(raw: Any, router_id: str) -> list[Route]:
    """`routes` of a request: a list of {destination, nexthop}, at most MAX_ROUTES (counted before any is read),
    each a network CIDR and an address of one IP version, none twice."""
    if not isinstance(raw, list):
        raise BadRequest(f"Invalid input for routes. Reason: '{str(raw)[:100]}' is not a list.")
    if len(raw) > MAX_ROUTES:
        raise _exhausted(router_id)
    out: list[Route] = []
    for item in raw:
        try:
            route = HostRoute.model_validate(item)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            reason = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] in ("missing", "extra_forbidden", "model_type"):
                reason = f"'{str(item)[:200]}' is not a valid route: needs exactly destination and nexthop"
            raise BadRequest(f"Invalid input for routes. Reason: {reason}.") from None
        clean = {"destination": route.destination, "nexthop": route.nexthop}
        if ipaddress.ip_network(route.destination).version != ipaddress.ip_address(route.nexthop).version:
            raise _invalid([clean], "the destination and the nexthop are of different IP versions")
        if clean in out:
            raise BadRequest(f"Invalid input for routes. Reason: Duplicate hostroute '{clean}'.")
        out.append(clean)
    return out


def _router_addresses(conn: Connection, router_id: str) -> tuple[list[Any], set[str]]:
    """The CIDRs of the subnets the router has a port on (interfaces and gateway) and the router's own addresses."""
    P, A, S = t.ports, t.ip_allocations, t.subnets
    rows = conn.execute(
        select(S.c.cidr, A.c.ip_address)
        .select_from(P.join(A, A.c.port_id == P.c.id).join(S, S.c.id == A.c.subnet_id))
        .where(P.c.device_id == router_id)
    ).all()
    return [ipaddress.ip_network(cidr) for cidr, _ip in rows], {str(ipaddress.ip_address(ip)) for _c, ip in rows}


def check(conn: Connection, router_id: str, routes: list[Route]) -> list[Route]:
    """The router's whole set of routes, as Neutron checks it: bounded, each nexthop on one of the router's subnets
    and none of the router's own addresses."""
    if len(routes) > MAX_ROUTES:
        raise _exhausted(router_id)
    if not routes:
        return routes
    cidrs, own = _router_addresses(conn, router_id)
    for r in routes:
        hop = ipaddress.ip_address(r["nexthop"])
        if not any(hop in c for c in cidrs):
            raise _invalid(routes, "the nexthop is not connected with router")
        if str(hop) in own:
            raise _invalid(routes, "the nexthop is used by router")
    return routes


def added(old: list[Route], new: list[Route]) -> list[Route]:
    """extraroute-atomic's add: the old routes and those new ones not there yet (adding one twice is no error)."""
    return old + [r for r in new if r not in old]


def removed(old: list[Route], gone: list[Route]) -> list[Route]:
    """extraroute-atomic's remove: the old routes but these (removing one that isn't there is no error)."""
    return [r for r in old if r not in gone]


def check_interface_unused(router: Any, subnets: Iterable[Any]) -> None:
    """A router interface whose subnet holds a route's nexthop stays (RouterInterfaceInUseByRoute, 409)."""
    routes: list[Route] = router.routes or []
    for s in subnets:
        cidr = ipaddress.ip_network(s.cidr)
        if any(ipaddress.ip_address(r["nexthop"]) in cidr for r in routes):
            raise Conflict(
                f"Router interface for subnet {s.id} on router {router.id} cannot be deleted, as it is required by "
                "one or more routes.",
                type="RouterInterfaceInUseByRoute",
            )

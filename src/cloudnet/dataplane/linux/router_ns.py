"""What a router's namespace must hold besides its legs, computed from the desired state alone: the NAT tables'
structure (nat_plan), the addresses its gateway leg answers for, its routes, and the neighbours it may know."""

from __future__ import annotations

import ipaddress
from typing import Any

from cloudnet.dataplane.base import DesiredState
from cloudnet.dataplane.kernel import routes
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.nat_plan import Structure


def gateway_port(router: dict[str, Any]) -> dict[str, Any] | None:
    gw = router["gateway"]
    return router["ports"].get(gw["port_id"]) if gw else None


def nat_structures(router: dict[str, Any], state: DesiredState) -> dict[int, Structure]:
    """The router's NAT per IP version: forwards, hairpin, per-network SNAT addresses, outbound SNAT."""
    gw_port = gateway_port(router)
    gw_if = names.router_gw(gw_port["id"]) if gw_port else None
    structures = {}
    for version in (4, 6):
        internal_by_net: dict[str, list[str]] = {}
        for pid, p in router["ports"].items():
            if gw_port and pid == gw_port["id"]:
                continue
            for f in p["fixed_ips"]:
                subnet = state["subnets"].get(f["subnet_id"])
                if subnet and subnet["ip_version"] == version:
                    internal_by_net.setdefault(p["network_id"], []).append(subnet["cidr"])
        internal = tuple(sorted({c for cidrs in internal_by_net.values() for c in cidrs}))
        key = f"ipv{version}.nat.address"
        snat = tuple(
            (tuple(sorted(internal_by_net[nid])), addrs[key])
            for nid, addrs in sorted(router.get("nat_addresses", {}).items())
            if addrs.get(key) and nid in internal_by_net
        )
        external = [f["ip_address"] for f in (gw_port or {}).get("fixed_ips", [])
                    if ipaddress.ip_address(f["ip_address"]).version == version]  # fmt: skip
        # Neutron does not NAT IPv6 by default: only an explicit ipv6.nat.address source-NATs it.
        default = external[0] if version == 4 and router["enable_snat"] and external else None
        if not router["enable_snat"]:
            snat = ()
        legs = scoped_legs(router, state, version)
        outside = legs[gw_if][0] if gw_if in legs else None
        # Neutron's L3 agent: an IPv4 subnet in the external subnet's address scope is routed, not SNATed.
        routed = tuple(c for scope, cidrs in legs.values() if outside and scope == outside for c in cidrs)
        routed = tuple(c for c in routed if c in internal) if version == 4 else ()
        gateway_out = gw_if if version == 4 and router["enable_snat"] else None
        structures[version] = Structure(version, gw_if, internal, snat, default, routed,
                                        scope_rules(legs, gateway_out))  # fmt: skip
    return structures


def scoped_legs(
    router: dict[str, Any], state: DesiredState, version: int
) -> dict[str, tuple[str | None, tuple[str, ...]]]:
    """Each leg with an address of this IP version: (its address scope, None for none; its subnets' CIDRs)."""
    gw_port = gateway_port(router)
    out: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    for pid, p in sorted(router["ports"].items()):
        subnets = [state["subnets"][f["subnet_id"]] for f in p["fixed_ips"] if f["subnet_id"] in state["subnets"]]
        subnets = [s for s in subnets if s["ip_version"] == version]
        if subnets:
            name = names.router_gw(pid) if gw_port and pid == gw_port["id"] else names.router_iface(pid)
            out[name] = (subnets[0].get("address_scope_id"), tuple(sorted(s["cidr"] for s in subnets)))
    return out


def scope_rules(legs: dict[str, tuple[str | None, tuple[str, ...]]],
                gateway_out: str | None) -> tuple[tuple[str, tuple[str, ...]], ...]:  # fmt: skip
    """Per leg, the legs a new connection entering it may leave by: those of its own address scope, and the
    gateway while it SNATs (IPv4); none while every leg is in one scope (nothing to keep apart)."""
    if len({scope for scope, _c in legs.values()}) < 2:
        return ()
    out = []
    for name, (scope, _cidrs) in legs.items():
        allowed = {n for n, (s, _c) in legs.items() if s == scope}
        if gateway_out and name != gateway_out:
            allowed.add(gateway_out)
        out.append((name, tuple(sorted(allowed))))
    return tuple(out)


def gateway_extras(router: dict[str, Any]) -> list[tuple[str, int]]:
    """Listen and SNAT addresses the router answers ARP/NDP for on its external leg."""
    addresses = {f["listen_address"] for f in router.get("forwards", [])}
    for addrs in router.get("nat_addresses", {}).values():
        addresses.update(addrs.values())
    return sorted((a, 32 if ipaddress.ip_address(a).version == 4 else 128) for a in addresses)


def wanted_routes(router: dict[str, Any], state: DesiredState, gw_index: int | None) -> list[routes.Route]:
    """The router's default routes: through its gateway leg to the gateway of each of its external subnets."""
    gw_port = gateway_port(router)
    if gw_port is None or gw_index is None:
        return []
    out = {}
    for f in gw_port["fixed_ips"]:
        subnet = state["subnets"].get(f["subnet_id"])
        if subnet and subnet["gateway_ip"]:
            default = "::/0" if subnet["ip_version"] == 6 else "0.0.0.0/0"
            out[default] = routes.route(default, subnet["gateway_ip"], gw_index)  # (the last wins, as before)
    return list(out.values())


def router_routes(router: dict[str, Any], state: DesiredState, indexes: dict[str, int]) -> list[routes.Route]:
    """Every route of the router's namespace: its default routes, then its extra routes (extraroute), each through
    the leg on whose subnet its nexthop is (`indexes`: leg name -> interface index). An extra route replaces a
    default route to the same destination, as `ip route replace` would; of extra routes to one destination the first
    is kept (one route per destination: the converge would otherwise swap them on every pass); one whose nexthop is
    on no leg here (its interface is on another host's share, or its gateway has gone) is left out."""
    gw_port = gateway_port(router)
    gw_index = indexes.get(names.router_gw(gw_port["id"])) if gw_port else None
    out = {(r[0], r[1]): r for r in wanted_routes(router, state, gw_index)}
    legs = []
    for pid, port in router["ports"].items():
        is_gw = gw_port is not None and pid == gw_port["id"]
        index = indexes.get(names.router_gw(pid) if is_gw else names.router_iface(pid))
        for f in port["fixed_ips"]:
            subnet = state["subnets"].get(f["subnet_id"])
            if index is not None and subnet:
                legs.append((ipaddress.ip_network(subnet["cidr"]), index))
    extra: dict[tuple[int, str], routes.Route] = {}
    for r in router.get("routes", []):
        hop = ipaddress.ip_address(r["nexthop"])
        index = next((i for cidr, i in legs if hop in cidr), None)
        if index is not None:
            route = routes.route(r["destination"], r["nexthop"], index)
            extra.setdefault((route[0], route[1]), route)
    out.update(extra)
    return list(out.values())


def known_neighbours(state: DesiredState) -> dict[str, str]:
    """Address -> MAC of every port this host plumbs: the only neighbours a router's internal legs can have."""
    ports = list(state["ports"].values()) + list(state.get("pool_ports", {}).values())
    ports += [n["metadata_port"] for n in state["networks"].values() if n.get("metadata_port")]
    ports += [p for r in state["routers"] for p in r["ports"].values()]
    return {str(ipaddress.ip_address(f["ip_address"])): p["mac_address"] for p in ports for f in p["fixed_ips"]}

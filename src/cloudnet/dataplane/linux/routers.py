"""Routers on the Linux driver: a namespace per router (`cloudnet-router-<hash>-<id>`), a veth leg per port on its
network's bridge (qr-/qg- inside), its NAT (gateway SNAT, floating IPs and port forwardings: nat.py), its routes
and, whenever it is applied, no neighbour entry naming no port of this host. router_ns.py computes what goes in."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from pyroute2 import IPRoute

from cloudnet.dataplane.base import DesiredState
from cloudnet.dataplane.kernel import netns, routes
from cloudnet.dataplane.linux import names, nat, router_ns
from cloudnet.dataplane.linux.bridges import Bridges
from cloudnet.dataplane.linux.links import Links, ensure_leg, ifname
from cloudnet.dataplane.linux.passes import Done, Pass, fingerprint_of
from cloudnet.dataplane.steps import StepFailed


def router_legs(router: dict[str, Any]) -> set[str]:
    """The host ends of a router's legs (kept while its step fails: what it had stays)."""
    gw = router["gateway"]["port_id"] if router["gateway"] else None
    return {names.gateway_leg(pid) if pid == gw else names.router_leg(pid) for pid in router["ports"]}


class Routers:
    """The routers job (dataplane.base.Routers), SNAT and forwards included, one step per router."""

    def __init__(self, host: str, bridges: Bridges, nat_tables: nat.NatTables) -> None:
        self.host = host
        self.bridges = bridges
        self.nat = nat_tables
        self.done = Done()

    def apply(self, run: Pass) -> None:
        state = run.state
        # Which ports there are (their neighbour entries are kept): once a pass, when a router is applied.
        known: list[dict[str, str]] = []

        def neighbours() -> dict[str, str]:
            if not known:
                known.append(router_ns.known_neighbours(state))
            return known[0]

        for router in state["routers"]:
            run.wanted_ns.add(names.router_ns(self.host, router["id"]))
            run.wanted.update(router_legs(router))
            with contextlib.suppress(StepFailed):
                run.steps.run(f"router:{router['id']}", lambda r=router: self._apply_router(run, r, neighbours))
        self.done.keep(run.wanted_ns)

    def step_keys(self, state: DesiredState) -> list[str]:
        return [f"router:{r['id']}" for r in state["routers"]]

    def forget(self) -> None:
        self.done.forget()

    def _apply_router(self, run: Pass, router: dict[str, Any], neighbours: Callable[[], dict[str, str]]) -> str:
        state = run.state
        nets = {p["network_id"]: state["networks"].get(p["network_id"]) for p in router["ports"].values()}
        subnet_ids = {f["subnet_id"] for p in router["ports"].values() for f in p["fixed_ips"]}
        key = f"router:{router['id']}"
        fingerprint = fingerprint_of(router, nets, {i: state["subnets"].get(i) for i in sorted(subnet_ids)})
        if not run.full and (known := self.done.unchanged(key, fingerprint, run.wanted)) is not None:
            return known
        legs: set[str] = set()
        ns = self._apply_router_now(run, run.host, run.links, router, legs, neighbours)
        run.wanted.update(legs)
        self.done.record(key, fingerprint, frozenset(legs), ns)
        return ns

    def _apply_router_now(
        self, run: Pass, host: IPRoute, links: Links, router: dict[str, Any], wanted: set[str],
        neighbours: Callable[[], dict[str, str]],
    ) -> str:  # fmt: skip
        """The router's namespace from the desired state alone: its legs and their addresses, its NAT, its routes,
        and no neighbour entry that names no port of this host or one under another MAC (`neighbours`: address -> MAC
        of each port the host plumbs; what went is reported by full passes)."""
        state = run.state
        ns = names.router_ns(self.host, router["id"])
        key = f"router:{router['id']}"
        fresh = not netns.exists(ns)
        netns.ensure(ns)
        if fresh:
            self.nat.forget(ns, new=True)
            netns.write_sysctl(ns, "net/ipv4/ip_forward", "1")
            netns.write_sysctl(ns, "net/ipv6/conf/all/forwarding", "1")
            # Its legs' link-local addresses are usable at once (their MACs are the ports', unique on the network):
            # a router advertisement must come from one (RFC 4861), and a tentative one cannot send it.
            netns.write_sysctl(ns, "net/ipv6/conf/all/accept_dad", "0")
            netns.write_sysctl(ns, "net/ipv6/conf/default/accept_dad", "0")
        inside: set[str] = set()
        gw_port = router["gateway"]["port_id"] if router["gateway"] else None
        with netns.iproute(ns) as rtr:
            for port_id, port in router["ports"].items():
                if port["network_id"] not in state["networks"]:
                    continue
                is_gw = port_id == gw_port
                leg = names.gateway_leg(port_id) if is_gw else names.router_leg(port_id)
                end = names.router_gw(port_id) if is_gw else names.router_iface(port_id)
                wanted.add(leg)
                inside.add(end)
                extra = router_ns.gateway_extras(router) if is_gw else []
                ensure_leg(host, links, rtr, ns, leg, end, port, state["networks"][port["network_id"]], extra,
                           self.bridges.index(host, port["network_id"]))  # fmt: skip
            indexes = {}
            for msg in rtr.get_links():
                name = ifname(msg)
                if name.startswith((names.ROUTER_IFACE, names.ROUTER_GW)) and name not in inside:
                    run.found(key, [f"leftover interface {name}"])
                    rtr.link("del", index=msg["index"])
                elif name in inside:
                    indexes[name] = msg["index"]
            # NAT first: a route the kernel refuses fails the router, its forwards still work.
            found = self.nat.apply(ns, router_ns.nat_structures(router, state), router.get("forwards", []),
                                   check=run.checking)  # fmt: skip
            run.found(key, found)
            wanted_routes = router_ns.router_routes(router, state, indexes)
            run.found(key, routes.converge(rtr, wanted_routes, mine=routes.not_the_kernels, read=not fresh))
            if not fresh:
                # Also when the router changed: a port that took an address another had (a forward's target
                # again) must not be sent to at the old port's MAC until the kernel's entry expires.
                internal = {i for n, i in indexes.items() if n.startswith(names.ROUTER_IFACE)}
                dropped = routes.drop_stale_neighbours(rtr, internal, neighbours())
                if run.full:
                    run.found(key, dropped)
        return ns

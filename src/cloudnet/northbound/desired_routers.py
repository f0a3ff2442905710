"""Routers: a Logical_Router per router with a Logical_Router_Port per interface, a gateway port with
Gateway_Chassis, default and extra routes, and an SNAT row per attached IPv4 subnet (from the network's chosen SNAT
address, else the gateway's address) while SNAT is enabled.

A gateway port's chassis are the configured gateway chassis (`cloudnet up`: its own; on a physical network only if
it has an uplink there, when its agent says), then every host whose agent reports an uplink (--uplink
PHYSNET:IFACE) on the external network's physical network, by name: a chassis is named after its host, and only
there does the external network reach the outside (Neutron schedules gateways on chassis with bridge mappings of
the network's physnet likewise). The first has the highest priority; OVN moves the port to the next when it goes.
A router with `availability_zone_hints` gets only the chassis whose host reports one of those zones (Neutron's OVN
L3 scheduler filters its candidates so): when they all die its gateway goes to no other zone, and with none there it
has no Gateway_Chassis at all (an unhosted gateway port, as in Neutron).

Router advertisements are ovn-controller's, from an interface port's `ipv6_ra_configs` (ra_configs): only for an
IPv6 subnet with an `ipv6_ra_mode`, as Neutron's OVN driver writes them and its L3 agent's radvd sends them
(neutron/agent/linux/ra.py: intervals 30-100 s, the link MTU, RDNSS from the subnet's servers)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from cloudnet.northbound.rows import PREFIX, SAFE_NAME, Desired, Row, address, cidr_len, ids
from cloudnet.services.forwards import uplinks
from cloudnet.store import tables as t
from cloudnet.store import tables_subnetpools as tsp


def uplink_hosts(conn: Connection, out: Desired) -> tuple[dict[str, list[str]], set[str]]:
    """({physical network: the hosts whose agents report an uplink on it}, every host whose agent reports its
    uplinks, none included), from their heartbeats."""
    found: dict[str, list[str]] = {}
    reporting: set[str] = set()
    for name, report in conn.execute(select(t.hosts.c.name, t.hosts.c.report).order_by(t.hosts.c.name)):
        mapped = (report or {}).get("uplinks") if isinstance(report, dict) else None
        if not isinstance(mapped, dict):
            continue
        reporting.add(name)
        if not mapped:
            continue
        if not SAFE_NAME.fullmatch(name):
            out.refused.append(f"host {name!r}: not a plain name, no gateway chassis")
            continue
        for physnet in mapped:
            found.setdefault(str(physnet), []).append(name)
    return found, reporting


def gateways(configured: list[str], physnet: str | None, by_physnet: dict[str, list[str]],
             reporting: set[str]) -> list[str]:  # fmt: skip
    """A gateway port's chassis, highest priority first: the configured ones, then the hosts with an uplink on the
    external network's physical network. On a physical network, a configured chassis whose agent reports uplinks
    but none on it is left out: it has no way out there, and as the first it would hold the port (`cloudnet up`
    names its own chassis even when only another host has an uplink)."""
    uplinked = by_physnet.get(physnet or "", [])
    first = [c for c in configured if physnet is None or c in uplinked or c not in reporting]
    return first + [h for h in uplinked if h not in first]


def in_zones(chassis: list[str], hints: list[str], zone_of: dict[str, str]) -> list[str]:
    """The chassis (in their order) whose host is in one of the hinted zones; all of them without hints."""
    if not hints:
        return chassis
    return [c for c in chassis if zone_of.get(c) in hints]


RA_MODES = {"slaac": "slaac", "dhcpv6-stateful": "dhcpv6_stateful", "dhcpv6-stateless": "dhcpv6_stateless"}
RA_INTERVALS = {"min_interval": "30", "max_interval": "100"}  # seconds (Neutron's radvd defaults)


def ra_configs(fixed: list[tuple[str, str]], subnets: dict[str, Any], mtu: int | None) -> dict[str, str]:
    """An interface port's `ipv6_ra_configs`: from its first IPv6 subnet with an RA mode (one address mode per
    port in OVN); {} (no RAs) when none has one."""
    subnet = next((subnets[s] for s, _a in fixed if subnets[s].ip_version == 6 and subnets[s].ipv6_ra_mode), None)
    if subnet is None or subnet.ipv6_ra_mode not in RA_MODES:
        return {}
    configs = {"address_mode": RA_MODES[subnet.ipv6_ra_mode], "send_periodic": "true", **RA_INTERVALS}
    if mtu:
        configs["mtu"] = str(int(mtu))
    servers = [address(d) for d in subnet.dns_nameservers or [] if ":" in str(d)]
    if servers:  # (ovn-controller takes one)
        configs["rdnss"] = servers[0]
    return configs


def _lrp(out: Desired, router_key: str, port: Any, fixed: list[tuple[str, str]], subnets: dict[str, Any],
         ra: dict[str, str] | None = None) -> str:  # fmt: skip
    key = f"lrp/{port.id}"
    out.rows.append(Row("Logical_Router_Port", key, {
        "name": f"lrp-{port.id}", "mac": port.mac_address,
        "networks": [f"{address}/{cidr_len(subnets, subnet)}" for subnet, address in fixed],
        "ipv6_ra_configs": ra or {},
        "external_ids": ids(key, port_id=port.id, network_id=port.network_id, router_id=port.device_id),
    }, parent=router_key, parent_column="ports"))  # fmt: skip
    return key


def router(conn: Connection, out: Desired, r: Any, interfaces: list[Any], gateway: Any, fixed: dict[str, Any],
            subnets: dict[str, Any], chassis: list[str], mtus: dict[str, int]) -> None:  # fmt: skip
    lr = f"lr/{r.id}"
    out.rows.append(Row("Logical_Router", lr, {
        "name": PREFIX + r.id, "enabled": [bool(r.admin_state_up)],
        "external_ids": ids(lr, router_id=r.id, project_id=r.project_id, name=r.name),
    }))  # fmt: skip
    for port in interfaces:
        try:
            ra = ra_configs(fixed.get(port.id, []), subnets, mtus.get(port.network_id))
        except ValueError as exc:
            out.refused.append(f"router port {port.id!r}: no router advertisements ({exc})")
            ra = {}
        _lrp(out, lr, port, fixed.get(port.id, []), subnets, ra)
    routes: list[tuple[str, str]] = [(d["destination"], d["nexthop"]) for d in r.routes or []]
    gateway_ips = fixed.get(gateway.id, []) if gateway is not None else []
    if gateway is not None:
        lrp = _lrp(out, lr, gateway, gateway_ips, subnets)
        for priority, name in enumerate(reversed(chassis), start=1):
            key = f"gwc/{gateway.id}/{name}"
            out.rows.append(Row("Gateway_Chassis", key, {
                "name": f"lrp-{gateway.id}_{name}", "chassis_name": name, "priority": priority,
                "external_ids": ids(key, port_id=gateway.id, router_id=r.id),
            }, parent=lrp, parent_column="gateway_chassis"))  # fmt: skip
        for subnet_id, _address in gateway_ips:
            subnet = subnets[subnet_id]
            if subnet.gateway_ip:
                routes.insert(0, ("0.0.0.0/0" if subnet.ip_version == 4 else "::/0", subnet.gateway_ip))
    for prefix, nexthop in routes:
        key = f"route/{r.id}/{prefix}/{nexthop}"
        out.rows.append(Row("Logical_Router_Static_Route", key, {
            "ip_prefix": prefix, "nexthop": nexthop, "external_ids": ids(key, router_id=r.id),
        }, parent=lr, parent_column="static_routes"))  # fmt: skip
    scopes = subnet_scopes(conn, [s for p in [*interfaces, *([gateway] if gateway is not None else [])]
                                  for s, _a in fixed.get(p.id, [])])  # fmt: skip
    scope_policies(out, lr, r.id, [(s, subnets[s]) for p in interfaces for s, _a in fixed.get(p.id, [])], scopes)
    outside = [a for s, a in gateway_ips if subnets[s].ip_version == 4]
    if not (r.enable_snat and outside):
        return
    # Neutron: an IPv4 subnet in the external subnet's address scope is routed, not SNATed.
    outside_scope = next((scopes.get(s) for s, _a in gateway_ips if subnets[s].ip_version == 4), None)
    for port in interfaces:
        uplink = uplinks.router_of(conn, port.network_id)
        chosen = None
        if uplink is not None and uplink[0] == r.id:
            config = conn.execute(select(t.networks.c.config).where(t.networks.c.id == port.network_id)).scalar()
            chosen = (config or {}).get("ipv4.nat.address")
        for subnet_id, _address in fixed.get(port.id, []):
            subnet = subnets[subnet_id]
            if subnet.ip_version != 4 or (outside_scope and scopes.get(subnet_id) == outside_scope):
                continue
            key = f"snat/{r.id}/{subnet.cidr}"
            out.rows.append(Row("NAT", key, {
                "type": "snat", "logical_ip": subnet.cidr, "external_ip": chosen or outside[0],
                "external_ids": ids(key, router_id=r.id, network_id=port.network_id, subnet_id=subnet_id),
            }, parent=lr, parent_column="nat"))  # fmt: skip


def subnet_scopes(conn: Connection, subnet_ids: list[str]) -> dict[str, str]:
    """The address scope of each of these subnets that has one (its pool's)."""
    S, SP = t.subnets, tsp.subnetpools
    stmt = select(S.c.id, SP.c.address_scope_id).join(SP, SP.c.id == S.c.subnetpool_id).where(S.c.id.in_(subnet_ids))
    return {sid: scope for sid, scope in conn.execute(stmt) if scope}


SCOPE_PRIORITY = 32000  # (policies' range is 0..32767: above any a user could want to route by)


def scope_policies(out: Desired, lr: str, router_id: str, legs: list[tuple[str, Any]], scopes: dict[str, str]) -> None:
    """Neutron's L3 agent drops what would cross from one address scope into another behind a router (no scope is
    one of its own): a drop policy per ordered pair of the router's interface subnets in different scopes. (The
    outside's new connections into another scope are not told from replies in OVN's router policies: left open.)"""
    for version, ip in ((4, "ip4"), (6, "ip6")):
        cidrs = sorted({(sub.cidr, scopes.get(sid)) for sid, sub in legs if sub.ip_version == version},
                       key=lambda c: (c[0], c[1] or ""))  # fmt: skip
        for a, scope_a in cidrs:
            for b, scope_b in cidrs:
                if scope_a == scope_b:
                    continue
                key = f"scope/{router_id}/{a}/{b}"
                out.rows.append(Row("Logical_Router_Policy", key, {
                    "priority": SCOPE_PRIORITY, "match": f"{ip}.src == {a} && {ip}.dst == {b}", "action": "drop",
                    "external_ids": ids(key, router_id=router_id),
                }, parent=lr, parent_column="policies"))  # fmt: skip

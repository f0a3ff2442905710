"""What OVN's northbound database must hold, read from cloudnet's database in one snapshot.

Every row cloudnet owns carries `external_ids:cloudnet:key`, unique among them ("ls/<network id>",
"lsp/<port id>", ...), plus the ids of the objects it stands for; the writer (apply.py) diffs NB by that key.
Names OVN uses in logical-flow matches (switch ports, router ports, chassis) are built from ids that must be plain
tokens: an object whose id is not is left out and reported, so nothing a client chose can end up inside a match
expression. User text (names) travels only in external_ids, as data.

- a network: a Logical_Switch (MTU in other_config); a provider (flat/vlan) network also a `localnet` port;
- a port: a Logical_Switch_Port named by its id (an instance's iface-id), addresses "MAC IP..." and port_security
  from its fixed IPs and allowed address pairs, `requested-chassis` its binding host; the network's metadata port
  is its `localport`;
- a subnet with DHCP: a DHCP_Options row its ports link, and each such port a QoS row, its budget of DHCP asks
  (desired_dhcp.py); a port with a QoS policy (its own or its network's), QoS rows of its limits and mark
  (desired_qos.py);
- a router: desired_routers.py; security groups: desired_acls.py; forwards and floating IPs: desired_forwards.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from cloudnet.northbound import desired_acls, desired_dhcp, desired_forwards, desired_qos, desired_routers
from cloudnet.northbound.rows import PREFIX, SAFE_NAME, Desired, Row, ids, ip_key
from cloudnet.services.forwards import forward_targets
from cloudnet.services.hosts import zones
from cloudnet.services.ports import metadata_ports
from cloudnet.services.ports.port_specs import ROUTER_GATEWAY, ROUTER_INTERFACE
from cloudnet.services.qos import qos_state
from cloudnet.store import tables as t
from cloudnet.store import tables_trunks
from cloudnet.store.db import Store

ROUTER_LSP_OWNERS = (ROUTER_INTERFACE, ROUTER_GATEWAY)
AP = t.allowed_address_pairs
# (in one order whatever reads them, all or some: a port's port_security lists its pairs' MACs in this order)
PAIR_COLUMNS = (AP.c.port_id, AP.c.mac_address, AP.c.ip_address)
PAIRS = select(*PAIR_COLUMNS).order_by(*PAIR_COLUMNS)


@dataclass
class Basis:
    """What a build derived from the whole database that one port's rows depend on beyond the port's own rows
    (ports, ip_allocations, allowed_address_pairs, port_security_groups): scoped.py rebuilds a port's rows from it.
    `special`: ports whose rows, or whose change, reach beyond the port's own rows and its groups' (router and
    metadata ports, routers' gateway ports, ports refused or left out); a change to one is read in full."""

    switches: set[str] = field(default_factory=set)
    subnets: dict[str, Any] = field(default_factory=dict)
    dhcp: dict[str, str] = field(default_factory=dict)  # subnet -> its DHCP_Options key
    groups: dict[str, list[str]] = field(default_factory=dict)  # port -> every group it is in
    special: set[str] = field(default_factory=set)
    targets: set[tuple[str, str]] = field(default_factory=set)  # (network, address) of forward targets
    acls: desired_acls.Groups = field(default_factory=desired_acls.Groups)


def _port_security(mac: str, ips: list[str], pairs: list[tuple[str, str]]) -> list[str]:
    """One entry per MAC the port may send from: its own with its fixed IPs, and each pair's."""
    by_mac: dict[str, list[str]] = {mac: list(ips)}
    for pair_mac, pair_ip in pairs:
        by_mac.setdefault(pair_mac, []).append(pair_ip)
    return [" ".join([m, *sorted(set(v), key=ip_key)]) for m, v in by_mac.items()]


def port_row(p: Any, fixed: list[tuple[str, str]], pairs: list[tuple[str, str]], subnets: dict[str, Any],
             dhcp: dict[str, str], router_port: bool, trunk: tuple[str, int] | None = None) -> Row:  # fmt: skip
    """A port's Logical_Switch_Port (`router_port`: it is an interface or gateway of a router that exists; `trunk`:
    it is a subport, (its parent, its VLAN): a container port in OVN's words, as Neutron's OVN trunk driver writes
    it, bound wherever its parent is)."""
    ips = [address for _subnet, address in fixed]
    key = f"lsp/{p.id}"
    columns: dict[str, Any] = {
        "name": p.id, "enabled": [bool(p.admin_state_up)], "options": {}, "port_security": [],
        "parent_name": [trunk[0]] if trunk else [], "tag": [trunk[1]] if trunk else [],
        "external_ids": ids(key, port_id=p.id, network_id=p.network_id, project_id=p.project_id, name=p.name,
                             device_owner=p.device_owner, device_id=p.device_id),
    }  # fmt: skip
    own = " ".join([p.mac_address, *ips])
    if router_port:
        options = {"router-port": f"lrp-{p.id}"}
        if p.device_owner == ROUTER_GATEWAY:
            options["nat-addresses"] = "router"
        columns.update(type="router", addresses=["router"], options=options)
    elif p.device_owner == metadata_ports.DEVICE_OWNER:
        columns.update(type="localport", addresses=[own])
    elif p.port_security_enabled:
        columns.update(type="", addresses=[own], port_security=_port_security(p.mac_address, ips, pairs))
    else:
        columns.update(type="", addresses=[own, "unknown"])
    refs: dict[str, list[str]] = {"dhcpv4_options": [], "dhcpv6_options": []}
    if columns["type"] == "":
        if p.host_id and SAFE_NAME.fullmatch(p.host_id) and trunk is None:
            # Only the chassis the port is bound to claims it: its iface-id plugged on another stays unbound.
            columns["options"] = {"requested-chassis": p.host_id}
        for version in (4, 6):
            linked = [dhcp[s] for s, _a in fixed if s in dhcp and subnets[s].ip_version == version]
            refs[f"dhcpv{version}_options"] = linked[:1]
    return Row("Logical_Switch_Port", key, columns, parent=f"ls/{p.network_id}", parent_column="ports", refs=refs)


def subports(conn: Connection) -> dict[str, tuple[str, int]]:
    """Every subport: (its parent port, its VLAN)."""
    S, T = tables_trunks.subports, tables_trunks.trunks
    rows = conn.execute(select(S.c.port_id, T.c.port_id, S.c.segmentation_id).join(T, T.c.id == S.c.trunk_id))
    return {sub: (parent, vid) for sub, parent, vid in rows}


def current_revision(conn: Connection) -> int:
    return int(conn.execute(select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1)).scalar() or 0)


def read(store: Store, gateway_chassis: Sequence[str] = ()) -> Desired:
    with store.read(snapshot=True) as conn:
        return build(conn, gateway_chassis)


def build(conn: Connection, gateway_chassis: Sequence[str] = ()) -> Desired:
    return build_with_basis(conn, gateway_chassis)[0]


def build_with_basis(conn: Connection, gateway_chassis: Sequence[str] = ()) -> tuple[Desired, Basis]:
    N, S, P, A, R = t.networks, t.subnets, t.ports, t.ip_allocations, t.routers
    out = Desired(current_revision(conn))
    basis = Basis()
    networks = conn.execute(select(N).order_by(N.c.id)).all()
    subnets = {s.id: s for s in conn.execute(select(S))}
    ports = conn.execute(select(P).order_by(P.c.network_id, P.c.id)).all()
    fixed: dict[str, list[tuple[str, str]]] = defaultdict(list)  # port -> [(subnet, ip)]
    for port_id, subnet_id, address in conn.execute(select(A.c.port_id, A.c.subnet_id, A.c.ip_address)):
        fixed[port_id].append((subnet_id, address))
    for items in fixed.values():
        items.sort(key=lambda item: ip_key(item[1]))
    pairs: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for port_id, mac, address in conn.execute(PAIRS):
        pairs[port_id].append((mac, address))
    routers = {r.id: r for r in conn.execute(select(R).order_by(R.c.id))}
    trunked = subports(conn)
    chassis = [c for c in gateway_chassis if SAFE_NAME.fullmatch(c)]
    out.refused += [f"gateway chassis {c!r}: not a plain name" for c in gateway_chassis if c not in chassis]
    by_physnet, reporting = desired_routers.uplink_hosts(conn, out)
    host_zones = zones.host_zones(conn)
    physnets = {n.id: n.physical_network for n in networks}

    switches: set[str] = set()
    for n in networks:
        if not SAFE_NAME.fullmatch(n.id):
            out.refused.append(f"network {n.id!r}: its id is not a plain name")
            continue
        switches.add(n.id)
        ls = f"ls/{n.id}"
        out.rows.append(Row("Logical_Switch", ls, {
            "name": PREFIX + n.id, "other_config": {"mtu": str(n.mtu)},
            "external_ids": ids(ls, network_id=n.id, project_id=n.project_id, name=n.name),
        }))  # fmt: skip
        if n.physical_network and n.network_type in ("flat", "vlan"):
            key = f"localnet/{n.id}"
            out.rows.append(Row("Logical_Switch_Port", key, {
                "name": f"provnet-{n.id}", "type": "localnet", "addresses": ["unknown"],
                "options": {"network_name": n.physical_network},
                "tag": [n.segmentation_id] if n.network_type == "vlan" and n.segmentation_id else [],
                "external_ids": ids(key, network_id=n.id),
            }, parent=ls, parent_column="ports"))  # fmt: skip

    metadata_ip = {p.network_id: a for p in ports if p.device_owner == metadata_ports.DEVICE_OWNER
                   for s, a in fixed.get(p.id, []) if subnets[s].ip_version == 4}  # fmt: skip
    dhcp = desired_dhcp.add(out, subnets.values(), {n.id: n.mtu for n in networks if n.id in switches}, metadata_ip)
    groups: dict[str, list[str]] = defaultdict(list)
    PSG = t.port_security_groups
    for port_id, group_id in conn.execute(select(PSG.c.port_id, PSG.c.security_group_id)):
        groups[port_id].append(group_id)
    basis.switches, basis.subnets, basis.dhcp, basis.groups = switches, subnets, dhcp, groups
    filtered: dict[str, list[str]] = {}  # port -> its groups, for every port with port security on
    identities: dict[str, tuple[str, str, list[str]]] = {}  # port -> (network, MAC, fixed IPs)
    router_ports: dict[str, list[Any]] = defaultdict(list)  # router -> its interface ports
    qos = qos_state.for_ports(conn, None)
    for p in ports:
        if p.network_id not in switches:
            basis.special.add(p.id)
            continue
        if not SAFE_NAME.fullmatch(p.id):
            out.refused.append(f"port {p.id!r}: its id is not a plain name")
            basis.special.add(p.id)
            continue
        router_port = p.device_owner in ROUTER_LSP_OWNERS and p.device_id in routers
        trunk = trunked.get(p.id)
        if trunk is not None and not SAFE_NAME.fullmatch(trunk[0]):
            trunk = None  # (a parent refused for its id: the subport stays a plain port)
        lsp = port_row(p, fixed.get(p.id, []), pairs.get(p.id, []), subnets, dhcp, router_port, trunk)
        out.rows.append(lsp)
        if (budget := desired_dhcp.budget(lsp)) is not None:
            out.rows.append(budget)
        out.rows += desired_qos.rows(lsp, qos.get(p.id))
        if router_port and p.device_owner != ROUTER_GATEWAY:
            router_ports[p.device_id].append(p)
        if lsp.columns["type"] == "":
            identities[p.id] = (p.network_id, p.mac_address, [address for _subnet, address in fixed.get(p.id, [])])
            if p.port_security_enabled:
                filtered[p.id] = sorted(groups.get(p.id, []))
        if p.device_owner in ROUTER_LSP_OWNERS or p.device_owner == metadata_ports.DEVICE_OWNER:
            basis.special.add(p.id)  # (routers' rows, DHCP's metadata route and forwards depend on these)
        if trunk is not None:
            basis.special |= {p.id, trunk[0]}  # (a subport's row names its parent: either changing reads in full)

    # Forwards realise the targets a port holds: a port holding one is special, one taking one is read in full.
    basis.targets = forward_targets.targets(conn)
    basis.special |= {p.id for p in ports for _s, a in fixed.get(p.id, []) if (p.network_id, a) in basis.targets}
    by_id = {p.id: p for p in ports}
    basis.special.update(r.gw_port_id for r in routers.values() if r.gw_port_id)
    for r in routers.values():
        if not SAFE_NAME.fullmatch(r.id):
            out.refused.append(f"router {r.id!r}: its id is not a plain name")
            continue
        gateway = by_id.get(r.gw_port_id or "")
        if gateway is not None and gateway.network_id not in switches:
            gateway = None
        physnet = physnets.get(gateway.network_id) if gateway is not None else None
        gateways = desired_routers.gateways(chassis, physnet, by_physnet, reporting)
        gateways = desired_routers.in_zones(gateways, list(r.availability_zone_hints or []), host_zones)
        desired_routers.router(
            conn, out, r, router_ports[r.id], gateway, fixed, subnets, gateways, {n.id: n.mtu for n in networks}
        )
    basis.acls = desired_acls.add(conn, out, filtered, identities)
    basis.special |= basis.acls.unidentified
    lrs = {row.key.removeprefix("lr/") for row in out.rows if row.table == "Logical_Router"}
    links = desired_forwards.add(conn, out, lrs, switches)
    for row in out.rows:
        if row.table in ("Logical_Router", "Logical_Switch"):
            row.refs["load_balancer"] = links.get(row.key, [])
    return out, basis

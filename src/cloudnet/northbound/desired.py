"""What OVN's northbound database must hold, read from cloudnet's database in one snapshot.

Every row cloudnet owns carries `external_ids:cloudnet:key`, unique among them ("ls/<network id>",
"lsp/<port id>", ...), plus the ids of the objects it stands for; the writer (apply.py) diffs NB by that key.
Names OVN uses in logical-flow matches (switch ports, router ports, chassis) are built from ids that must be plain
tokens: an object whose id is not is left out and reported, so nothing a client chose can end up inside a match
expression. User text (names) travels only in external_ids, as data.

- a network: a Logical_Switch (MTU in other_config); a provider (flat/vlan) network also a `localnet` port;
- a port: a Logical_Switch_Port named by its id (an instance's iface-id), addresses "MAC IP..." and port_security
  from its fixed IPs and allowed address pairs; the network's metadata port is its `localport`;
- a router: a Logical_Router with a Logical_Router_Port per interface, a gateway port with Gateway_Chassis, default
  and extra routes, and an SNAT row per attached IPv4 subnet (from the network's chosen SNAT address, else the
  gateway's address) while SNAT is enabled.
"""

from __future__ import annotations

import ipaddress
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from cloudnet.services import metadata_ports, uplinks
from cloudnet.services.port_specs import ROUTER_GATEWAY, ROUTER_INTERFACE
from cloudnet.store import tables as t
from cloudnet.store.db import Store

KEY = "cloudnet:key"
PREFIX = "cloudnet-"
# Ids and chassis names that may become OVN names: what cloudnet generates (UUIDs) and hostnames.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
ROUTER_LSP_OWNERS = (ROUTER_INTERFACE, ROUTER_GATEWAY)


@dataclass(frozen=True)
class Row:
    """One NB row: its table, cloudnet's key for it, the columns cloudnet sets (in the IDL's Python form: optional
    columns as lists) and, for a child row, the key of its parent and the parent's column that holds it."""

    table: str
    key: str
    columns: dict[str, Any]
    parent: str | None = None
    parent_column: str = ""


@dataclass
class Desired:
    revision: int
    rows: list[Row] = field(default_factory=list)  # parents before their children
    refused: list[str] = field(default_factory=list)  # objects left out, with the reason


def _ids(key: str, **ids: str) -> dict[str, str]:
    return {KEY: key, **{f"cloudnet:{k}": v for k, v in ids.items()}}


def _cidr_len(subnets: dict[str, Any], subnet_id: str) -> int:
    return ipaddress.ip_network(subnets[subnet_id].cidr).prefixlen


def _ip_key(address: str) -> tuple[int, int]:
    ip = ipaddress.ip_network(address, strict=False).network_address
    return ip.version, int(ip)


def _port_security(mac: str, ips: list[str], pairs: list[tuple[str, str]]) -> list[str]:
    """One entry per MAC the port may send from: its own with its fixed IPs, and each pair's."""
    by_mac: dict[str, list[str]] = {mac: list(ips)}
    for pair_mac, pair_ip in pairs:
        by_mac.setdefault(pair_mac, []).append(pair_ip)
    return [" ".join([m, *sorted(set(v), key=_ip_key)]) for m, v in by_mac.items()]


def read(store: Store, gateway_chassis: Sequence[str] = ()) -> Desired:
    with store.read(snapshot=True) as conn:
        return build(conn, gateway_chassis)


def build(conn: Connection, gateway_chassis: Sequence[str] = ()) -> Desired:
    N, S, P, A, R = t.networks, t.subnets, t.ports, t.ip_allocations, t.routers
    revision = conn.execute(select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1)).scalar() or 0
    out = Desired(int(revision))
    networks = conn.execute(select(N).order_by(N.c.id)).all()
    subnets = {s.id: s for s in conn.execute(select(S.c.id, S.c.network_id, S.c.cidr, S.c.ip_version, S.c.gateway_ip))}
    ports = conn.execute(select(P).order_by(P.c.network_id, P.c.id)).all()
    fixed: dict[str, list[tuple[str, str]]] = defaultdict(list)  # port -> [(subnet, ip)]
    for port_id, subnet_id, address in conn.execute(select(A.c.port_id, A.c.subnet_id, A.c.ip_address)):
        fixed[port_id].append((subnet_id, address))
    for items in fixed.values():
        items.sort(key=lambda item: _ip_key(item[1]))
    pairs: dict[str, list[tuple[str, str]]] = defaultdict(list)
    AP = t.allowed_address_pairs
    for port_id, mac, address in conn.execute(select(AP.c.port_id, AP.c.mac_address, AP.c.ip_address)):
        pairs[port_id].append((mac, address))
    routers = {r.id: r for r in conn.execute(select(R).order_by(R.c.id))}
    chassis = [c for c in gateway_chassis if SAFE_NAME.fullmatch(c)]
    out.refused += [f"gateway chassis {c!r}: not a plain name" for c in gateway_chassis if c not in chassis]

    switches: set[str] = set()
    for n in networks:
        if not SAFE_NAME.fullmatch(n.id):
            out.refused.append(f"network {n.id!r}: its id is not a plain name")
            continue
        switches.add(n.id)
        ls = f"ls/{n.id}"
        out.rows.append(Row("Logical_Switch", ls, {
            "name": PREFIX + n.id, "other_config": {"mtu": str(n.mtu)},
            "external_ids": _ids(ls, network_id=n.id, project_id=n.project_id, name=n.name),
        }))  # fmt: skip
        if n.physical_network and n.network_type in ("flat", "vlan"):
            key = f"localnet/{n.id}"
            out.rows.append(Row("Logical_Switch_Port", key, {
                "name": f"provnet-{n.id}", "type": "localnet", "addresses": ["unknown"],
                "options": {"network_name": n.physical_network},
                "tag": [n.segmentation_id] if n.network_type == "vlan" and n.segmentation_id else [],
                "external_ids": _ids(key, network_id=n.id),
            }, parent=ls, parent_column="ports"))  # fmt: skip

    router_ports: dict[str, list[Any]] = defaultdict(list)  # router -> its interface ports
    for p in ports:
        if p.network_id not in switches:
            continue
        if not SAFE_NAME.fullmatch(p.id):
            out.refused.append(f"port {p.id!r}: its id is not a plain name")
            continue
        ips = [address for _subnet, address in fixed.get(p.id, [])]
        key = f"lsp/{p.id}"
        columns: dict[str, Any] = {
            "name": p.id, "enabled": [bool(p.admin_state_up)], "options": {}, "port_security": [], "tag": [],
            "external_ids": _ids(key, port_id=p.id, network_id=p.network_id, project_id=p.project_id, name=p.name,
                                 device_owner=p.device_owner, device_id=p.device_id),
        }  # fmt: skip
        own = " ".join([p.mac_address, *ips])
        if p.device_owner in ROUTER_LSP_OWNERS and p.device_id in routers:
            options = {"router-port": f"lrp-{p.id}"}
            if p.device_owner == ROUTER_GATEWAY:
                options["nat-addresses"] = "router"
            else:
                router_ports[p.device_id].append(p)
            columns.update(type="router", addresses=["router"], options=options)
        elif p.device_owner == metadata_ports.DEVICE_OWNER:
            columns.update(type="localport", addresses=[own])
        elif p.port_security_enabled:
            columns.update(type="", addresses=[own], port_security=_port_security(p.mac_address, ips, pairs[p.id]))
        else:
            columns.update(type="", addresses=[own, "unknown"])
        out.rows.append(Row("Logical_Switch_Port", key, columns, parent=f"ls/{p.network_id}", parent_column="ports"))

    by_id = {p.id: p for p in ports}
    for r in routers.values():
        if not SAFE_NAME.fullmatch(r.id):
            out.refused.append(f"router {r.id!r}: its id is not a plain name")
            continue
        gateway = by_id.get(r.gw_port_id or "")
        if gateway is not None and gateway.network_id not in switches:
            gateway = None
        _router(conn, out, r, router_ports[r.id], gateway, fixed, subnets, chassis)
    return out


def _lrp(out: Desired, router_key: str, port: Any, fixed: list[tuple[str, str]], subnets: dict[str, Any]) -> str:
    key = f"lrp/{port.id}"
    out.rows.append(Row("Logical_Router_Port", key, {
        "name": f"lrp-{port.id}", "mac": port.mac_address,
        "networks": [f"{address}/{_cidr_len(subnets, subnet)}" for subnet, address in fixed],
        "external_ids": _ids(key, port_id=port.id, network_id=port.network_id, router_id=port.device_id),
    }, parent=router_key, parent_column="ports"))  # fmt: skip
    return key


def _router(conn: Connection, out: Desired, r: Any, interfaces: list[Any], gateway: Any, fixed: dict[str, Any],
            subnets: dict[str, Any], chassis: list[str]) -> None:  # fmt: skip
    lr = f"lr/{r.id}"
    out.rows.append(Row("Logical_Router", lr, {
        "name": PREFIX + r.id, "enabled": [bool(r.admin_state_up)],
        "external_ids": _ids(lr, router_id=r.id, project_id=r.project_id, name=r.name),
    }))  # fmt: skip
    for port in interfaces:
        _lrp(out, lr, port, fixed.get(port.id, []), subnets)
    routes: list[tuple[str, str]] = [(d["destination"], d["nexthop"]) for d in r.routes or []]
    gateway_ips = fixed.get(gateway.id, []) if gateway is not None else []
    if gateway is not None:
        lrp = _lrp(out, lr, gateway, gateway_ips, subnets)
        for priority, name in enumerate(reversed(chassis), start=1):
            key = f"gwc/{gateway.id}/{name}"
            out.rows.append(Row("Gateway_Chassis", key, {
                "name": f"lrp-{gateway.id}_{name}", "chassis_name": name, "priority": priority,
                "external_ids": _ids(key, port_id=gateway.id, router_id=r.id),
            }, parent=lrp, parent_column="gateway_chassis"))  # fmt: skip
        for subnet_id, _address in gateway_ips:
            subnet = subnets[subnet_id]
            if subnet.gateway_ip:
                routes.insert(0, ("0.0.0.0/0" if subnet.ip_version == 4 else "::/0", subnet.gateway_ip))
    for prefix, nexthop in routes:
        key = f"route/{r.id}/{prefix}/{nexthop}"
        out.rows.append(Row("Logical_Router_Static_Route", key, {
            "ip_prefix": prefix, "nexthop": nexthop, "external_ids": _ids(key, router_id=r.id),
        }, parent=lr, parent_column="static_routes"))  # fmt: skip
    outside = [a for s, a in gateway_ips if subnets[s].ip_version == 4]
    if not (r.enable_snat and outside):
        return
    for port in interfaces:
        uplink = uplinks.router_of(conn, port.network_id)
        chosen = None
        if uplink is not None and uplink[0] == r.id:
            config = conn.execute(select(t.networks.c.config).where(t.networks.c.id == port.network_id)).scalar()
            chosen = (config or {}).get("ipv4.nat.address")
        for subnet_id, _address in fixed.get(port.id, []):
            subnet = subnets[subnet_id]
            if subnet.ip_version != 4:
                continue
            key = f"snat/{r.id}/{subnet.cidr}"
            out.rows.append(Row("NAT", key, {
                "type": "snat", "logical_ip": subnet.cidr, "external_ip": chosen or outside[0],
                "external_ids": _ids(key, router_id=r.id, network_id=port.network_id, subnet_id=subnet_id),
            }, parent=lr, parent_column="nat"))  # fmt: skip

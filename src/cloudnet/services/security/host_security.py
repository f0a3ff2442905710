"""The filtering part of a host's desired state (the contract between the control plane and the dataplane's
firewall): for each port its port security, security groups and allowed address pairs; the groups those ports
are members of, with their rules as the agent applies them; and the addresses of every group those rules name as
remote, gathered from the member ports of all hosts.

Built in a handful of queries whatever the number of ports, inside the snapshot the rest of the state is read
from. The agents re-read it on any event, so what changes it only has to record one (every port, group and rule
change does).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, func, select

from cloudnet.services import common
from cloudnet.services.security import address_pairs
from cloudnet.services.security import security_group_rules as rules
from cloudnet.store import tables as t

SG, R, PSG = t.security_groups, t.security_group_rules, t.port_security_groups
A, AAP = t.ip_allocations, t.allowed_address_pairs
# What the agent's rule shape needs (not the timestamps: SQLite's cost a parse each).
RULE_COLUMNS = [R.c[k] for k in ("id", "security_group_id", "direction", "ethertype", "protocol", "port_range_min",
                                 "port_range_max", "remote_ip_prefix", "remote_group_id")]  # fmt: skip


def agent_port(port: dict[str, Any]) -> dict[str, Any]:
    """Put a port's filtering attributes in the agent's form (in place): groups sorted (none without port
    security), pair addresses in canonical spelling, a CIDR as its network."""
    secured = bool(port["port_security_enabled"])
    port["port_security_enabled"] = secured
    port["security_groups"] = sorted(port["security_groups"]) if secured else []
    port["allowed_address_pairs"] = [
        {"ip_address": address_pairs.canonical(p["ip_address"]), "mac_address": p["mac_address"]}
        for p in port["allowed_address_pairs"]
    ] if secured else []  # fmt: skip
    return port


def groups_of(conn: Connection, ports: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """`security_groups` ({id: {id, stateful, rules}}) of every group of these ports (in agent_port form), and
    `remote_groups` ({id: [CIDR, ...]}) of every group their rules name as remote."""
    ids = sorted({sg for p in ports for sg in p["security_groups"]})
    groups: dict[str, Any] = {}
    for chunk in common.chunks(ids, 5000):
        for sg_id, stateful in conn.execute(select(SG.c.id, SG.c.stateful).where(SG.c.id.in_(chunk))):
            groups[sg_id] = {"id": sg_id, "stateful": bool(stateful), "rules": []}
        stmt = select(*RULE_COLUMNS).where(R.c.security_group_id.in_(chunk)).order_by(R.c.created_at, R.c.id)
        for row in conn.execute(stmt):
            groups[row.security_group_id]["rules"].append(rules.agent_rule(row))
    remote = sorted({r["remote_group_id"] for g in groups.values() for r in g["rules"] if r["remote_group_id"]})
    return groups, members(conn, remote)


def members(conn: Connection, group_ids: list[str]) -> dict[str, list[str]]:
    """The addresses of the member ports of these groups on every host, {group id: [CIDR, ...]}: fixed IPs as
    /32 or /128, allowed address pairs as their networks; sorted, without repeats."""
    # One row per group (the addresses joined by the database): thousands of members cost no more rows.
    agg = func.string_agg if conn.dialect.name == "postgresql" else func.group_concat
    found: dict[str, set[str]] = defaultdict(set)
    for chunk in common.chunks(group_ids, 5000):
        for table, as_cidr in ((A, _host_cidr), (AAP, address_pairs.as_cidr)):
            stmt = (
                select(PSG.c.security_group_id, agg(table.c.ip_address, " "))
                .join(table, table.c.port_id == PSG.c.port_id)
                .where(PSG.c.security_group_id.in_(chunk))
                .group_by(PSG.c.security_group_id)
            )
            for sg_id, joined in conn.execute(stmt).all():
                found[sg_id].update(as_cidr(ip) for ip in set(joined.split(" ")))
    return {sg_id: sorted(found.get(sg_id, ())) for sg_id in group_ids}


def _host_cidr(ip: str) -> str:
    return f"{ip}/128" if ":" in ip else f"{ip}/32"  # (fixed IPs are stored in canonical form)

"""What a host (or OVN) enforces of QoS: each port's effective policy, its own or else its network's (as Neutron
decides it), reduced to the values the dataplanes apply."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, or_, select

from cloudnet.services import common
from cloudnet.services.qos.policies import ENFORCED
from cloudnet.store import tables as t
from cloudnet.store import tables_qos as tq

QR = tq.qos_rules


def effective_policies(conn: Connection, port_ids: Iterable[str] | None) -> dict[str, str]:
    """port id -> the policy it follows (ports with none are left out); `port_ids` None: every port."""
    P, N = t.ports, t.networks
    out: dict[str, str] = {}
    stmt = select(P.c.id, P.c.qos_policy_id, N.c.qos_policy_id).join(N, N.c.id == P.c.network_id)
    stmt = stmt.where(or_(P.c.qos_policy_id.is_not(None), N.c.qos_policy_id.is_not(None)))
    wanted = None if port_ids is None else list(port_ids)
    for chunk in [None] if wanted is None else common.chunks(wanted, 5000):
        for pid, own, of_network in conn.execute(stmt if chunk is None else stmt.where(P.c.id.in_(chunk))):
            if own or of_network:
                out[pid] = own or of_network
    return out


def policy_values(conn: Connection, policy_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """policy id -> {"bandwidth_limit": {direction: {"max_kbps", "max_burst_kbps"}}, "dscp_mark": int | None}
    (policies without an enforced rule are left out)."""
    out: dict[str, dict[str, Any]] = {}
    for chunk in common.chunks(sorted(set(policy_ids)), 5000):
        stmt = select(QR).where(QR.c.qos_policy_id.in_(chunk), QR.c.type.in_(ENFORCED))
        for r in conn.execute(stmt):
            values = out.setdefault(r.qos_policy_id, {"bandwidth_limit": {}, "dscp_mark": None})
            if r.type == "bandwidth_limit":
                values["bandwidth_limit"][r.direction] = {"max_kbps": r.max_kbps, "max_burst_kbps": r.max_burst_kbps}
            else:
                values["dscp_mark"] = r.dscp_mark
    return out


def for_ports(conn: Connection, port_ids: Iterable[str] | None) -> dict[str, dict[str, Any]]:
    """port id -> what its dataplane enforces ({"policy_id", "bandwidth_limit", "dscp_mark"}), for the ports whose
    effective policy has any enforced rule (`port_ids` None: of every port)."""
    if conn.execute(select(QR.c.id).where(QR.c.type.in_(ENFORCED)).limit(1)).first() is None:
        return {}  # (no policy limits or marks anything: the common case costs one read)
    chosen = effective_policies(conn, port_ids)
    values = policy_values(conn, chosen.values())
    return {pid: {"policy_id": pol, **values[pol]} for pid, pol in chosen.items() if pol in values}

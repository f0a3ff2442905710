"""A part of a host's desired state, for the agent's QoS-only pass: every port's QoS and the views of the few ports it
names, from one snapshot (GET /v2.0/hosts/{name}/state?part=qos&port=ID...).

After a QoS policy's change, or a port's update, the agent needs no more than this to tell whether only QoS changed
(the named ports' views equal what it holds but for their policy) and to apply it: a few ms where the whole desired
state costs tens (every instance, network, router, security group of the host)."""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import select

from cloudnet.errors import BadRequest
from cloudnet.services.context import Context
from cloudnet.services.hosts.host_state import host_ports, with_prefixlen
from cloudnet.services.hosts.hosts import admin_only
from cloudnet.services.ports import port_views
from cloudnet.services.qos import qos_state
from cloudnet.services.security.host_security import agent_port
from cloudnet.store import tables as t
from cloudnet.store.db import Store

PARTS = ("qos",)
MAX_PORTS = 100  # ports named at once (more changed at once: the agent fetches the whole state)


def part(store: Store, ctx: Context, host: str, which: str, port_ids: list[str]) -> dict[str, Any]:
    """{"revision", "host", "qos": every port's of the host (as in the whole state), "ports": the views of those of
    `port_ids` that are the host's (as in the whole state; the others are left out)}."""
    admin_only(ctx)
    if which not in PARTS:
        raise BadRequest(f"Invalid input for part. Reason: '{which[:40]}' is not one of {', '.join(PARTS)}.")
    if len(port_ids) > MAX_PORTS:
        raise BadRequest(f"Invalid input for port. Reason: at most {MAX_PORTS} ports.")
    with store.read(snapshot=True) as conn:
        revision = conn.execute(select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1)).scalar() or 0
        _links, plugged, _compute = host_ports(conn, host)
        mine = set(plugged)
        asked = [pid for pid in dict.fromkeys(port_ids) if pid in mine]
        rows = conn.execute(select(t.ports).where(t.ports.c.id.in_(asked))).all() if asked else []
        views = [agent_port(p) for p in port_views.to_dicts(conn, list(rows))]
        subnet_ids = {f["subnet_id"] for p in views for f in p["fixed_ips"]}
        cidrs = conn.execute(select(t.subnets.c.id, t.subnets.c.cidr).where(t.subnets.c.id.in_(subnet_ids))).all()
        qos = qos_state.for_ports(conn, plugged)
    with_prefixlen([p["fixed_ips"] for p in views], {i: ipaddress.ip_network(c).prefixlen for i, c in cidrs})
    return {"revision": int(revision), "host": host, "ports": {p["id"]: p for p in views}, "qos": qos}

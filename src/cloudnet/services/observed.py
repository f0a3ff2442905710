"""What a scrape reads from the database: the state every server shares (hosts and the samples their agents sent,
pool sizes, quota usage). Read at scrape time, so every server of a cloud answers the same values for these (scrape
one of them, or take max() across them, never sum()). The agents' samples were checked and rendered when their
heartbeat was stored (services/agent_samples.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select

from cloudnet.services import agent_samples, hosts, quotas
from cloudnet.services.context import Context
from cloudnet.services.pool_model import FREE_OWNER, M
from cloudnet.store import tables as t
from cloudnet.store.db import Store, utcnow


@dataclass
class Observed:
    hosts: dict[str, bool] = field(default_factory=dict)  # name -> alive
    agent_text: dict[str, list[str]] = field(default_factory=dict)  # family -> every host's lines of it
    pool_ports: dict[tuple[str, str], int] = field(default_factory=dict)  # (host, ready|claimed) -> ports
    quota_used: dict[tuple[str, str], int] = field(default_factory=dict)  # (project, resource) -> in use
    quota_limit: dict[tuple[str, str], int] = field(default_factory=dict)  # (project, resource) -> limit (-1: none)


def observe(store: Store, ctx: Context, down_time: float) -> Observed:
    hosts.admin_only(ctx)
    seen = Observed()
    now = utcnow()
    with store.read(snapshot=True) as conn:
        for row in conn.execute(select(t.hosts.c.name, t.hosts.c.heartbeat_at, t.hosts.c.report)):
            seen.hosts[row.name] = hosts.alive(row, now, down_time)
            for family, text in agent_samples.stored(row.report).items():
                seen.agent_text.setdefault(family, []).append(text)
        ports = t.ports
        ready = (ports.c.device_owner == FREE_OWNER).label("ready")
        rows = conn.execute(
            select(t.port_pools.c.host, ready, func.count())
            .select_from(M.join(t.port_pools, M.c.pool_id == t.port_pools.c.id).join(ports, M.c.port_id == ports.c.id))
            .group_by(t.port_pools.c.host, ready)
        )
        for host, is_ready, count in rows:
            seen.pool_ports[(host, "ready" if is_ready else "claimed")] = int(count)
        for resource, (table, extra) in quotas.USAGE.items():
            for project, count in conn.execute(
                select(table.c.project_id, func.count()).where(*extra).group_by(table.c.project_id)
            ):
                seen.quota_used[(project, resource)] = int(count)
        limits = quotas.defaults(store)
        projects = {p for p, _r in seen.quota_used}
        own = conn.execute(select(t.quotas.c.project_id, t.quotas.c.resource, t.quotas.c.limit)
                           .where(t.quotas.c.limit.is_not(None))).all()  # fmt: skip
        projects |= {p for p, _r, _l in own}
        for project in projects:
            for resource, limit in limits.items():
                seen.quota_limit[(project, resource)] = limit
        for project, resource, limit in own:
            if resource in limits:
                seen.quota_limit[(project, resource)] = int(limit)
    return seen

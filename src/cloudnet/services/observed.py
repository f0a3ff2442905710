"""What a scrape reads from the database: the state every server shares (hosts and the samples their agents sent,
pool sizes, quota usage). Read at scrape time, so every server of a cloud answers the same values for these (scrape
one of them, or take max() across them, never sum()).

An agent's samples come from a host (or anyone holding an admin token): they are checked against the families an
agent may send (cloudnet/metrics.py: AGENT_FAMILIES) and bounded in number, so a hostile report can neither forge a
server family nor blow up the scrape's cardinality.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from cloudnet import metrics
from cloudnet.services import hosts, quotas
from cloudnet.services.context import Context
from cloudnet.services.pool_model import FREE_OWNER, M
from cloudnet.store import tables as t
from cloudnet.store.db import Store, utcnow

MAX_SAMPLES = 500  # per host: its families have few label values (kinds, trees, statuses, commands)
LABEL_VALUE = re.compile(r"^[A-Za-z0-9_.:+-]{0,64}$")
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
Sample = tuple[str, str, dict[str, str], float]  # family, sample name, labels, value


@dataclass
class Observed:
    hosts: dict[str, bool] = field(default_factory=dict)  # name -> alive
    agent_samples: dict[str, list[Sample]] = field(default_factory=dict)  # host -> its agent's samples
    pool_ports: dict[tuple[str, str], int] = field(default_factory=dict)  # (host, ready|claimed) -> ports
    quota_used: dict[tuple[str, str], int] = field(default_factory=dict)  # (project, resource) -> in use
    quota_limit: dict[tuple[str, str], int] = field(default_factory=dict)  # (project, resource) -> limit (-1: none)


def valid_sample(item: Any) -> Sample | None:
    """One sample an agent sent, if it is one an agent may send."""
    if not isinstance(item, list) or len(item) != 4:
        return None
    family, name, labels, value = item
    spec = metrics.AGENT_FAMILIES.get(family) if isinstance(family, str) else None
    if spec is None or not isinstance(name, str) or not isinstance(labels, dict):
        return None
    kind, names = spec
    suffix = name[len(family) :] if name.startswith(family) else None
    if suffix not in SUFFIXES[kind]:
        return None
    wanted = set(names) | ({"le"} if suffix == "_bucket" else set())
    if set(labels) != wanted or not all(isinstance(v, str) and LABEL_VALUE.match(v) for v in labels.values()):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return family, name, labels, float(value)


def agent_samples(report: Any) -> list[Sample]:
    raw = report.get("metrics") if isinstance(report, dict) else None
    if not isinstance(raw, list):
        return []
    return [s for item in raw[:MAX_SAMPLES] if (s := valid_sample(item)) is not None]


def observe(store: Store, ctx: Context, down_time: float) -> Observed:
    hosts.admin_only(ctx)
    seen = Observed()
    now = utcnow()
    with store.read(snapshot=True) as conn:
        for row in conn.execute(select(t.hosts.c.name, t.hosts.c.heartbeat_at, t.hosts.c.report)):
            seen.hosts[row.name] = hosts.alive(row, now, down_time)
            seen.agent_samples[row.name] = agent_samples(row.report)
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

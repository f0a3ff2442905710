"""Per-process caches of the rows that every port create and pool claim reads, and that rarely change.

A port create needs its network, the network's subnets and the project's default security group; a claim needs
the network, its host and, again, the default group. They change a few times a day and are read on every
request, so each server process keeps them in memory. What keeps them correct is the revision log
(store/changes.py): a transaction brings the caches up to date (`tx.sync()`, one read of the revision counter)
before it reads them, and any change of a network, subnet or security group, by this process or another one,
drops what depended on it. A row read while such a change was being made is not kept (a generation number),
so a stale row cannot outlive the change. Only committed rows are cached: one this transaction creates is
found by the next one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from cloudnet.services.networks.ipam import SubnetInfo
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.store.events import Event
from cloudnet.store.tables_rbac import rbac_policies as RB

N, S, SG, H = t.networks, t.subnets, t.security_groups, t.hosts


class Cache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generation = 0  # bumped by every invalidation
        self.networks: dict[str, Any] = {}
        self.subnets: dict[str, tuple[SubnetInfo, ...]] = {}
        self.default_groups: dict[str, str] = {}  # project -> its default security group
        self.hosts: set[str] = set()  # registered hosts
        # (network, project) -> the RBAC actions granted (a policy's change is an update event of its network)
        self.grants: dict[tuple[str, str], frozenset[str]] = {}

    def changed(self, events: Sequence[Event] | None, _tx: Tx | None) -> None:
        """Watcher of the revision log (store/changes.py)."""
        with self.lock:
            if events is None:
                self.generation += 1
                self.networks.clear()
                self.subnets.clear()
                self.default_groups.clear()
                self.hosts.clear()
                self.grants.clear()
                return
            for e in events:
                if e.resource == "network":
                    self.generation += 1
                    self.networks.pop(e.resource_id, None)
                    self.subnets.pop(e.resource_id, None)
                    self.grants = {k: v for k, v in self.grants.items() if k[0] != e.resource_id}
                elif e.resource == "subnet":  # its network is not in the event: drop every network's list
                    self.generation += 1
                    self.subnets.clear()
                elif e.resource == "security_group":
                    self.generation += 1
                    self.default_groups.clear()
                elif e.resource == "host" and e.operation == "delete":  # (DELETE /v2.0/hosts/{name})
                    self.generation += 1
                    self.hosts.discard(e.resource_id)

    def put(self, table: dict[Any, Any], key: Any, value: Any, generation: int) -> None:
        with self.lock:
            if self.generation == generation:
                table[key] = value


def of(store: Store) -> Cache:
    return store.changes.follower(Cache)


def _ready(tx: Tx) -> Cache | None:
    if tx.store is None:
        return None
    tx.sync()
    return of(tx.store)


def network(tx: Tx, network_id: str) -> Any:
    """The network's row (a SQLAlchemy Row), or None."""
    cache = _ready(tx)
    row = cache.networks.get(network_id) if cache else None
    if row is None:
        generation = cache.generation if cache else 0
        row = tx.conn.execute(select(N).where(N.c.id == network_id)).first()
        if cache and row is not None:
            cache.put(cache.networks, network_id, row, generation)
    return row


MAX_GRANTS = 100_000  # (network, project) pairs kept; past it the table starts over


def network_grants(tx: Tx, network_id: str, project_id: str) -> frozenset[str]:
    """The RBAC actions policies grant `project_id` on the network (itself or through "*")."""
    cache = _ready(tx)
    key = (network_id, project_id)
    found = cache.grants.get(key) if cache else None
    if found is None:
        generation = cache.generation if cache else 0
        mine = RB.c.target_project.in_(("*", project_id))
        rows = tx.conn.execute(
            select(RB.c.action).where(RB.c.object_type == "network", RB.c.object_id == network_id, mine)
        )
        found = frozenset(r.action for r in rows)
        if cache:
            if len(cache.grants) >= MAX_GRANTS:
                with cache.lock:
                    cache.grants.clear()
            cache.put(cache.grants, key, found, generation)
    return found


def subnets(tx: Tx, network_id: str) -> tuple[SubnetInfo, ...]:
    """The network's subnets, oldest first."""
    cache = _ready(tx)
    found = cache.subnets.get(network_id) if cache else None
    if found is None:
        generation = cache.generation if cache else 0
        rows = tx.conn.execute(select(S).where(S.c.network_id == network_id).order_by(S.c.created_at, S.c.id)).all()
        found = tuple(SubnetInfo.from_row(r) for r in rows)
        if cache:
            cache.put(cache.subnets, network_id, found, generation)
    return found


def default_group(tx: Tx, project_id: str) -> str | None:
    """The project's default security group if it exists (security_groups.ensure_default creates it)."""
    cache = _ready(tx)
    found = cache.default_groups.get(project_id) if cache else None
    if found is None:
        generation = cache.generation if cache else 0
        found = tx.conn.execute(select(SG.c.id).where(SG.c.default_for_project == project_id)).scalar()
        if cache and found is not None:
            cache.put(cache.default_groups, project_id, str(found), generation)
    return None if found is None else str(found)


def host_known(tx: Tx, host: str) -> bool:
    """Whether an agent has registered the host (and it has not been deleted since)."""
    cache = _ready(tx)
    if cache and host in cache.hosts:
        return True
    generation = cache.generation if cache else 0
    known = tx.conn.execute(select(H.c.name).where(H.c.name == host)).first() is not None
    if cache and known:
        with cache.lock:
            if cache.generation == generation:  # not deleted meanwhile
                cache.hosts.add(host)
    return known

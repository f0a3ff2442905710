"""Port pools, the model (Kuryr-Kubernetes style, ../shared/reference/networking.md §2): ready ports per (host,
project, network), bucketed by their security groups; the pool's keys and sizing, and the per-store state a
server keeps of them (the `Manager`).

Everything durable is in the database: a pool port is an ordinary port with device_owner
`compute:cloudnet-pool` while ready, the tag `cloudnet.pool=<pool id>` and a `pool_ports` row (its
`idle_since`). A claim flips device_owner with `UPDATE ... WHERE id = <port> AND device_owner = <ready>`
and checks that it changed a row (on PostgreSQL it also skips a row another transaction holds, `FOR UPDATE
SKIP LOCKED`), so no port is handed out twice, whatever the number of threads or server processes.

What lives in memory (the `Manager`) is scheduling and hints: which pools have a background refill pending,
when each was last maintained, and for each pool the ready ports this process knows of, by bucket and idle
time, so that a claim picks its port without a query (Kuryr's in-memory pool; the database still decides,
above). Hints follow the revision log (store/changes.py): a port event this process's pool code did not make
itself (another server's claim, a port update through the API) drops the hints it may affect, and the next
claim reloads them in one query. Pool rows (id, bucket, sizing) are cached the same way. A claim that does
not wait reads the revision counter in its own statement instead of before it (one round trip fewer) and
rolls back if the counter shows changes that drop what it read from memory (pool_claims._deferred).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.dialects import postgresql, sqlite

from cloudnet.services import common
from cloudnet.services.networks import networks
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.store.events import Event

PP = t.port_pools
M = t.pool_ports  # membership
P = t.ports
PSG = t.port_security_groups
A = t.ip_allocations
FREE_OWNER = networks.POOL_FREE_OWNER  # "compute:cloudnet-pool"
TAG_PREFIX = "cloudnet.pool="
SIZING = ("min", "max", "batch", "ttl", "update_interval")


@dataclass(frozen=True)
class Defaults:
    """Server-wide sizing of every pool (ServerConfig.pool_*), each overridable per pool."""

    min: int = 5
    max: int = 0
    batch: int = 10
    ttl: int = 0
    update_interval: int = 20


@dataclass(frozen=True)
class Sizing:
    min: int
    max: int
    batch: int
    ttl: int
    update_interval: int

    @classmethod
    def of(cls, row: Any, defaults: Defaults) -> Sizing:
        m = row._mapping
        return cls(**{k: m[k] if m[k] is not None else getattr(defaults, k) for k in SIZING})


# -- in-memory scheduling and hints ----------------------------------------------------------------

Bucket = tuple[str, ...]  # sorted security group ids
# tx.notes key: the ports whose events the pool code itself accounted for in the hints.
HANDLED = "pools.handled"


@dataclass(frozen=True)
class PoolInfo:
    """What a claim needs of a pool row."""

    id: str
    host: str
    project_id: str
    network_id: str
    security_groups: Bucket
    sizing: Sizing


class Ready:
    """The ready ports of one pool as this process knows them: per bucket, (idle_since, port id) in idle order."""

    def __init__(self) -> None:
        self.buckets: dict[Bucket, list[tuple[datetime, str]]] = {}
        self.size = 0

    def add(self, port_id: str, bucket: Bucket, idle: datetime) -> None:
        bisect.insort(self.buckets.setdefault(bucket, []), (idle, port_id))
        self.size += 1

    def pop(self, bucket: Bucket) -> tuple[str, Bucket, datetime] | None:
        """Kuryr's choice: the most recently idle port of the bucket (warm on its host), else the least recently
        idle port of any bucket (its groups are rewritten)."""
        same = self.buckets.get(bucket)
        if same:
            idle, port_id = same.pop()
        else:
            oldest = min(((lst[0], b) for b, lst in self.buckets.items() if lst), default=None)
            if oldest is None:
                return None
            (idle, port_id), bucket = oldest
            self.buckets[bucket].pop(0)
        self.size -= 1
        return port_id, bucket, idle

    def ports(self) -> Iterator[str]:
        for lst in self.buckets.values():
            for _idle, port_id in lst:
                yield port_id


@dataclass
class Manager:
    """Per-store state: defaults, background refills, per-pool locks and maintenance times, and hints."""

    defaults: Defaults = field(default_factory=Defaults)
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(4, "cloudnet-pools"))
    pending: set[str] = field(default_factory=set)
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    maintained: dict[str, float] = field(default_factory=dict)
    failed: dict[str, float] = field(default_factory=dict)
    guard: threading.Lock = field(default_factory=threading.Lock)
    # Hints (see the module doc), under hint_lock; `generation` guards fills against concurrent invalidations.
    hint_lock: threading.Lock = field(default_factory=threading.Lock)
    generation: int = 0
    pools: dict[tuple[str, str, str], PoolInfo] = field(default_factory=dict)
    ready: dict[str, Ready] = field(default_factory=dict)  # pool id -> its ready ports
    where: dict[str, str] = field(default_factory=dict)  # port id -> pool id, for the ports in `ready`
    taking: set[str] = field(default_factory=set)  # ports popped by claims whose transaction is still open
    # ServerConfig.instance_pools: instance creates make the pool of (host, project, network) on first demand.
    instance_pools: bool = False

    def lock(self, pool_id: str) -> threading.Lock:
        with self.guard:
            return self.locks.setdefault(pool_id, threading.Lock())

    # -- hints --

    def forget(self, pool_id: str | None = None) -> None:
        """Drop the hints of one pool, or all hints and pool rows."""
        with self.hint_lock:
            self.generation += 1
            if pool_id is None:
                self.pools.clear()
                self.ready.clear()
                self.where.clear()
                return
            ready = self.ready.pop(pool_id, None)
            if ready is not None:
                for port_id in ready.ports():
                    self.where.pop(port_id, None)

    def changed(self, events: Sequence[Event] | None, tx: Tx | None) -> None:
        """Watcher of the revision log (store/changes.py)."""
        if events is None:
            self.forget()
            return
        handled = tx.notes.get(HANDLED, ()) if tx is not None else ()
        for e in events:
            if e.resource in ("network", "security_group"):  # pools deleted, buckets rewritten
                self.forget()
                return
            if e.resource != "port" or e.resource_id in handled:
                continue
            if tx is None:  # another process changed a port: maybe claimed, released or refilled one of ours
                self.forget()
                return
            pool_id = self.where.get(e.resource_id)
            if pool_id is not None:  # one of our ready ports was changed outside the pool code
                self.forget(pool_id)

    def taken(self, port_id: str, back: tuple[str, Bucket, datetime] | None = None) -> None:
        """The claim that popped the port ended; `back`: it rolled back, the port is ready again."""
        with self.hint_lock:
            self.taking.discard(port_id)
        if back is not None:
            self.add_ready(back[0], [(port_id, back[1], back[2])])

    def add_ready(self, pool_id: str, items: list[tuple[str, Bucket, datetime]]) -> None:
        """Ports that became ready in a committed transaction of this process (refill, release)."""
        with self.hint_lock:
            ready = self.ready.get(pool_id)
            if ready is None:
                return  # not loaded: the next claim reads them all from the database
            for port_id, bucket, idle in items:
                if port_id not in self.where:
                    ready.add(port_id, bucket, idle)
                    self.where[port_id] = pool_id


def manager(store: Store) -> Manager:
    return store.changes.follower(Manager)


def configure(store: Store, defaults: Defaults, *, instance_pools: bool = False) -> None:
    mgr = manager(store)
    mgr.defaults = defaults
    mgr.instance_pools = instance_pools
    mgr.forget()  # cached sizing used the old defaults


def for_instances(store: Store | None) -> bool:
    """Whether instance creates make pools on first demand (else they only use pools that exist)."""
    return store is not None and manager(store).instance_pools


# -- helpers ----------------------------------------------------------------------------------------


def precise_now() -> datetime:
    """idle_since needs sub-second order (recycled ports are handed out most recent first)."""
    return datetime.now(UTC).replace(tzinfo=None)


def naive(value: datetime) -> datetime:
    """idle_since as stored by either database, comparable with `precise_now()`."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value


def count_ready(conn: Connection, pool_id: str) -> int:
    return int(conn.execute(select(func.count()).select_from(M.join(P, P.c.id == M.c.port_id)).where(
        M.c.pool_id == pool_id, P.c.device_owner == FREE_OWNER)).scalar_one())  # fmt: skip


def pool_key(host: str, project_id: str, network_id: str) -> Any:
    return (PP.c.host == host, PP.c.project_id == project_id, PP.c.network_id == network_id)


def pool_info(row: Any, defaults: Defaults) -> PoolInfo:
    return PoolInfo(row.id, row.host, row.project_id, row.network_id, tuple(row.security_groups or ()),
                    Sizing.of(row, defaults))  # fmt: skip


def find_pool(tx: Tx, mgr: Manager, host: str, project_id: str, network_id: str) -> PoolInfo | None:
    """The pool of (host, project, network) if it exists, from the cache when it can."""
    key = (host, project_id, network_id)
    tx.sync()
    info = mgr.pools.get(key)
    if info is None:
        generation = mgr.generation
        row = tx.conn.execute(select(PP).where(*pool_key(host, project_id, network_id))).first()
        if row is None:
            return None
        info = pool_info(row, mgr.defaults)
        with mgr.hint_lock:
            if mgr.generation == generation:
                mgr.pools[key] = info
    return info


def ensure_pool(tx: Tx, host: str, project_id: str, network_id: str, sgs: tuple[str, ...]) -> Any:
    """The pool of (host, project, network), created on first demand (concurrent creators agree)."""
    key = pool_key(host, project_id, network_id)
    row = tx.conn.execute(select(PP).where(*key)).first()
    if row is not None:
        return row
    module = postgresql if tx.conn.dialect.name == "postgresql" else sqlite
    values = {"id": common.new_id(), "host": host, "project_id": project_id, "network_id": network_id,
              "security_groups": list(sgs), "created_at": tx.now, "updated_at": tx.now,
              "revision_number": 0}  # fmt: skip
    tx.conn.execute(module.insert(PP).values(**values).on_conflict_do_nothing())
    return tx.conn.execute(select(PP).where(*key)).one()

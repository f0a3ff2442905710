"""An instance's metadata view, loaded from the store once and then served from memory.

A cloud-init boot asks ~30 questions about one instance within a second, and a boot storm asks them for
hundreds: a database round trip per request would be the bottleneck. So each instance's view is loaded once
(a handful of queries in one snapshot) and kept until something it depends on changes:

- commits in this process call `Store.on_commit`, which only records the new revision (cheap, any thread);
- a poll of the revision counter once a second notices commits made by other `cloudnet serve` processes;
- the next request that sees a newer revision reads the events since the last one it handled (one query)
  and drops exactly the views that depend on a changed instance, port, subnet, network or security group;
- a maximum age (nova's 15 s `metadata_cache_expiration`) bounds anything the events cannot express.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, select

from cloudnet.metadata.answers import Answer
from cloudnet.metadata.model import OPTIONAL, InstanceView, Port, Subnet
from cloudnet.services.ports import compute_ports
from cloudnet.services.ports import metadata_ports as metadata_ports_service
from cloudnet.store import tables as t
from cloudnet.store.db import Store
from cloudnet.wire import zones

log = logging.getLogger(__name__)

I, IP, P, A, S, N = t.instances, t.instance_ports, t.ports, t.ip_allocations, t.subnets, t.networks  # noqa: E741
SG, PSG, F, H = t.security_groups, t.port_security_groups, t.forwards, t.hosts
# Resources whose changes can alter a view; events about anything else (hosts, routers, tags) are ignored.
_DEPENDENT = ("port", "subnet", "network", "security_group")
# Forward events name the forward, not an instance: rare enough that dropping every view is the simple answer.
_DROP_ALL = ("forward",)
_EVENT_BATCH = 10_000
MAX_REPLIES = 128  # rendered answers kept per instance (a guest cannot grow the cache without bound)


@dataclass
class Entry:
    view: InstanceView
    loaded_at: float
    depends_on: frozenset[str]
    replies: dict[str, Answer] = field(default_factory=dict)  # path -> its rendered answer


def load_view(conn: Connection, instance_id: str) -> tuple[InstanceView, frozenset[str]] | None:
    """The instance's view and the ids of everything it was built from; None if there is no such instance."""
    row: Any = conn.execute(select(I).where(I.c.id == instance_id)).first()
    if row is not None:
        port_ids = [r[0] for r in conn.execute(
            select(IP.c.port_id).where(IP.c.instance_id == instance_id).order_by(IP.c.position))]  # fmt: skip
    else:  # a VM a compute service plugged with plain ports (Nova's way): its device id is the instance
        found = compute_ports.device(conn, instance_id)
        if found is None:
            return None
        project_id, port_ids = found
        row = SimpleNamespace(id=instance_id, name=instance_id, hostname=instance_id, project_id=project_id,
                              user_data=None, meta={}, ssh_keys=(), password=None, host="",
                              metadata_tokens=OPTIONAL)  # fmt: skip
    port_rows = {
        r.id: r
        for r in conn.execute(
            select(P.c.id, P.c.network_id, P.c.mac_address, P.c.vnic_type, P.c.host_id).where(P.c.id.in_(port_ids))
        )
    }
    # The host it runs on: the instance's, else (a compute-plugged VM) its first port's binding.
    host = row.host or next((port_rows[p].host_id for p in port_ids if p in port_rows), "")
    zone = conn.execute(select(H.c.availability_zone).where(H.c.name == host)).scalar() if host else None
    zone = None if zone == zones.DEFAULT else zone  # (a host that reports none: the service's setting)
    ips: dict[str, list[tuple[str, str]]] = {pid: [] for pid in port_ids}
    for pid, address, subnet_id in conn.execute(
        select(A.c.port_id, A.c.ip_address, A.c.subnet_id).where(A.c.port_id.in_(port_ids))
    ):
        ips[pid].append((address, subnet_id))
    network_ids = {r.network_id for r in port_rows.values()}
    mtus = dict(conn.execute(select(N.c.id, N.c.mtu).where(N.c.id.in_(network_ids))).all())
    subnet_ids = {s for pairs in ips.values() for _a, s in pairs}
    hops: dict[str, str] = {}
    metadata_ports: set[str] = set()
    for pid, address, subnet_id in conn.execute(
        select(A.c.port_id, A.c.ip_address, A.c.subnet_id)
        .join(P, P.c.id == A.c.port_id)
        .where(P.c.network_id.in_(network_ids), P.c.device_owner == metadata_ports_service.DEVICE_OWNER)
    ):
        metadata_ports.add(pid)
        if ":" not in address:
            hops[subnet_id] = address
    subnets = {
        s.id: Subnet(
            id=s.id, network_id=s.network_id, cidr=s.cidr, ip_version=s.ip_version, gateway_ip=s.gateway_ip,
            dns_nameservers=tuple(s.dns_nameservers or ()),
            host_routes=tuple((r["destination"], r["nexthop"]) for r in s.host_routes or ()),
            metadata_hop=hops.get(s.id),
        )
        for s in conn.execute(select(S).where(S.c.id.in_(subnet_ids)))
    }  # fmt: skip
    groups = conn.execute(
        select(SG.c.id, SG.c.name).join(PSG, PSG.c.security_group_id == SG.c.id).where(PSG.c.port_id.in_(port_ids))
    ).all()
    ports = tuple(
        Port(
            id=pid, network_id=port_rows[pid].network_id, mac_address=port_rows[pid].mac_address,
            mtu=int(mtus.get(port_rows[pid].network_id, 1500)), vnic_type=port_rows[pid].vnic_type,
            # IPv4 first, as the port API lists them: EC2's local-ipv4 is the first IPv4 of eth0.
            fixed_ips=tuple(sorted(ips[pid], key=lambda a: (":" in a[0], a[0]))),
        )
        for pid in port_ids
        if pid in port_rows
    )  # fmt: skip
    addresses = {a for p in ports for a, _s in p.fixed_ips}
    view = InstanceView(
        id=row.id, name=row.name, hostname=row.hostname or row.name, project_id=row.project_id,
        user_data=None if row.user_data is None else row.user_data.encode(),
        meta={str(k): str(v) for k, v in (row.meta or {}).items()},
        ssh_keys=tuple((k["name"], k["key"]) for k in row.ssh_keys or ()),
        ports=ports, subnets=subnets, security_groups=tuple(sorted({name for _id, name in groups})),
        public_ipv4=_public_ipv4(conn, network_ids, addresses), password=row.password,
        metadata_tokens=row.metadata_tokens or OPTIONAL, availability_zone=zone,
    )  # fmt: skip
    depends_on = frozenset(
        {instance_id, *port_ids, *network_ids, *subnet_ids, *metadata_ports, *(g for g, _n in groups)}
    )
    return view, depends_on


def _public_ipv4(conn: Connection, network_ids: set[str], addresses: set[str]) -> str | None:
    """EC2 public-ipv4: the IPv4 listen address of a forward whose default target is one of the instance's
    addresses (forwards live on the instance's network, LXD-style). The lowest one wins, so it is stable."""
    if not network_ids or not addresses:
        return None
    found = []
    for listen, config in conn.execute(select(F.c.listen_address, F.c.config).where(F.c.network_id.in_(network_ids))):
        target = (config or {}).get("target_address") if isinstance(config, dict) else None
        if target in addresses and ":" not in listen:
            found.append(listen)
    return min(found, default=None)


class ViewCache:
    def __init__(
        self,
        store: Store,
        max_age: float = 15.0,
        poll_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.max_age = max_age
        self.poll_interval = poll_interval
        self._clock = clock
        self._views: dict[str, Entry] = {}
        self._dependents: dict[str, set[str]] = {}  # resource id -> ids of the instances whose view used it
        self._loading: dict[str, asyncio.Task[Entry | None]] = {}
        self._seen = store.current_revision()  # events up to here are reflected in what is cached
        self._latest = self._seen  # newest revision known to be committed
        self._epoch = 0  # bumped by each invalidation: a load that overlapped one is not cached
        self._invalidating: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        store.on_commit(self.committed)

    # -- change tracking --------------------------------------------------------------------------

    def committed(self, revision: int) -> None:
        """Store commit listener; runs on the committing thread, so it only records the number."""
        if revision > self._latest:
            self._latest = revision

    def start(self) -> None:
        """Follow commits of other processes (call on the serving loop)."""
        if self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            if not self._views:
                continue  # nothing cached, nothing to keep fresh
            try:
                self.committed(await asyncio.to_thread(self.store.current_revision))
            except Exception as exc:  # the database may be restarting: views simply age out meanwhile
                log.warning("metadata cache: cannot read the revision: %s", exc)

    async def _catch_up(self) -> None:
        if self._invalidating is None:
            self._invalidating = asyncio.get_running_loop().create_task(self._invalidate())
        task = self._invalidating
        try:
            await asyncio.shield(task)
        finally:
            if self._invalidating is task and task.done():
                self._invalidating = None

    async def _invalidate(self) -> None:
        since, latest = self._seen, self._latest
        rows = await asyncio.to_thread(self._events, since)
        self._epoch += 1
        if len(rows) >= _EVENT_BATCH or any(r in _DROP_ALL for r, _i in rows):
            self.clear()
        else:
            for resource, resource_id in rows:
                if resource == "instance":
                    self.drop(resource_id)
                elif resource in _DEPENDENT:
                    for instance_id in list(self._dependents.get(resource_id, ())):
                        self.drop(instance_id)
        self._seen = max(self._seen, latest)

    def _events(self, since: int) -> list[tuple[str, str]]:
        with self.store.read() as conn:
            rows = conn.execute(
                select(t.events.c.resource, t.events.c.resource_id)
                .where(t.events.c.revision > since)
                .order_by(t.events.c.revision)
                .limit(_EVENT_BATCH)
            ).all()
        return [(r, i) for r, i in rows]

    def drop(self, instance_id: str) -> None:
        entry = self._views.pop(instance_id, None)
        if entry is None:
            return
        for dep in entry.depends_on:
            users = self._dependents.get(dep)
            if users is not None:
                users.discard(instance_id)
                if not users:
                    del self._dependents[dep]

    def clear(self) -> None:
        self._views.clear()
        self._dependents.clear()

    # -- lookups ----------------------------------------------------------------------------------

    def fresh(self, instance_id: str) -> Entry | None:
        """The cached entry when it can be used as it is (the common case, answered without a coroutine)."""
        if self._latest > self._seen:
            return None
        entry = self._views.get(instance_id)
        if entry is not None and self._clock() - entry.loaded_at < self.max_age:
            return entry
        return None

    async def get(self, instance_id: str) -> Entry | None:
        """The instance's cached entry (loaded if needed), or None if the instance does not exist."""
        if self._latest > self._seen:
            await self._catch_up()
        entry = self._views.get(instance_id)
        if entry is not None and self._clock() - entry.loaded_at < self.max_age:
            return entry
        loading = self._loading.get(instance_id)
        if loading is None:
            # One load per instance however many of its requests arrive meanwhile, in a task of its own so
            # that a requester going away (and being cancelled) does not take the load down for the others.
            loading = asyncio.get_running_loop().create_task(self._load(instance_id))
            self._loading[instance_id] = loading
            loading.add_done_callback(lambda t: self._loaded(instance_id, t))
        return await asyncio.shield(loading)

    def _loaded(self, instance_id: str, task: asyncio.Task[Entry | None]) -> None:
        self._loading.pop(instance_id, None)
        if not task.cancelled():
            task.exception()  # retrieved: a failure nobody waited for is not "never retrieved"

    async def _load(self, instance_id: str) -> Entry | None:
        epoch = self._epoch
        loaded = await asyncio.to_thread(self._read, instance_id)
        self.drop(instance_id)
        if loaded is None:
            return None  # not cached: an instance created a moment later must be found
        view, depends_on = loaded
        entry = Entry(view, self._clock(), depends_on)
        if epoch == self._epoch:  # no invalidation ran while we read, so nothing we read can be stale
            self._views[instance_id] = entry
            for dep in depends_on:
                self._dependents.setdefault(dep, set()).add(instance_id)
        return entry

    def _read(self, instance_id: str) -> tuple[InstanceView, frozenset[str]] | None:
        with self.store.read(snapshot=True) as conn:
            return load_view(conn, instance_id)

    def cached(self) -> dict[str, Any]:
        """What is cached (for tests and debugging)."""
        return {iid: e.view for iid, e in self._views.items()}

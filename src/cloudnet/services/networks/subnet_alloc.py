"""A subnet's CIDR from a subnet pool, as Neutron's create_subnet and SubnetAllocator decide it: the pool named
(`subnetpool_id`) or the default pool of the IP version (`use_default_subnetpool`); a /prefixlen (the pool's default
when none) placed in the smallest free block that holds it, or the CIDR asked for if it is free; bounded by the pool's
prefix lengths and its per-project quota. The pool's row is locked for the transaction (after the network's, as
every writer that takes both takes them), so allocations from one pool take turns; the allocations table's unique
(pool, first address) stops any two that did not. On PostgreSQL a subnet from a pool costs no round trip more than
a plain one but the pool's read: the pool is read and locked in one statement, and the subnet, its allocation and
the pool's new hash are written in one."""

from __future__ import annotations

import functools
import ipaddress
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, update

from cloudnet.errors import BadRequest, Conflict
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.networks import prefix_sets as ps
from cloudnet.services.networks import subnet_specs, subnetpools
from cloudnet.services.networks.subnet_specs import Net, SubnetCreate
from cloudnet.store import tables as t
from cloudnet.store import tables_subnetpools as tsp

SP, ALLOC = tsp.subnetpools, tsp.subnetpool_allocations


@dataclass(frozen=True)
class Allocation:
    pool_id: str
    cidr: Net
    scope_id: str | None  # the pool's address scope
    hash: str  # the pool's new hash, written with the allocation


def _bad(msg: str) -> BadRequest:
    return BadRequest(f"Bad subnets request: {msg}.", type="BadRequest")


def _failed(reason: str) -> Conflict:
    # Neutron answers SubnetAllocationError (not in its fault map) with a 500; a 5xx here is a bug, so a 409.
    return Conflict(f"Failed to allocate subnet: {reason}.", type="SubnetAllocationError")


def _pool_of(conn: Connection, ctx: Context, spec: SubnetCreate) -> Any:
    """The pool the subnet comes from, or None (a plain CIDR)."""
    if spec.cidr is not None and spec.prefixlen is not None:
        raise _bad("cidr and prefixlen must not be supplied together")
    if spec.subnetpool_id is not None:
        return subnetpools.get_visible(conn, ctx, spec.subnetpool_id, lock=True)
    if spec.cidr is not None:
        version: int | None = _parse(spec.cidr).version
    else:
        version = spec.ip_version
        if version is None:
            raise _bad("ip_version must be specified in the absence of cidr and subnetpool_id")
    if spec.use_default_subnetpool:
        stmt = subnetpools.visible_stmt(ctx).where(SP.c.default_for_version == version)
        row = conn.execute(stmt.with_for_update(of=SP)).first()
        if row is None:
            raise _bad(f"No default subnetpool found for IPv{version}")
        return row
    if spec.cidr is None:
        raise _bad("A cidr must be specified in the absence of a subnet pool")
    return None


def _parse(text: str) -> Net:
    try:
        return subnet_specs.network(text)
    except ValueError as exc:
        raise BadRequest(f"Invalid input for cidr. Reason: {exc}.") from None


def allocate(conn: Connection, ctx: Context, spec: SubnetCreate, project_id: str) -> Allocation | None:
    """The pool and CIDR for a new subnet (None: no pool, the request's CIDR as it is). The pool's row is locked
    (read once locked: its hash is current) until commit."""
    pool = _pool_of(conn, ctx, spec)
    if pool is None:
        return None
    if spec.ip_version is not None and spec.ip_version != pool.ip_version:
        raise _bad(f"Cannot allocate IPv{spec.ip_version} subnet from IPv{pool.ip_version} subnet pool")
    bits = ps.BITS[pool.ip_version]
    if spec.cidr is not None:
        wanted: Net | None = _parse(spec.cidr)
        assert wanted is not None
        if wanted.version != pool.ip_version:
            raise _bad(f"Cannot allocate IPv{wanted.version} subnet from IPv{pool.ip_version} subnet pool")
        prefixlen = wanted.prefixlen
    else:
        if spec.allocation_pools is not None:
            raise _bad("allocation_pools allowed only for specific subnet requests.")
        wanted, prefixlen = None, pool.default_prefixlen if spec.prefixlen is None else spec.prefixlen
    if prefixlen > pool.max_prefixlen:
        raise BadRequest(f"Unable to allocate subnet with prefix length {prefixlen}, maximum allowed prefix is "
                         f"{pool.max_prefixlen}.", type="MaxPrefixSubnetAllocationError")  # fmt: skip
    if prefixlen < pool.min_prefixlen:
        raise BadRequest(f"Unable to allocate subnet with prefix length {prefixlen}, minimum allowed prefix is "
                         f"{pool.min_prefixlen}.", type="MinPrefixSubnetAllocationError")  # fmt: skip
    _check_quota(conn, pool, project_id, prefixlen)
    free = _free_space(conn, pool.id, pool.prefixes, pool.hash)
    if wanted is not None:
        if not ps.contains(free, (int(wanted.network_address), int(wanted.broadcast_address))):
            raise _failed("Cannot allocate requested subnet from the available set of prefixes")
        cidr: Net = wanted
    else:
        first = ps.best_fit(free, prefixlen, bits)
        if first is None:
            raise _failed(f"Insufficient prefix space to allocate subnet size /{prefixlen}")
        cidr = ipaddress.ip_network((first, prefixlen))
    # The pool's new hash (written by `insert_subnet`), and its free space under it: the next allocation here
    # reads no allocation rows. (A hash is random: one this transaction made and then rolled back is never the
    # pool's; a bulk create's next subnet finds this one's.)
    token = common.new_id()
    _remember(pool.id, token, ps.minus(free, [(int(cidr.network_address), int(cidr.broadcast_address))]))
    return Allocation(pool.id, cidr, pool.address_scope_id, token)


_FREE: OrderedDict[str, tuple[str, list[ps.Range]]] = OrderedDict()  # pool id -> (its hash, its free space)
_FREE_LOCK = threading.Lock()
MAX_CACHED_POOLS = 256


def _free_space(conn: Connection, pool_id: str, prefixes: list[str], token: str) -> list[ps.Range]:
    with _FREE_LOCK:
        cached = _FREE.get(pool_id)
    if cached is not None and cached[0] == token:
        return cached[1]
    return ps.minus(subnetpools.ranges_of(prefixes), subnetpools.used(conn, pool_id))


def _remember(pool_id: str, token: str, free: list[ps.Range]) -> None:
    with _FREE_LOCK:
        _FREE[pool_id] = (token, free)
        _FREE.move_to_end(pool_id)
        while len(_FREE) > MAX_CACHED_POOLS:
            _FREE.popitem(last=False)


def give_back(conn: Connection, pool_id: str, cidr: str) -> None:
    """A subnet's prefix back to its pool (the subnet is being deleted, under the network's lock): the pool's new
    hash, and when this process's cached free space was the pool's current one, the prefix added to it under the
    new hash (in the same statement, which takes the pool's row lock), so that the next allocation reads no
    allocation rows either."""
    token = common.new_id()
    with _FREE_LOCK:
        cached = _FREE.get(pool_id)
    if cached is not None:
        stmt = update(SP).where(SP.c.id == pool_id, SP.c.hash == cached[0]).values(hash=token)
        if conn.execute(stmt).rowcount:
            _remember(pool_id, token, ps.merged([*cached[1], ps.cidr_range(cidr)[1]]))
            return
    subnetpools.bump(conn, pool_id)


def _check_quota(conn: Connection, pool: Any, project_id: str, prefixlen: int) -> None:
    """default_quota: addresses (IPv4) or /64s (IPv6) one project may hold in the pool, as Neutron counts them.
    (Neutron counts the pool owner's subnets whoever asks; the project the subnet is for is counted here, as its
    API reference describes the quota: per project.)"""
    if not pool.default_quota:
        return
    bits, unit = ps.BITS[pool.ip_version], subnetpools.QUOTA_UNIT[pool.ip_version]
    stmt = select(ALLOC.c.first, ALLOC.c.last).where(ALLOC.c.subnetpool_id == pool.id,
                                                     ALLOC.c.project_id == project_id)  # fmt: skip
    held = sum(int(b, 16) - int(a, 16) + 1 for a, b in conn.execute(stmt))
    if (held + (1 << (bits - prefixlen))) / (1 << (bits - unit)) > pool.default_quota:
        raise Conflict("Per-tenant subnet pool prefix quota exceeded.", type="SubnetPoolQuotaExceeded")


def check_affinity(others: list[Any], version: int, scope_id: str | None) -> None:
    """Neutron: the subnets of one IP version on a network are all in one address scope (or all in none).
    `others`: the network's subnets, with their IP version and address scope."""
    if any(o.address_scope_id != scope_id for o in others if o.ip_version == version):
        raise subnetpools.affinity_error()


def insert_subnet(conn: Connection, row: dict[str, Any], allocation: Allocation | None) -> None:
    """The subnet's row, and with a pool its allocation and the pool's new hash: one statement on PostgreSQL
    (data-modifying CTEs: the allocation's foreign key is checked at the statement's end, after the subnet's)."""
    if allocation is None:
        conn.execute(insert(t.subnets), row)
        return
    net = allocation.cidr
    values = {f"s_{k}": v for k, v in row.items()}
    values.update(pool=allocation.pool_id, new_hash=allocation.hash, p_first=ps.hexed(int(net.network_address)),
                  p_last=ps.hexed(int(net.broadcast_address)))  # fmt: skip
    if conn.dialect.name == "postgresql":
        conn.execute(_insert_all(tuple(row)), values)
        return
    for stmt in _insert_each(tuple(row)):  # (SQLite: no data-modifying CTEs)
        conn.execute(stmt, values)


@functools.cache
def _insert_each(columns: tuple[str, ...]) -> tuple[Any, Any, Any]:
    """The subnet's insert, the pool's new hash and the allocation's insert, with bound parameters (`s_` and the
    subnet's column: its values), built once (building them costs more than running them)."""
    S = t.subnets
    subnet = insert(S).values({c: bindparam(f"s_{c}", type_=S.c[c].type) for c in columns})
    bump = update(SP).where(SP.c.id == bindparam("pool", type_=SP.c.id.type)).values(
        hash=bindparam("new_hash", type_=SP.c.hash.type))  # fmt: skip
    taken = insert(ALLOC).values(
        subnet_id=bindparam("s_id", type_=ALLOC.c.subnet_id.type), subnetpool_id=bindparam("pool", type_=SP.c.id.type),
        project_id=bindparam("s_project_id", type_=ALLOC.c.project_id.type),
        first=bindparam("p_first", type_=ALLOC.c.first.type), last=bindparam("p_last", type_=ALLOC.c.last.type),
    )  # fmt: skip
    return subnet, bump, taken


@functools.cache
def _insert_all(columns: tuple[str, ...]) -> Any:
    subnet, bump, taken = _insert_each(columns)
    return taken.add_cte(subnet.cte("new_subnet")).add_cte(bump.cte("bumped"))

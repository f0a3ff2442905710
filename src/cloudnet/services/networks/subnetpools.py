"""Subnet pools (Neutron's subnet_allocation, default-subnetpools, subnetpool-prefix-ops): prefixes subnets take
their CIDRs from, with prefix length bounds, a per-project quota in addresses, and an address scope in which no
two pools overlap. Allocation itself: subnet_alloc.py."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from sqlalchemy import Connection, delete, insert, select, update

from cloudnet.errors import BadRequest, Conflict, InvalidInput, disallowed, not_found
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.networks import address_scopes, subnet_specs
from cloudnet.services.networks import prefix_sets as ps
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_bool, to_int
from cloudnet.services.rbac import grants
from cloudnet.services.validation import Body, Tags, is_uuid, parse
from cloudnet.store import tables as t
from cloudnet.store import tables_subnetpools as tsp
from cloudnet.store.db import Store, Tx

SP, ALLOC = tsp.subnetpools, tsp.subnetpool_allocations
RBAC = "subnetpool"  # its RBAC object type (rbac/object_types.py, rbac-subnetpool)
MAX_PREFIXES = 1000  # per pool and per request (Neutron has no bound)
Prefixes = Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=MAX_PREFIXES)]
PrefixLen = Annotated[int, Field(ge=0, le=128)]
DEFAULT_MIN = {4: 8, 6: 64}  # Neutron's SubnetPoolHelper defaults
QUOTA_UNIT = {4: 32, 6: 64}  # a pool's default_quota counts IPv4 addresses, IPv6 /64s

ATTRS: dict[str, Attr] = {
    **common.standard_attrs(SP),
    "ip_version": Attr(SP.c.ip_version, to_int),
    "min_prefixlen": Attr(SP.c.min_prefixlen, to_int),
    "max_prefixlen": Attr(SP.c.max_prefixlen, to_int),
    "default_prefixlen": Attr(SP.c.default_prefixlen, to_int),
    "default_quota": Attr(SP.c.default_quota, to_int),
    "address_scope_id": Attr(SP.c.address_scope_id),
    "shared": Attr(SP.c.shared, to_bool),
    "is_default": Attr(SP.c.is_default, to_bool),
}


class PoolCreate(Body):
    name: str = Field("", max_length=255)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    prefixes: Prefixes
    min_prefixlen: PrefixLen | None = None
    max_prefixlen: PrefixLen | None = None
    default_prefixlen: PrefixLen | None = None
    default_quota: Annotated[int, Field(ge=0, lt=2**31)] | None = None
    address_scope_id: str | None = Field(None, max_length=36)
    shared: bool = False
    is_default: bool = False
    tags: Tags


class PoolUpdate(Body):
    name: str | None = Field(None, max_length=255)
    description: str | None = Field(None, max_length=255)
    prefixes: Prefixes | None = None
    min_prefixlen: PrefixLen | None = None
    max_prefixlen: PrefixLen | None = None
    default_prefixlen: PrefixLen | None = None
    default_quota: Annotated[int, Field(ge=0, lt=2**31)] | None = None
    address_scope_id: str | None = Field(None, max_length=36)
    is_default: bool | None = None


class PrefixOps(Body):
    prefixes: Prefixes


def to_dicts(conn: Connection, rows: list[Any], ctx: Context) -> list[dict[str, Any]]:
    tags = common.load_tags(conn, [r.id for r in rows])
    # `shared`: with everyone or with the caller's project (as Neutron shows it: to whom asks)
    shared_here = grants.shared_with(conn, RBAC, [r.id for r in rows if not r.shared], ctx.project_id)
    out = []
    for r in rows:
        d = common.standard_fields(r, tags.get(r.id))
        d.update({
            "ip_version": r.ip_version, "prefixes": list(r.prefixes), "min_prefixlen": r.min_prefixlen,
            "max_prefixlen": r.max_prefixlen, "default_prefixlen": r.default_prefixlen,
            "default_quota": r.default_quota, "address_scope_id": r.address_scope_id,
            "shared": r.shared or r.id in shared_here,
            "is_default": r.is_default,
        })  # fmt: skip
        out.append(d)
    return out


def visible_stmt(ctx: Context) -> Any:
    """The pools the caller sees, and so may take subnets from: theirs, shared with everyone or with their project."""
    cond = grants.visible(SP, RBAC, ctx, (grants.SHARED,), SP.c.shared.is_(True))
    return select(SP) if cond is None else select(SP).where(cond)


def get_visible(conn: Connection, ctx: Context, pool_id: str, lock: bool = False) -> Any:
    """`lock`: the row locked FOR UPDATE until commit, read as it is once locked (its hash current)."""
    stmt = visible_stmt(ctx).where(SP.c.id == pool_id)
    row = conn.execute(stmt.with_for_update(of=SP) if lock else stmt).first() if is_uuid(pool_id) else None
    if row is None:
        raise not_found("subnet_pool", pool_id)
    return row


def _get_owned(conn: Connection, ctx: Context, pool_id: str, action: str) -> Any:
    row = get_visible(conn, ctx, pool_id)
    if not (ctx.is_admin or row.project_id == ctx.project_id):
        raise disallowed(action)
    return row


def ranges_of(prefixes: list[str]) -> list[ps.Range]:
    return ps.merged(ps.cidr_range(p)[1] for p in prefixes)


def _read_prefixes(values: list[str]) -> tuple[int, list[ps.Range]]:
    """The IP version and the merged ranges of a request's prefixes, refused as Neutron refuses them."""
    if not values:
        raise BadRequest("Empty subnet pool prefix list.", type="EmptySubnetPoolPrefixList")
    versions = set()
    out = []
    for text in values:
        try:
            net = subnet_specs.network(text)
        except ValueError as exc:
            raise BadRequest(f"Invalid input for prefixes. Reason: {exc}.") from None
        versions.add(net.version)
        out.append((int(net.network_address), int(net.broadcast_address)))
    if len(versions) > 1:
        raise BadRequest("Cannot mix IPv4 and IPv6 prefixes in a subnet pool.", type="PrefixVersionMismatch")
    return versions.pop(), ps.merged(out)


def _bounds(version: int, lo: int | None, hi: int | None, default: int | None) -> tuple[int, int, int]:
    """min, max and default prefix length, defaulted and checked as Neutron's SubnetPoolReader does."""
    lo = DEFAULT_MIN[version] if lo is None else lo
    hi = ps.BITS[version] if hi is None else hi
    default = lo if default is None else default

    def illegal(kind: str, value: int, base: str, base_value: int) -> BadRequest:
        return BadRequest(f"Illegal prefix bounds: {kind}={value}, {base}={base_value}.",
                          type="IllegalSubnetPoolPrefixBounds")  # fmt: skip

    if lo > hi:
        raise illegal("min_prefixlen", lo, "max_prefixlen", hi)
    if hi > ps.BITS[version]:
        raise illegal("max_prefixlen", hi, "ip_version_max", ps.BITS[version])
    if default < lo:
        raise illegal("default_prefixlen", default, "min_prefixlen", lo)
    if default > hi:
        raise illegal("default_prefixlen", default, "max_prefixlen", hi)
    return lo, hi, default


def _check_scope(conn: Connection, ctx: Context, scope_id: str | None, pool_id: str, version: int,
                 ranges: list[ps.Range]) -> None:  # fmt: skip
    """Neutron's _validate_address_scope_id: visible (404), the caller's or shared (400), of the pool's IP version,
    and no other pool of the scope sharing an address (409). The scope's row is locked so that two pools joining
    it at once take turns and the second sees the first."""
    if scope_id is None:
        return
    scope = address_scopes.get_visible(conn, ctx, scope_id)
    if not address_scopes.usable(conn, ctx, scope):
        raise BadRequest(f"Illegal subnetpool association: subnetpool {pool_id} cannot be associated with address "
                         f"scope {scope_id}.", type="IllegalSubnetPoolAssociationToAddressScope")  # fmt: skip
    if scope.ip_version != version:
        raise BadRequest(f"Illegal subnetpool association: subnetpool {pool_id} cannot associate with address scope "
                         f"{scope_id} because subnetpool ip_version is not {scope.ip_version}.",
                         type="IllegalSubnetPoolIpVersionAssociationToAddressScope")  # fmt: skip
    AS = tsp.address_scopes
    conn.execute(select(AS.c.id).where(AS.c.id == scope_id).with_for_update())
    others = select(SP.c.prefixes).where(SP.c.address_scope_id == scope_id, SP.c.id != pool_id)
    for (prefixes,) in conn.execute(others):
        if ps.overlaps(ranges, ranges_of(prefixes)):
            raise Conflict("Failed to associate address scope: subnetpools within an address scope must have unique "
                           "prefixes.", type="AddressScopePrefixConflict")  # fmt: skip


def _check_rescope(conn: Connection, pool_id: str, version: int) -> None:
    """Neutron's _check_subnetpool_address_scope_network_affinity: a pool changes scope only if no network holding
    its subnets holds another subnet of its IP version (that one would be left in the old scope)."""
    S = t.subnets
    nets = select(S.c.network_id).where(S.c.subnetpool_id == pool_id)
    stmt = select(S.c.id).where(S.c.network_id.in_(nets), S.c.ip_version == version,
                                (S.c.subnetpool_id != pool_id) | S.c.subnetpool_id.is_(None)).limit(1)  # fmt: skip
    if conn.execute(stmt).first():
        raise affinity_error()


def affinity_error() -> BadRequest:
    return BadRequest("Subnets of the same address family hosted on the same network must all participate in the same "
                      "address scope.", type="NetworkAddressScopeAffinityError")  # fmt: skip


def _check_update_allowed(conn: Connection, ctx: Context, row: Any) -> None:
    """Neutron's _check_subnetpool_update_allowed: a pool in a shared address scope that is not the caller's
    changes no more (the scope's owner delegated its addresses, not their management)."""
    if row.address_scope_id is None or ctx.is_admin:
        return
    owner = conn.execute(select(tsp.address_scopes.c.project_id).where(tsp.address_scopes.c.id == row.address_scope_id))
    if owner.scalar() != ctx.project_id:
        raise BadRequest(f"Illegal subnetpool update : subnetpool {row.id} cannot be updated when associated with "
                         f"shared address scope {row.address_scope_id}.", type="IllegalSubnetPoolUpdate")  # fmt: skip


def _check_default(conn: Connection, ctx: Context, version: int, action: str) -> None:
    if not ctx.is_admin:
        raise disallowed(f"{action}:is_default")
    if conn.execute(select(SP.c.id).where(SP.c.default_for_version == version)).first():
        raise InvalidInput("A default subnetpool for this IP family has already been set. Only one default may exist "
                           "per IP family")  # fmt: skip


def list_pools(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        attrs = {**ATTRS, "shared": Attr(filter=grants.shared_filter(SP.c.id, RBAC, ctx), sortable=False)}
        rows, more = fetch_page(conn, SP, attrs, visible_stmt(ctx), q, "subnet_pool")
        return Page(to_dicts(conn, rows, ctx), more)


def get_pool(store: Store, ctx: Context, pool_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return to_dicts(conn, [get_visible(conn, ctx, pool_id)], ctx)[0]


def _fetch(conn: Connection, ctx: Context, pool_id: str) -> dict[str, Any]:
    return to_dicts(conn, [conn.execute(select(SP).where(SP.c.id == pool_id)).one()], ctx)[0]


def create_pools(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [parse(PoolCreate, b) for b in bodies]
    with store.write() as tx:
        ids = [_insert(tx, ctx, spec) for spec in specs]
        return [_fetch(tx.conn, ctx, i) for i in ids]


def _insert(tx: Tx, ctx: Context, spec: PoolCreate) -> str:
    version, ranges = _read_prefixes(spec.prefixes)
    lo, hi, default = _bounds(version, spec.min_prefixlen, spec.max_prefixlen, spec.default_prefixlen)
    if spec.shared and not ctx.is_admin:
        raise disallowed("create_subnetpool:shared")
    if spec.is_default:
        _check_default(tx.conn, ctx, version, "create_subnetpool")
    row = common.new_standard(ctx, spec.project_id or spec.tenant_id, tx.now, spec.name, spec.description,
                              "subnetpool")  # fmt: skip
    _check_scope(tx.conn, ctx, spec.address_scope_id, row["id"], version, ranges)
    row.update(
        ip_version=version, prefixes=ps.cidrs(ranges, version), min_prefixlen=lo, max_prefixlen=hi,
        default_prefixlen=default, default_quota=spec.default_quota, address_scope_id=spec.address_scope_id,
        shared=spec.shared, is_default=spec.is_default, default_for_version=version if spec.is_default else None,
        hash=common.new_id(),
    )  # fmt: skip
    tx.conn.execute(insert(SP).values(**row))
    if spec.shared:  # (`shared` is the wildcard policy, as in Neutron)
        grants.insert(tx, RBAC, row["id"], row["project_id"], grants.SHARED, grants.WILDCARD)
    if spec.tags:
        common.set_tags(tx.conn, row["id"], spec.tags)
    tx.record("subnetpool", row["id"], "create", row["project_id"])
    return str(row["id"])


def update_pool(store: Store, ctx: Context, pool_id: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = parse(PoolUpdate, body)
    given = spec.model_fields_set
    with store.write() as tx:
        row = _get_owned(tx.conn, ctx, pool_id, "update_subnetpool")
        tx.conn.execute(select(SP.c.id).where(SP.c.id == pool_id).with_for_update())
        _check_update_allowed(tx.conn, ctx, row)
        changes: dict[str, Any] = {k: getattr(spec, k) for k in ("name", "description") if k in given
                                   and getattr(spec, k) is not None}  # fmt: skip
        ranges = ranges_of(row.prefixes)
        if "prefixes" in given and spec.prefixes is not None:
            version, wanted = _read_prefixes(spec.prefixes)
            if version != row.ip_version:
                raise BadRequest("Cannot mix IPv4 and IPv6 prefixes in a subnet pool.", type="PrefixVersionMismatch")
            if ps.minus(ranges, wanted):
                raise BadRequest("Illegal update to prefixes: Existing prefixes must be a subset of the new prefixes.",
                                 type="IllegalSubnetPoolPrefixUpdate")  # fmt: skip
            ranges = wanted
        new = {k: getattr(spec, k) if k in given else getattr(row, k)
               for k in ("min_prefixlen", "max_prefixlen", "default_prefixlen")}  # fmt: skip
        lo, hi, default = _bounds(row.ip_version, new["min_prefixlen"], new["max_prefixlen"], new["default_prefixlen"])
        changes.update(min_prefixlen=lo, max_prefixlen=hi, default_prefixlen=default,
                       prefixes=ps.cidrs(ranges, row.ip_version))  # fmt: skip
        if "default_quota" in given:
            changes["default_quota"] = spec.default_quota
        scope = spec.address_scope_id if "address_scope_id" in given else row.address_scope_id
        if scope != row.address_scope_id or changes["prefixes"] != list(row.prefixes):
            _check_scope(tx.conn, ctx, scope, pool_id, row.ip_version, ranges)
            if scope != row.address_scope_id:
                _check_rescope(tx.conn, pool_id, row.ip_version)
            changes["address_scope_id"] = scope
        if "is_default" in given and spec.is_default is not None and spec.is_default != row.is_default:
            if spec.is_default:
                _check_default(tx.conn, ctx, row.ip_version, "update_subnetpool")
            elif not ctx.is_admin:
                raise disallowed("update_subnetpool:is_default")
            changes.update(is_default=spec.is_default, default_for_version=row.ip_version if spec.is_default else None)
        if common.touch(tx, SP, pool_id, "subnetpool", row.project_id, changes, row=row):
            bump(tx.conn, pool_id)
        return _fetch(tx.conn, ctx, pool_id)


def change_prefixes(store: Store, ctx: Context, pool_id: str, body: dict[str, Any], add: bool) -> dict[str, Any]:
    """PUT .../add_prefixes and .../remove_prefixes (subnetpool-prefix-ops): {"prefixes": [...]} in and out. A
    prefix that holds a subnet cannot be removed."""
    spec = parse(PrefixOps, body)
    with store.write() as tx:
        row = _get_owned(tx.conn, ctx, pool_id, "add_prefixes" if add else "remove_prefixes")
        tx.conn.execute(select(SP.c.id).where(SP.c.id == pool_id).with_for_update())
        _check_update_allowed(tx.conn, ctx, row)
        version, given = _read_prefixes(spec.prefixes)
        if version != row.ip_version:
            raise BadRequest("Cannot mix IPv4 and IPv6 prefixes in a subnet pool.", type="PrefixVersionMismatch")
        current = ranges_of(row.prefixes)
        if add:
            ranges = ps.merged(current + given)
            _check_scope(tx.conn, ctx, row.address_scope_id, pool_id, version, ranges)
        else:
            ranges = ps.minus(current, given)
            if ps.overlaps(used(tx.conn, pool_id), ps.merged(given)):
                raise BadRequest(f"Illegal subnetpool update : Prefixes in use cannot be removed from subnet pool "
                                 f"{pool_id}.", type="IllegalSubnetPoolUpdate")  # fmt: skip
            if not ranges:
                raise BadRequest("Empty subnet pool prefix list.", type="EmptySubnetPoolPrefixList")
        prefixes = ps.cidrs(ranges, version)
        if common.touch(tx, SP, pool_id, "subnetpool", row.project_id, {"prefixes": prefixes}, row=row):
            bump(tx.conn, pool_id)
        return {"prefixes": prefixes}


def bump(conn: Connection, pool_id: str) -> str:
    """A new hash for the pool: its prefixes or allocations changed (every server's cached free space is stale)."""
    token = common.new_id()
    conn.execute(update(SP).where(SP.c.id == pool_id).values(hash=token))
    return token


def used(conn: Connection, pool_id: str) -> list[ps.Range]:
    """The pool's allocated prefixes, sorted (they never overlap)."""
    stmt = select(ALLOC.c.first, ALLOC.c.last).where(ALLOC.c.subnetpool_id == pool_id).order_by(ALLOC.c.first)
    return [(int(a, 16), int(b, 16)) for a, b in conn.execute(stmt)]


def delete_pool(store: Store, ctx: Context, pool_id: str) -> None:
    with store.write() as tx:
        row = _get_owned(tx.conn, ctx, pool_id, "delete_subnetpool")
        tx.conn.execute(select(SP.c.id).where(SP.c.id == pool_id).with_for_update())
        if tx.conn.execute(select(ALLOC.c.subnet_id).where(ALLOC.c.subnetpool_id == pool_id).limit(1)).first():
            raise BadRequest("Unable to delete subnet pool: Subnet pool has existing allocations.",
                             type="SubnetPoolDeleteError")  # fmt: skip
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == pool_id))
        tx.conn.execute(delete(SP).where(SP.c.id == pool_id))
        grants.remove_all(tx, RBAC, pool_id)
        tx.record("subnetpool", pool_id, "delete", row.project_id)

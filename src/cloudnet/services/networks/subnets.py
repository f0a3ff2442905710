"""Subnets: CIDR, gateway, allocation pools, DNS servers and host routes, validated as Neutron does."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, bindparam, delete, literal, select

from cloudnet.errors import BadRequest, Conflict, InvalidInput, disallowed, not_found
from cloudnet.services import common, quotas
from cloudnet.services.context import Context
from cloudnet.services.forwards import forward_deps, uplinks
from cloudnet.services.networks import networks, subnet_alloc, subnet_specs
from cloudnet.services.networks.subnet_specs import AUTO, Pool, SubnetCreate, SubnetUpdate
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_bool, to_int
from cloudnet.services.validation import is_uuid, parse
from cloudnet.store import tables as t
from cloudnet.store import tables_subnetpools as tsp
from cloudnet.store.db import Store, Tx

S = t.subnets
ALLOC = tsp.subnetpool_allocations
ROUTER_OWNERS = ("network:router_interface", "network:router_gateway")

ATTRS: dict[str, Attr] = {
    **common.standard_attrs(S),
    "network_id": Attr(S.c.network_id),
    "ip_version": Attr(S.c.ip_version, to_int),
    "cidr": Attr(S.c.cidr),
    "gateway_ip": Attr(S.c.gateway_ip),
    "enable_dhcp": Attr(S.c.enable_dhcp, to_bool),
    "ipv6_ra_mode": Attr(S.c.ipv6_ra_mode),
    "ipv6_address_mode": Attr(S.c.ipv6_address_mode),
    "subnetpool_id": Attr(S.c.subnetpool_id),
}


def to_dicts(conn: Connection, rows: list[Any]) -> list[dict[str, Any]]:
    tags = common.load_tags(conn, [r.id for r in rows])
    return [_to_dict(r._mapping, tags.get(r.id)) for r in rows]


def _to_dict(m: Mapping[str, Any], tags: list[str] | None) -> dict[str, Any]:
    """One subnet's API form, from its row or from the column values just inserted."""
    d = common.standard_fields(m, tags)
    for key in ("network_id", "ip_version", "cidr", "gateway_ip", "allocation_pools", "dns_nameservers",
                "host_routes", "enable_dhcp", "ipv6_ra_mode", "ipv6_address_mode", "subnetpool_id"):  # fmt: skip
        d[key] = m[key]
    d["service_types"] = []
    return d


def _visible_stmt(ctx: Context) -> Any:
    stmt = select(S)
    if not ctx.is_admin:
        shared = select(t.networks.c.id).where(networks.visibility(ctx))
        stmt = stmt.where((S.c.project_id == ctx.project_id) | S.c.network_id.in_(shared))
    return stmt


def get_visible(conn: Connection, ctx: Context, subnet_id: str) -> Any:
    # Ids are UUIDs: anything else cannot exist (and PostgreSQL refuses some strings, e.g. with NUL bytes).
    row = conn.execute(_visible_stmt(ctx).where(S.c.id == subnet_id)).first() if is_uuid(subnet_id) else None
    if row is None:
        raise not_found("subnet", subnet_id)
    return row


def _get_owned(conn: Connection, ctx: Context, subnet_id: str, action: str) -> Any:
    """A subnet the caller may change: 404 if they cannot see it, 403 if they only see it (shared network)."""
    return common.only_owner(get_visible(conn, ctx, subnet_id), ctx, action)


def list_subnets(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        rows, more = fetch_page(conn, S, ATTRS, _visible_stmt(ctx), q, "subnet")
        return Page(to_dicts(conn, rows), more)


def get_subnet(store: Store, ctx: Context, subnet_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return to_dicts(conn, [get_visible(conn, ctx, subnet_id)])[0]


def create_subnets(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [parse(SubnetCreate, b) for b in bodies]
    with store.write() as tx:
        rows = [_insert(tx, ctx, spec) for spec in specs]
        # Shown as written (no read back); tags read back only where given (their order is the database's).
        tagged = common.load_tags(tx.conn, [r["id"] for r, spec in zip(rows, specs, strict=True) if spec.tags])
        return [_to_dict(r, tagged.get(r["id"])) for r in rows]


def _insert(tx: Tx, ctx: Context, spec: SubnetCreate) -> dict[str, Any]:
    # The network locked in the same read: creates on one network take turns, each seeing the subnets the others
    # committed (FOR NO KEY UPDATE: port inserts' foreign-key locks still pass). Before the pool's lock, as in
    # delete_subnet.
    network = networks.get_visible(tx.conn, ctx, spec.network_id, lock=True)
    if network.project_id != ctx.project_id and not ctx.is_admin:
        if not networks.shared_with_caller(tx.conn, ctx, network):
            # Neutron's _validate_network_project_ownership: 404 for a network seen only because it is external,
            # as for a port on it (port_create.py); a shared network is seen as such, and refused by policy (403).
            raise not_found("network", spec.network_id)
        raise disallowed("create_subnet")
    project = common.owner_project(ctx, spec.project_id or spec.tenant_id, "create_subnet")
    allocation = subnet_alloc.allocate(tx.conn, ctx, spec, project)
    try:
        cidr = allocation.cidr if allocation else subnet_specs.network(spec.cidr or "")
    except ValueError as exc:
        raise BadRequest(f"Invalid input for cidr. Reason: {exc}.") from None
    if spec.ip_version is not None and spec.ip_version != cidr.version:
        raise InvalidInput(f"Cidr {spec.cidr} does not match ip_version {spec.ip_version}")
    if cidr.version == 6 and network.mtu < 1280:
        raise InvalidInput(f"IPv6 subnets need a network MTU of at least 1280; network {network.id} has {network.mtu}")
    if cidr.version == 4 and (spec.ipv6_ra_mode or spec.ipv6_address_mode):
        raise InvalidInput("ipv6_ra_mode and ipv6_address_mode are only valid for IPv6 subnets")
    subnet_specs.check_ipv6_modes(cidr, spec.ipv6_ra_mode, spec.ipv6_address_mode)
    others, quota = _network_subnets(tx.conn, network.id, project)
    subnet_alloc.check_affinity(others, cidr.version, allocation.scope_id if allocation else None)
    for other in others:
        if cidr.overlaps(ipaddress.ip_network(other.cidr)):
            raise InvalidInput(
                f"Requested subnet with cidr: {cidr} for network: {network.id} overlaps with another subnet."
            )
    gateway = (
        subnet_specs.default_gateway(cidr)
        if spec.gateway_ip == AUTO
        else subnet_specs.check_gateway(cidr, spec.gateway_ip)
    )
    if network.router_external:  # none of its gateway, network, broadcast address may be a forward's or SNAT's
        forward_deps.addresses_free(tx.conn, forward_deps.subnet_addresses(cidr, gateway), network.id)
    pools = subnet_specs.check_pools(cidr, spec.allocation_pools, gateway)
    subnet_specs.check_dns_versions(cidr, spec.dns_nameservers)
    row = common.new_standard(ctx, spec.project_id or spec.tenant_id, tx.now, spec.name, spec.description, "subnet")
    quotas.enforce_read(tx, project, "subnet", 1, quota)
    row.update(
        network_id=network.id,
        ip_version=cidr.version,
        cidr=str(cidr),
        gateway_ip=gateway,
        allocation_pools=pools,
        dns_nameservers=spec.dns_nameservers,
        host_routes=subnet_specs.check_routes(cidr, spec.host_routes),
        enable_dhcp=spec.enable_dhcp,
        ipv6_ra_mode=spec.ipv6_ra_mode,
        ipv6_address_mode=spec.ipv6_address_mode,
        subnetpool_id=allocation.pool_id if allocation else None,
    )
    subnet_alloc.insert_subnet(tx.conn, row, allocation)
    if spec.tags:
        common.set_tags(tx.conn, row["id"], spec.tags)
    tx.record("subnet", row["id"], "create", row["project_id"])
    return row


def _network_subnets(conn: Connection, network_id: str, project_id: str) -> tuple[list[Any], int | None]:
    """The network's subnets (CIDR, IP version, address scope: what a new one is checked against) and the
    project's own subnet quota, in one statement: on PostgreSQL its upsert locks the quota's row (the network's
    lock, already held, keeps the subnets as read while it waits)."""
    stmt = _subnets_and_quota(conn.dialect.name)
    rows = list(conn.execute(stmt, {"network": network_id, "quota_project": project_id}))
    return [r for r in rows if r.id is not None], rows[0].quota


@functools.cache
def _subnets_and_quota(dialect: str) -> Any:
    """`_network_subnets`' statement, built once per dialect (building it costs more than running it)."""
    cte, limit = quotas.stored_limit(dialect, bindparam("quota_project", type_=S.c.project_id.type), "subnet")
    SP = tsp.subnetpools
    one = select(literal(1).label("one")).subquery("one")  # (a row even for a network without subnets)
    subnets = S.outerjoin(SP, SP.c.id == S.c.subnetpool_id)
    stmt = select(limit.label("quota"), S.c.id, S.c.cidr, S.c.ip_version, SP.c.address_scope_id).select_from(
        one.outerjoin(subnets, S.c.network_id == bindparam("network", type_=S.c.network_id.type))
    )
    return stmt if cte is None else stmt.add_cte(cte)


def update_subnet(store: Store, ctx: Context, subnet_id: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = parse(SubnetUpdate, body)
    given = spec.model_fields_set
    with store.write() as tx:
        row = _get_owned(tx.conn, ctx, subnet_id, "update_subnet")
        cidr = ipaddress.ip_network(row.cidr)
        changes: dict[str, Any] = {}
        for key in ("name", "description", "enable_dhcp"):
            if key in given and getattr(spec, key) is not None:
                changes[key] = getattr(spec, key)
        gateway = row.gateway_ip
        if "gateway_ip" in given:
            gateway = subnet_specs.check_gateway(cidr, spec.gateway_ip)
            if gateway != row.gateway_ip:
                _check_gateway_change(tx.conn, row, gateway)
                if gateway:
                    forward_deps.addresses_free(tx.conn, {gateway: "gateway"}, row.network_id)
            changes["gateway_ip"] = gateway
        if "allocation_pools" in given or "gateway_ip" in given:
            pools = spec.allocation_pools
            if pools is None:
                pools = [Pool(start=p["start"], end=p["end"]) for p in row.allocation_pools]
            changes["allocation_pools"] = subnet_specs.check_pools(cidr, pools, gateway)
        if "dns_nameservers" in given:
            subnet_specs.check_dns_versions(cidr, spec.dns_nameservers or [])
            changes["dns_nameservers"] = spec.dns_nameservers or []
        if "host_routes" in given:
            changes["host_routes"] = subnet_specs.check_routes(cidr, spec.host_routes or [])
        common.touch(tx, S, subnet_id, "subnet", row.project_id, changes, row=row)
        return to_dicts(tx.conn, [tx.conn.execute(select(S).where(S.c.id == subnet_id)).one()])[0]


def _check_gateway_change(conn: Connection, row: Any, new_gateway: str | None) -> None:
    A, P = t.ip_allocations, t.ports
    holders = conn.execute(
        select(A.c.ip_address, P.c.device_owner)
        .join(P, P.c.id == A.c.port_id)
        .where(A.c.subnet_id == row.id, A.c.ip_address.in_([g for g in (row.gateway_ip, new_gateway) if g]))
    ).all()
    for ip, owner in holders:
        if ip == row.gateway_ip and owner == "network:router_interface":
            raise Conflict(
                f"Gateway {row.gateway_ip} of subnet {row.id} is in use by a router interface; detach it first.",
                type="GatewayIpInUse",
            )
        if ip == new_gateway:
            raise Conflict(f"Gateway ip {new_gateway} is already allocated to a port.", type="IpAddressInUse")


def delete_subnet(store: Store, ctx: Context, subnet_id: str) -> None:
    A, P = t.ip_allocations, t.ports
    with store.write() as tx:
        row = _get_owned(tx.conn, ctx, subnet_id, "delete_subnet")
        # The network first, as router interface changes and forward writers take it (forward_deps.subnet_kept
        # checks under it) before they allocate from a subnet, and subnet creates before a pool's row (given back
        # below): the same order, so none waits for the other.
        uplinks.lock_networks(tx.conn, {row.network_id})
        # Wait for transactions still allocating from it (their foreign-key locks conflict with this
        # one), so that the check below sees their addresses, and keep new ones out until the end.
        tx.conn.execute(select(S.c.id).where(S.c.id == subnet_id).with_for_update())
        users = tx.conn.execute(
            select(P.c.id, P.c.device_owner, P.c.project_id)
            .join(A, A.c.port_id == P.c.id)
            .where(A.c.subnet_id == subnet_id)
        ).all()
        if any(owner not in networks.AUTO_DELETE_OWNERS for _pid, owner, _proj in users):
            raise Conflict(
                f"Unable to complete operation on subnet {subnet_id}: "
                "One or more ports have an IP allocation from this subnet.",
                type="SubnetInUse",
            )
        forward_deps.subnet_kept(tx.conn, row)
        for port_id, _owner, project in users:
            tx.conn.execute(delete(A).where(A.c.subnet_id == subnet_id, A.c.port_id == port_id))
            common.touch(tx, P, port_id, "port", project)
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == subnet_id))
        if row.subnetpool_id:  # its prefix goes back (once nothing can refuse the delete: the cache is kept)
            subnet_alloc.give_back(tx.conn, row.subnetpool_id, row.cidr)
        tx.conn.execute(delete(ALLOC).where(ALLOC.c.subnet_id == subnet_id))
        tx.conn.execute(delete(S).where(S.c.id == subnet_id))
        tx.record("subnet", subnet_id, "delete", row.project_id)

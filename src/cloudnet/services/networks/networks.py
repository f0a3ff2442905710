"""Networks: Neutron semantics, including provider segments and `router:external`."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from pydantic import Field, model_validator
from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from cloudnet.errors import Conflict, InvalidInput, disallowed, not_found
from cloudnet.services import cache, common, quotas
from cloudnet.services.context import Context
from cloudnet.services.forwards import forward_deps, forwards
from cloudnet.services.hosts import zones
from cloudnet.services.networks import network_config, subnetpools
from cloudnet.services.qos import policies as qos_policies
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_bool, to_int
from cloudnet.services.rbac import grants
from cloudnet.services.validation import Body, Tags, is_uuid, parse
from cloudnet.store import tables as t
from cloudnet.store import tables_subnetpools as tsp
from cloudnet.store.db import Store, Tx

N = t.networks
NETWORK_TYPES = ("flat", "vlan", "local")
PROVIDER_TYPES = ("flat", "vlan")  # (tunnelled by nothing: their frames go out as they are)
# What a Geneve tunnel between OVN chassis adds to a frame (outer IPv4, UDP, Geneve with OVN's option): on OVN a
# network that is not a provider network is an overlay, and its default MTU leaves room for it, as Neutron's does.
GENEVE_OVERHEAD = 58
# Ports whose owner goes away with the network instead of blocking its deletion (Neutron: DHCP, metadata).
AUTO_DELETE_OWNERS = ("network:dhcp", "network:distributed")
# Ready ports of a port pool (services/pools/pool_model.py): deleted with their network, never blocking its deletion.
POOL_FREE_OWNER = "compute:cloudnet-pool"

ATTRS: dict[str, Attr] = {
    **common.standard_attrs(N),
    "admin_state_up": Attr(N.c.admin_state_up, to_bool),
    "shared": Attr(N.c.shared, to_bool),
    "mtu": Attr(N.c.mtu, to_int),
    "status": Attr(N.c.status),
    "router:external": Attr(N.c.router_external, to_bool),
    "provider:network_type": Attr(N.c.network_type),
    "provider:physical_network": Attr(N.c.physical_network),
    "provider:segmentation_id": Attr(N.c.segmentation_id, to_int),
    "port_security_enabled": Attr(N.c.port_security_enabled, to_bool),
    "qos_policy_id": Attr(N.c.qos_policy_id),
    "subnets": Attr(
        filter=lambda values: N.c.id.in_(select(t.subnets.c.network_id).where(t.subnets.c.id.in_(values))),
        sortable=False,
    ),
}


class NetworkCreate(Body):
    name: str = Field("", max_length=255)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    admin_state_up: bool = True
    shared: bool = False
    mtu: int | None = Field(None, ge=68, le=9216)
    router_external: bool = Field(False, alias="router:external")
    network_type: Literal["flat", "vlan", "local"] | None = Field(None, alias="provider:network_type")
    physical_network: str | None = Field(None, alias="provider:physical_network", max_length=64, min_length=1)
    segmentation_id: int | None = Field(None, alias="provider:segmentation_id")
    tags: Tags
    port_security_enabled: bool = True
    availability_zone_hints: zones.Hints
    config: dict[str, Any] = Field(default_factory=dict)
    routes: list[Any] = Field(default_factory=list, alias="cloudnet:routes")
    qos_policy_id: str | None = Field(None, max_length=36)

    @model_validator(mode="after")
    def _segment(self) -> NetworkCreate:
        if self.network_type in ("flat", "vlan") and not self.physical_network:
            raise ValueError(f"physical_network required for {self.network_type} provider network")
        if self.network_type in (None, "local") and self.physical_network:
            raise ValueError("physical_network not allowed for local provider network")
        if self.network_type == "vlan":
            if self.segmentation_id is None:
                raise ValueError("segmentation_id required for VLAN provider network")
            if not 1 <= self.segmentation_id <= 4094:
                raise ValueError("segmentation_id out of range (1 through 4094)")
        elif self.segmentation_id is not None:
            raise ValueError(f"segmentation_id specified for {self.network_type or 'local'} provider network")
        return self


class NetworkUpdate(Body):
    name: str | None = Field(None, max_length=255)
    description: str | None = Field(None, max_length=255)
    admin_state_up: bool | None = None
    shared: bool | None = None
    mtu: int | None = Field(None, ge=68, le=9216)
    router_external: bool | None = Field(None, alias="router:external")
    port_security_enabled: bool | None = None
    config: dict[str, Any] | None = None
    routes: list[Any] | None = Field(None, alias="cloudnet:routes")
    qos_policy_id: str | None = Field(None, max_length=36)
    availability_zone_hints: zones.ReadOnly = None  # (read-only: refused by name)


def _segment_key(network_type: str, physnet: str | None, segid: int | None) -> str | None:
    if network_type == "vlan":
        return f"vlan:{physnet}:{segid}"
    if network_type == "flat":
        return f"flat:{physnet}"
    return None


# What makes another project's network visible: a policy sharing it, or making it external, to the caller's project.
SEEN_THROUGH = (grants.SHARED, grants.EXTERNAL)


def visibility(ctx: Context) -> Any:
    # (`shared` mirrors the "*" access_as_shared policy: the common case needs no subquery row)
    return grants.visible(N, "network", ctx, SEEN_THROUGH, N.c.shared.is_(True))


def get_visible(conn: Connection, ctx: Context, network_id: str, lock: bool = False) -> Any:
    """`lock`: the row locked FOR NO KEY UPDATE until commit, in the same round trip (writers that add to the
    network take turns; port inserts' foreign-key locks still pass)."""
    # Ids are UUIDs: anything else cannot exist (and PostgreSQL refuses some strings, e.g. with NUL bytes).
    stmt = select(N).where(N.c.id == network_id)
    row = conn.execute(stmt.with_for_update(key_share=True) if lock else stmt).first() if is_uuid(network_id) else None
    if row is None or not (_owned_or_shared(row, ctx) or grants.actions_for(conn, "network", row.id, ctx.project_id)):
        raise not_found("network", network_id)
    return row


def visible_in_tx(tx: Tx, ctx: Context, network_id: str) -> Any:
    """`get_visible` from this process's cache of networks (services/cache.py), for the hot write paths."""
    row = cache.network(tx, network_id) if is_uuid(network_id) else None
    if row is None or not (_owned_or_shared(row, ctx) or cache.network_grants(tx, row.id, ctx.project_id)):
        raise not_found("network", network_id)
    return row


def _owned_or_shared(row: Any, ctx: Context) -> bool:
    return bool(ctx.is_admin or row.project_id == ctx.project_id or row.shared)


def usable_in_tx(tx: Tx, network: Any, project_id: str) -> bool:
    """Whether `project_id` may have ports on the network: its own, shared with everyone, or shared with it."""
    return bool(network.project_id == project_id or network.shared
                or grants.SHARED in cache.network_grants(tx, network.id, project_id))  # fmt: skip


def shared_with_caller(conn: Connection, ctx: Context, network: Any) -> bool:
    """Neutron's `shared` of one network as the caller sees it (shared with everyone or with their project)."""
    return bool(network.shared or network.id in grants.shared_with(conn, "network", [network.id], ctx.project_id))


def get_owned(conn: Connection, ctx: Context, network_id: str, action: str) -> Any:
    """A network the caller may change: 404 if they cannot see it, 403 if they only see it (shared, external)."""
    return common.only_owner(get_visible(conn, ctx, network_id), ctx, action)


def to_dicts(conn: Connection, rows: list[Any], ctx: Context) -> list[dict[str, Any]]:
    ids = [r.id for r in rows]
    # `shared`: shared with everyone or with the caller's project (Neutron's, which depends on who asks)
    shared_here = grants.shared_with(conn, "network", [r.id for r in rows if not r.shared], ctx.project_id)
    subnet_ids: dict[str, list[str]] = defaultdict(list)
    scopes: dict[tuple[str, int], set[str | None]] = defaultdict(set)  # (network, IP version) -> its subnets' scopes
    S, SP = t.subnets, tsp.subnetpools
    for chunk in common.chunks(ids, 5000):
        for sid, nid, version, scope in conn.execute(
            select(S.c.id, S.c.network_id, S.c.ip_version, SP.c.address_scope_id)
            .outerjoin(SP, SP.c.id == S.c.subnetpool_id)
            .where(S.c.network_id.in_(chunk))
        ):
            subnet_ids[nid].append(sid)
            scopes[nid, version].add(scope)
    tags = common.load_tags(conn, ids)
    placed = zones.network_zones(conn, ids)
    out = []
    for r in rows:
        d = common.standard_fields(r, tags.get(r.id))
        d.update(
            {
                "admin_state_up": r.admin_state_up,
                "shared": r.shared or r.id in shared_here,
                "status": r.status,
                "subnets": sorted(subnet_ids.get(r.id, [])),
                "mtu": r.mtu,
                "router:external": r.router_external,
                "provider:network_type": r.network_type,
                "provider:physical_network": r.physical_network,
                "provider:segmentation_id": r.segmentation_id,
                "port_security_enabled": r.port_security_enabled,
                "qos_policy_id": r.qos_policy_id,
                "availability_zone_hints": list(r.availability_zone_hints or []),
                "availability_zones": placed.get(r.id, []),
                "ipv4_address_scope": _scope(scopes.get((r.id, 4))),
                "ipv6_address_scope": _scope(scopes.get((r.id, 6))),
                "is_default": False,
                "l2_adjacency": True,
                "config": r.config or {},
                "cloudnet:routes": r.routes or [],
            }
        )
        out.append(d)
    return out


def _scope(found: set[str | None] | None) -> str | None:
    """A network's address scope of one IP version: its subnets' (they share one: subnet_alloc.check_affinity)."""
    return next(iter(found)) if found and len(found) == 1 else None


def list_networks(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        stmt = select(N)
        cond = visibility(ctx)
        if cond is not None:
            stmt = stmt.where(cond)
        attrs = {**ATTRS, "shared": Attr(filter=grants.shared_filter(N.c.id, "network", ctx), sortable=False)}
        rows, more = fetch_page(conn, N, attrs, stmt, q, "network")
        return Page(to_dicts(conn, rows, ctx), more)


def get_network(store: Store, ctx: Context, network_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return to_dicts(conn, [get_visible(conn, ctx, network_id)], ctx)[0]


def create_networks(store: Store, ctx: Context, bodies: list[dict[str, Any]], default_mtu: int,
                    overlay_overhead: int = 0) -> list[dict[str, Any]]:  # fmt: skip
    """`overlay_overhead`: what tunnelling adds to an overlay network's frames (GENEVE_OVERHEAD on OVN)."""
    specs = [parse(NetworkCreate, b) for b in bodies]
    for spec in specs:
        check_mtu(spec.mtu, spec.network_type or "local", default_mtu, overlay_overhead)
    with store.write() as tx:
        ids = [_insert(tx, ctx, spec, default_mtu, overlay_overhead) for spec in specs]
        rows = tx.conn.execute(select(N).where(N.c.id.in_(ids))).all()
        by_id = {r.id: r for r in rows}
        return to_dicts(tx.conn, [by_id[i] for i in ids], ctx)


def _insert(tx: Tx, ctx: Context, spec: NetworkCreate, default_mtu: int, overlay_overhead: int) -> str:
    if not ctx.is_admin:  # Neutron's create_network:<attribute> rules, in the order it checks them
        for attr, given in (("shared", spec.shared), ("router:external", spec.router_external),
                            ("provider:network_type", spec.network_type is not None)):  # fmt: skip
            if given:
                raise disallowed(f"create_network:{attr}")
    network_type = spec.network_type or "local"
    key = _segment_key(network_type, spec.physical_network, spec.segmentation_id)
    if key is not None and tx.conn.execute(select(N.c.id).where(N.c.segment_key == key)).first():
        raise _segment_in_use(spec)
    row = common.new_standard(ctx, spec.project_id or spec.tenant_id, tx.now, spec.name, spec.description, "network")
    quotas.enforce(tx, row["project_id"], "network", 1)
    zones.require_known(tx.conn, spec.availability_zone_hints)
    row.update(
        admin_state_up=spec.admin_state_up,
        shared=spec.shared,
        mtu=spec.mtu or default_mtu - (0 if network_type in PROVIDER_TYPES else overlay_overhead),
        status="ACTIVE",
        router_external=spec.router_external,
        network_type=network_type,
        physical_network=spec.physical_network,
        segmentation_id=spec.segmentation_id,
        segment_key=key,
        config=network_config.merge_config(tx.conn, None, {}, spec.config),
        routes=network_config.check_routes(spec.routes, spec.router_external),
        port_security_enabled=spec.port_security_enabled,
        qos_policy_id=qos_policies.for_new_network(
            tx, ctx, row["project_id"], "qos_policy_id" in spec.model_fields_set, spec.qos_policy_id
        ),
        availability_zone_hints=spec.availability_zone_hints,
    )
    if spec.routes and not ctx.is_admin:
        raise disallowed("create_network:cloudnet:routes")
    try:
        tx.conn.execute(insert(N).values(**row))
    except IntegrityError:
        if key is None:
            raise
        raise _segment_in_use(spec) from None  # another server took the segment since the check above
    if spec.tags:
        common.set_tags(tx.conn, row["id"], spec.tags)
    # As in Neutron: `shared` and `router:external` are the wildcard policies of their actions.
    for flag, action in ((spec.shared, grants.SHARED), (spec.router_external, grants.EXTERNAL)):
        if flag:
            grants.insert(tx, "network", row["id"], row["project_id"], action, grants.WILDCARD)
    tx.record("network", row["id"], "create", row["project_id"])
    return str(row["id"])


def check_mtu(mtu: int | None, network_type: str, default_mtu: int, overlay_overhead: int) -> None:
    """An overlay network's frames must fit the tunnel over the underlay (whose MTU is `default_mtu`): a larger
    MTU is refused as Neutron refuses one above its segments' maximum."""
    if mtu is None or not overlay_overhead or network_type in PROVIDER_TYPES:
        return
    maximum = default_mtu - overlay_overhead
    if mtu > maximum:
        raise InvalidInput(f"Requested MTU is too big, maximum is {maximum}")


def _segment_in_use(spec: NetworkCreate) -> Conflict:
    if spec.network_type == "vlan":
        return Conflict(
            f"Unable to create the network. The VLAN {spec.segmentation_id} on physical network "
            f"{spec.physical_network} is in use.",
            type="VlanIdInUse",
        )
    return Conflict(
        f"Unable to create the flat network. Physical network {spec.physical_network} is in use.",
        type="FlatNetworkInUse",
    )


def update_network(store: Store, ctx: Context, network_id: str, body: dict[str, Any], default_mtu: int = 1500,
                   overlay_overhead: int = 0) -> dict[str, Any]:  # fmt: skip
    """`default_mtu`, `overlay_overhead`: as for create_networks (an overlay network's MTU stays within the tunnel)."""
    spec = parse(NetworkUpdate, body)
    zones.read_only(spec.model_fields_set)
    changes = spec.model_dump(exclude_unset=True, by_alias=False)
    with store.write() as tx:
        row = get_owned(tx.conn, ctx, network_id, "update_network")
        for attr in ("shared", "router_external"):
            if attr in changes and not ctx.is_admin:
                raise disallowed(f"update_network:{attr.replace('_', ':')}")
        if changes.get("router_external") is False and row.router_external:
            in_use = tx.conn.execute(
                select(t.ports.c.id).where(
                    t.ports.c.network_id == network_id, t.ports.c.device_owner == "network:router_gateway"
                )
            ).first()
            if in_use:
                raise external_in_use(network_id)
        if changes.get("router_external") is not None and changes["router_external"] != row.router_external:
            # (made external: open to everyone; no longer: every access_as_external policy goes, as in Neutron)
            if changes["router_external"]:
                grants.wildcard(tx, "network", network_id, row.project_id, grants.EXTERNAL, True)
            else:
                grants.remove_all(tx, "network", network_id, grants.EXTERNAL)
        if changes.get("shared") is not None and changes["shared"] != row.shared:
            if not changes["shared"]:
                _keep_sharers(tx.conn, row)
            grants.wildcard(tx, "network", network_id, row.project_id, grants.SHARED, changes["shared"])
        check_mtu(changes.get("mtu"), row.network_type, default_mtu, overlay_overhead)
        if changes.get("mtu") is not None and changes["mtu"] < 1280:
            has_v6 = tx.conn.execute(
                select(t.subnets.c.id).where(t.subnets.c.network_id == network_id, t.subnets.c.ip_version == 6)
            ).first()
            if has_v6:
                raise InvalidInput("IPv6 subnets need a network MTU of at least 1280")
        if changes.get("config") is not None:
            changes["config"] = network_config.merge_config(tx.conn, network_id, row.config or {}, changes["config"])
        if changes.get("routes") is not None:
            if not ctx.is_admin:
                raise disallowed("update_network:cloudnet:routes")
            external = changes.get("router_external", row.router_external)
            changes["routes"] = network_config.check_routes(changes["routes"], bool(external))
            forward_deps.ranges_kept(tx.conn, network_id, f"Unable to change cloudnet:routes of network {network_id}",
                                     "NetworkRoutesInUse", routes=changes["routes"])  # fmt: skip
        qos = (
            {"qos_policy_id": qos_policies.check_usable(tx, ctx, changes["qos_policy_id"])}
            if "qos_policy_id" in changes
            else {}
        )
        changes = {k: v for k, v in changes.items() if v is not None} | qos
        if changes.get("port_security_enabled", row.port_security_enabled) != row.port_security_enabled:
            _pool_ports_follow(tx, network_id, changes["port_security_enabled"])
        common.touch(tx, N, network_id, "network", row.project_id, changes, row=row)
        if changes.get("shared") is False and row.shared:
            drop_unusable_ready_ports(tx, network_id)
        return to_dicts(tx.conn, [tx.conn.execute(select(N).where(N.c.id == network_id)).one()], ctx)[0]


def external_in_use(network_id: str) -> Conflict:
    return Conflict(
        f"Network {network_id} cannot stop being external: a router uses it as gateway.", type="ExternalNetworkInUse"
    )


def _keep_sharers(conn: Connection, network: Any) -> None:
    """`shared` turned off: refused while projects other than the owner, and not given the network by a policy of
    their own, have ports or subnets on it (Neutron's _validate_shared_update: InvalidSharedSetting)."""
    P, S = t.ports, t.subnets
    allowed = {network.project_id} | grants.targets(conn, "network", network.id, grants.SHARED)
    users = select(P.c.project_id).where(
        P.c.network_id == network.id, ~P.c.device_owner.startswith("network:"), P.c.device_owner != POOL_FREE_OWNER
    )  # (ready pool ports: see below)
    users = users.union(select(S.c.project_id).where(S.c.network_id == network.id))
    if {r.project_id for r in conn.execute(users)} - allowed:
        raise Conflict(
            f"Unable to reconfigure sharing settings for network {network.name}. Multiple projects are using it.",
            type="InvalidSharedSetting",
        )


def drop_unusable_ready_ports(tx: Tx, network_id: str) -> None:
    """The network's sharing changed: ready pool ports (nobody's in use yet) of projects that may no longer use it
    go, as they go with a deleted network, rather than keep the sharing alive (their pools stop refilling)."""
    network = tx.conn.execute(select(N).where(N.c.id == network_id)).one()
    P = t.ports
    ready = tx.conn.execute(
        select(P.c.id, P.c.project_id).where(P.c.network_id == network_id, P.c.device_owner == POOL_FREE_OWNER)
    ).all()
    lost: dict[str, bool] = {}
    for port_id, project_id in ready:
        if project_id not in lost:
            lost[project_id] = not (network.project_id == project_id or network.shared or grants.SHARED in
                                    grants.actions_for(tx.conn, "network", network_id, project_id))  # fmt: skip
        if lost[project_id]:
            tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == port_id))
            tx.conn.execute(delete(P).where(P.c.id == port_id))
            tx.record("port", port_id, "delete", project_id)


def _pool_ports_follow(tx: Tx, network_id: str, enabled: bool) -> None:
    """The network's port security changed: its ports keep theirs (as in Neutron), but the ready ports of its
    port pools are the ports its next instances get, so they take the new value, and lose their security groups
    and address pairs when it is off (the pools' caches follow the network's event)."""
    P, PP = t.ports, t.port_pools
    ready = tx.conn.execute(
        select(P.c.id, P.c.project_id).where(P.c.network_id == network_id, P.c.device_owner == POOL_FREE_OWNER)
    ).all()
    if not enabled:
        tx.conn.execute(update(PP).where(PP.c.network_id == network_id).values(security_groups=[]))
    for chunk in common.chunks([r.id for r in ready], 5000):
        tx.conn.execute(update(P).where(P.c.id.in_(chunk)).values(
            port_security_enabled=enabled, updated_at=tx.now, revision_number=P.c.revision_number + 1))  # fmt: skip
        if not enabled:
            for table in (t.port_security_groups, t.allowed_address_pairs):
                tx.conn.execute(delete(table).where(table.c.port_id.in_(chunk)))
    for port_id, project_id in ready:
        tx.record("port", port_id, "update", project_id)


def delete_network(store: Store, ctx: Context, network_id: str) -> None:
    with store.write() as tx:
        row = get_owned(tx.conn, ctx, network_id, "delete_network")
        # Wait for transactions still adding ports or subnets to it (their foreign-key locks conflict
        # with this one), so that the checks below see them, and keep new ones out until the end.
        tx.conn.execute(select(N.c.id).where(N.c.id == network_id).with_for_update())
        # Its subnets' prefixes go back to their pools: the pools' rows after the network's, as subnet creates
        # take them (none can come meanwhile).
        S = t.subnets
        pools_of = (
            select(S.c.subnetpool_id).distinct().where(S.c.network_id == network_id, S.c.subnetpool_id.is_not(None))
        )
        for pool_id in sorted(p for (p,) in tx.conn.execute(pools_of)):
            subnetpools.bump(tx.conn, pool_id)
        P = t.ports
        blocking = tx.conn.execute(
            select(P.c.id)
            .where(P.c.network_id == network_id, P.c.device_owner.not_in((*AUTO_DELETE_OWNERS, POOL_FREE_OWNER)))
            .limit(1)
        ).first()
        if blocking:
            raise Conflict(
                f"Unable to complete operation on network {network_id}. "
                "There are one or more ports still in use on the network.",
                type="NetworkInUse",
            )
        for (port_id,) in tx.conn.execute(select(P.c.id).where(P.c.network_id == network_id)).all():
            tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == port_id))
            tx.conn.execute(delete(P).where(P.c.id == port_id))
            tx.record("port", port_id, "delete", row.project_id)
        subnet_rows = tx.conn.execute(
            select(t.subnets.c.id, t.subnets.c.project_id).where(t.subnets.c.network_id == network_id)
        ).all()
        for sid, sproject in subnet_rows:
            tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == sid))
            tx.record("subnet", sid, "delete", sproject)
        ALLOC = tsp.subnetpool_allocations
        tx.conn.execute(delete(ALLOC).where(ALLOC.c.subnet_id.in_([sid for sid, _p in subnet_rows])))
        tx.conn.execute(delete(t.subnets).where(t.subnets.c.network_id == network_id))
        forwards.delete_for_network(tx, network_id)
        grants.remove_all(tx, "network", network_id)
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == network_id))
        tx.conn.execute(delete(N).where(N.c.id == network_id))
        tx.record("network", network_id, "delete", row.project_id)

"""Routers: an external gateway (how a network reaches its uplink) and interfaces on subnets."""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from typing import Any

from pydantic import Field
from sqlalchemy import Connection, insert, select

from cloudnet.errors import BadRequest, Conflict, NotFound, disallowed
from cloudnet.services import common, quotas
from cloudnet.services.context import Context
from cloudnet.services.forwards import forward_deps
from cloudnet.services.hosts import zones
from cloudnet.services.networks import networks, router_routes, single_host, subnets
from cloudnet.services.ports import ports
from cloudnet.services.ports.port_specs import ROUTER_GATEWAY, ROUTER_INTERFACE, FixedIp, PortCreate, PortUpdate
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_bool
from cloudnet.services.validation import Body, Tags, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

R = t.routers
P = t.ports
A = t.ip_allocations

ATTRS: dict[str, Attr] = {
    **common.standard_attrs(R),
    "admin_state_up": Attr(R.c.admin_state_up, to_bool),
    "status": Attr(R.c.status),
}


class GatewayInfo(Body):
    network_id: str
    enable_snat: bool = True
    # Validated while parsing (a bad address is a 400, not an error halfway through the transaction).
    external_fixed_ips: list[FixedIp] = Field(default_factory=list)


class RouterCreate(Body):
    name: str = Field("", max_length=255)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    admin_state_up: bool = True
    external_gateway_info: GatewayInfo | None = None
    tags: Tags
    availability_zone_hints: zones.Hints


class RouterUpdate(Body):
    name: str | None = Field(None, max_length=255)
    description: str | None = Field(None, max_length=255)
    admin_state_up: bool | None = None
    # {} or null removes the gateway
    external_gateway_info: dict[str, Any] | None = None
    routes: Any = None  # (checked by router_routes, which bounds the list before reading it)
    availability_zone_hints: zones.ReadOnly = None  # (read-only: refused by name)


class InterfaceRequest(Body):
    subnet_id: str | None = None
    port_id: str | None = None


# -- reading ------------------------------------------------------------------------------------


def _zones(conn: Connection, router_ids: list[str]) -> dict[str, list[str]]:
    """Each router's `availability_zones`: those of the networks it has interfaces on (a host realises a router for
    their ports; its gateway chassis on OVN: GET /v2.0/routers/{id}/gateway_chassis)."""
    joins: dict[str, set[str]] = defaultdict(set)
    for chunk in common.chunks(router_ids, 5000):
        for router_id, network_id in conn.execute(select(P.c.device_id, P.c.network_id).where(
                P.c.device_id.in_(chunk), P.c.device_owner == ROUTER_INTERFACE)):  # fmt: skip
            joins[router_id].add(network_id)
    by_network = zones.network_zones(conn, sorted({n for ns in joins.values() for n in ns}))
    return {r: sorted({z for n in ns for z in by_network.get(n, [])}) for r, ns in joins.items()}


def to_dicts(conn: Connection, rows: list[Any]) -> list[dict[str, Any]]:
    gw_ids = [r.gw_port_id for r in rows if r.gw_port_id]
    gw_ips: dict[str, list[dict[str, str]]] = defaultdict(list)
    gw_net: dict[str, str] = {}
    for chunk in common.chunks(gw_ids, 5000):
        for pid, nid in conn.execute(select(P.c.id, P.c.network_id).where(P.c.id.in_(chunk))):
            gw_net[pid] = nid
        for pid, sid, ip in conn.execute(
            select(A.c.port_id, A.c.subnet_id, A.c.ip_address).where(A.c.port_id.in_(chunk))
        ):
            gw_ips[pid].append({"subnet_id": sid, "ip_address": ip})
    tags = common.load_tags(conn, [r.id for r in rows])
    placed = _zones(conn, [r.id for r in rows])
    out = []
    for r in rows:
        d = common.standard_fields(r, tags.get(r.id))
        gateway = None
        if r.gw_port_id:
            gateway = {
                "network_id": gw_net.get(r.gw_port_id),
                "enable_snat": r.enable_snat,
                "external_fixed_ips": sorted(gw_ips.get(r.gw_port_id, []), key=lambda f: f["ip_address"]),
            }
        d.update(
            {
                "admin_state_up": r.admin_state_up,
                "status": r.status,
                "external_gateway_info": gateway,
                "routes": list(r.routes or []),
                "distributed": False,
                "ha": False,
                "availability_zone_hints": list(r.availability_zone_hints or []),
                "availability_zones": placed.get(r.id, []),
                "flavor_id": None,
            }
        )
        out.append(d)
    return out


def list_routers(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        stmt = common.only_visible(select(R), R, ctx)
        rows, more = fetch_page(conn, R, ATTRS, stmt, q, "router")
        return Page(to_dicts(conn, rows), more)


def get_router(store: Store, ctx: Context, router_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return to_dicts(conn, [common.get_row(conn, R, "router", router_id, ctx)])[0]


def _reload(conn: Connection, router_id: str) -> dict[str, Any]:
    return to_dicts(conn, [conn.execute(select(R).where(R.c.id == router_id)).one()])[0]


# -- gateway ------------------------------------------------------------------------------------


def _set_gateway(tx: Tx, ctx: Context, router: Any, info: GatewayInfo | None) -> None:
    """Create, replace or remove the router's gateway port on an external network."""
    current = None
    if router.gw_port_id:
        current = tx.conn.execute(select(P).where(P.c.id == router.gw_port_id)).first()
    if info is None:
        if current is not None:
            tx.conn.execute(R.update().where(R.c.id == router.id).values(gw_port_id=None))
            ports.delete_in_tx(tx, current)
        return
    if info.external_fixed_ips and not ctx.is_admin:
        # Neutron's policy (create_router/update_router:external_gateway_info:external_fixed_ips): admin only; a
        # member's gateway gets an address picked for it, as a member's port on the network would be refused.
        raise disallowed("update_router:external_gateway_info:external_fixed_ips")
    admin = Context.admin(ctx.project_id)
    network = networks.get_visible(tx.conn, ctx, info.network_id)
    if not network.router_external:
        raise BadRequest(
            f"Bad router request: Network {network.id} is not a valid external network.", type="BadRequest"
        )
    fixed = list(info.external_fixed_ips)
    if current is not None and current.network_id == network.id:
        if fixed:
            ports.update_in_tx(tx, admin, current.id, PortUpdate(fixed_ips=fixed))
        tx.conn.execute(R.update().where(R.c.id == router.id).values(enable_snat=info.enable_snat))
        return
    if current is not None:
        tx.conn.execute(R.update().where(R.c.id == router.id).values(gw_port_id=None))
        ports.delete_in_tx(tx, current)
    # An external network without a subnet is a valid gateway (Neutron: a gateway port without fixed IPs).
    spec = PortCreate(
        network_id=network.id,
        project_id=network.project_id if ctx.is_admin else None,
        device_id=router.id,
        device_owner=ROUTER_GATEWAY,
        fixed_ips=fixed or None,
    )
    # The gateway port belongs to no tenant's quota of addresses: created with admin rights, as Neutron does.
    (port_id,) = ports.create_in_tx(tx, Context.admin(router.project_id), [spec], quota=False)
    tx.conn.execute(R.update().where(R.c.id == router.id).values(gw_port_id=port_id, enable_snat=info.enable_snat))


# -- create/update/delete -----------------------------------------------------------------------


def create_routers(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [parse(RouterCreate, b) for b in bodies]
    with store.write() as tx:
        ids = []
        for spec in specs:
            row = common.new_standard(
                ctx, spec.project_id or spec.tenant_id, tx.now, spec.name, spec.description, "router"
            )
            quotas.enforce(tx, row["project_id"], "router", 1)
            zones.require_known(tx.conn, spec.availability_zone_hints)
            row.update(
                admin_state_up=spec.admin_state_up,
                status="ACTIVE",
                gw_port_id=None,
                enable_snat=True,
                availability_zone_hints=spec.availability_zone_hints,
            )
            tx.conn.execute(insert(R).values(**row))
            # The router's event comes before its gateway port's, which refers to it.
            tx.record("router", row["id"], "create", row["project_id"])
            if spec.external_gateway_info is not None:
                router = tx.conn.execute(select(R).where(R.c.id == row["id"])).one()
                _set_gateway(tx, ctx, router, spec.external_gateway_info)
            if spec.tags:
                common.set_tags(tx.conn, row["id"], spec.tags)
            ids.append(row["id"])
        return [_reload(tx.conn, i) for i in ids]


def update_router(store: Store, ctx: Context, router_id: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = parse(RouterUpdate, body)
    given = spec.model_fields_set
    zones.read_only(given)
    routes = router_routes.parse(spec.routes or [], router_id) if "routes" in given else None
    with store.write() as tx:
        router = common.get_row(tx.conn, R, "router", router_id, ctx)
        changes = {k: getattr(spec, k) for k in ("name", "description", "admin_state_up")
                   if k in given and getattr(spec, k) is not None}  # fmt: skip
        if routes is not None:  # (checked against the router's subnets before its gateway changes, as Neutron)
            changes["routes"] = router_routes.check(tx.conn, router_id, routes)
        gateway_moved = False
        if "external_gateway_info" in given:
            info = spec.external_gateway_info
            before = _reload(tx.conn, router_id)["external_gateway_info"]
            attached = [p.network_id for p in _interfaces(tx.conn, router_id)]
            with forward_deps.links_kept(tx.conn, attached, f"Gateway cannot be updated for router {router_id}",
                                         "RouterExternalGatewayInUseByForward"):  # fmt: skip
                _set_gateway(tx, ctx, router, parse(GatewayInfo, info) if info else None)
            gateway_moved = _reload(tx.conn, router_id)["external_gateway_info"] != before
        common.touch(tx, R, router_id, "router", router.project_id, changes, row=router, changed=gateway_moved)
        return _reload(tx.conn, router_id)


def change_routes(store: Store, ctx: Context, router_id: str, body: Any, add: bool) -> dict[str, Any]:
    """extraroute-atomic: PUT .../add_extraroutes or .../remove_extraroutes with {"router": {"routes": [...]}}."""
    inner = body.get("router") if isinstance(body, dict) else None
    if not isinstance(inner, dict) or set(inner) != {"routes"}:
        raise BadRequest('Bad router request: expected {"router": {"routes": [...]}}.', type="BadRequest")
    given = router_routes.parse(inner["routes"], router_id)
    with store.write() as tx:
        router = common.get_row(tx.conn, R, "router", router_id, ctx)
        old = list(router.routes or [])
        new = router_routes.added(old, given) if add else router_routes.removed(old, given)
        common.touch(tx, R, router_id, "router", router.project_id,
                     {"routes": router_routes.check(tx.conn, router_id, new)}, row=router)  # fmt: skip
        return {"router": _reload(tx.conn, router_id)}


def delete_router(store: Store, ctx: Context, router_id: str) -> None:
    with store.write() as tx:
        router = common.get_row(tx.conn, R, "router", router_id, ctx)
        interface = tx.conn.execute(
            select(P.c.id).where(P.c.device_id == router_id, P.c.device_owner == ROUTER_INTERFACE).limit(1)
        ).first()
        if interface:
            raise Conflict(f"Router {router_id} still has ports", type="RouterInUse")
        _set_gateway(tx, ctx, router, None)
        tx.conn.execute(t.tags.delete().where(t.tags.c.resource_id == router_id))
        tx.conn.execute(R.delete().where(R.c.id == router_id))
        tx.record("router", router_id, "delete", router.project_id)


# -- interfaces ---------------------------------------------------------------------------------


def _interface_info(router: Any, port_id: str, network_id: str, subnet_ids: list[str]) -> dict[str, Any]:
    return {
        "id": router.id,
        "tenant_id": router.project_id,
        "project_id": router.project_id,
        "port_id": port_id,
        "network_id": network_id,
        "subnet_id": subnet_ids[0] if subnet_ids else None,
        "subnet_ids": subnet_ids,
    }


def _interfaces(conn: Connection, router_id: str) -> list[Any]:
    return list(conn.execute(select(P).where(P.c.device_id == router_id, P.c.device_owner == ROUTER_INTERFACE)))


def _attached_cidrs(
    conn: Connection, router_id: str
) -> list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    rows = conn.execute(
        select(t.subnets.c.id, t.subnets.c.cidr)
        .join(A, A.c.subnet_id == t.subnets.c.id)
        .join(P, P.c.id == A.c.port_id)
        .where(P.c.device_id == router_id, P.c.device_owner == ROUTER_INTERFACE)
    ).all()
    return [(sid, ipaddress.ip_network(cidr)) for sid, cidr in rows]


def _check_overlap(conn: Connection, router_id: str, subnet_rows: list[Any]) -> None:
    attached = _attached_cidrs(conn, router_id)
    for s in subnet_rows:
        cidr = ipaddress.ip_network(s.cidr)
        for other_id, other in attached:
            if other_id == s.id:
                raise BadRequest(f"Bad router request: Router already has a port on subnet {s.id}.", type="BadRequest")
            if cidr.overlaps(other):
                raise BadRequest(
                    f"Bad router request: Cidr {cidr} of subnet {s.id} overlaps with cidr {other} of subnet "
                    f"{other_id}.",
                    type="BadRequest",
                )


def add_interface(store: Store, ctx: Context, router_id: str, body: dict[str, Any]) -> dict[str, Any]:
    req = parse(InterfaceRequest, body)
    if (req.subnet_id is None) == (req.port_id is None):
        raise BadRequest("Bad router request: Either subnet_id or port_id must be specified.", type="BadRequest")
    with store.write() as tx:
        router = common.get_row(tx.conn, R, "router", router_id, ctx)
        if req.subnet_id is not None:
            subnet = subnets.get_visible(tx.conn, ctx, req.subnet_id)
            if not (ctx.is_admin or subnet.project_id == ctx.project_id):
                # A subnet of another project's shared network: seen, but its gateway is not the caller's to take
                # (Neutron, LP #1757482). A port of the caller's own on that network may still be attached.
                raise BadRequest(
                    f"Bad router request: Cannot add interface to router because subnet {subnet.id} is not owned by "
                    "project making the request",
                    type="BadRequest",
                )
            network_id, port = subnet.network_id, None
        else:
            subnet, port = None, common.get_row(tx.conn, P, "port", req.port_id or "", ctx)
            network_id = port.network_id
        single_host.check_join(tx, router_id, network_id)
        # A network with forwards keeps its uplink: attaching it to an older router with a gateway would move it.
        with forward_deps.links_kept(tx.conn, {network_id}, f"Router {router_id} cannot be attached to network "
                                     f"{network_id}", "UplinkInUseByForward"):  # fmt: skip
            info = _add_interface(tx, ctx, router, subnet, port)
        common.touch(tx, R, router_id, "router", router.project_id)
        return info


def _add_interface(tx: Tx, ctx: Context, router: Any, subnet: Any, port: Any) -> dict[str, Any]:
    """A new interface on `subnet` (at its gateway address), or `port` made the router's."""
    if subnet is not None:
        if not subnet.gateway_ip:
            raise BadRequest(f"Bad router request: Subnet {subnet.id} does not have a gateway IP.", type="BadRequest")
        _check_overlap(tx.conn, router.id, [subnet])
        spec = PortCreate(
            network_id=subnet.network_id,
            project_id=subnet.project_id if ctx.is_admin else None,
            device_id=router.id,
            device_owner=ROUTER_INTERFACE,
            fixed_ips=[FixedIp(subnet_id=subnet.id, ip_address=subnet.gateway_ip)],
        )
        (port_id,) = ports.create_in_tx(tx, ctx, [spec], quota=False)
        return _interface_info(router, port_id, subnet.network_id, [subnet.id])
    if port.device_id:
        raise Conflict(f"Port {port.id} is still in use by device {port.device_id}.", type="PortInUse")
    subnet_rows = tx.conn.execute(
        select(t.subnets).join(A, A.c.subnet_id == t.subnets.c.id).where(A.c.port_id == port.id)
    ).all()
    if not subnet_rows:
        raise BadRequest("Bad router request: Router port must have at least one fixed IP.", type="BadRequest")
    _check_overlap(tx.conn, router.id, subnet_rows)
    ports.update_in_tx(
        tx,
        ctx,
        port.id,
        PortUpdate(device_id=router.id, device_owner=ROUTER_INTERFACE),
        extra={"port_security_enabled": port.port_security_enabled},
    )
    tx.conn.execute(t.port_security_groups.delete().where(t.port_security_groups.c.port_id == port.id))
    return _interface_info(router, port.id, port.network_id, [s.id for s in subnet_rows])


def remove_interface(store: Store, ctx: Context, router_id: str, body: dict[str, Any]) -> dict[str, Any]:
    req = parse(InterfaceRequest, body)
    if req.subnet_id is None and req.port_id is None:
        raise BadRequest("Bad router request: Either subnet_id or port_id must be specified.", type="BadRequest")
    with store.write() as tx:
        router = common.get_row(tx.conn, R, "router", router_id, ctx)
        stmt = select(P).where(P.c.device_id == router_id, P.c.device_owner == ROUTER_INTERFACE)
        if req.port_id is not None:
            stmt = stmt.where(P.c.id == req.port_id)
        if req.subnet_id is not None:
            stmt = stmt.where(P.c.id.in_(select(A.c.port_id).where(A.c.subnet_id == req.subnet_id)))
        port = tx.conn.execute(stmt).first()
        if port is None:
            if req.port_id is not None:
                raise NotFound(
                    f"Router {router_id} does not have an interface with id {req.port_id}",
                    type="RouterInterfaceNotFound",
                )
            raise NotFound(
                f"Router {router_id} has no interface on subnet {req.subnet_id}",
                type="RouterInterfaceNotFoundForSubnet",
            )
        subnet_rows = tx.conn.execute(
            select(t.subnets).join(A, A.c.subnet_id == t.subnets.c.id).where(A.c.port_id == port.id)
        ).all()
        router_routes.check_interface_unused(router, subnet_rows)
        subnet_ids = [s.id for s in subnet_rows]
        what = f"Router interface for subnet {', '.join(sorted(subnet_ids))} on router {router_id} cannot be removed"
        with forward_deps.links_kept(tx.conn, {port.network_id}, what, "RouterInterfaceInUseByForward"):
            ports.delete_in_tx(tx, port)
        common.touch(tx, R, router_id, "router", router.project_id)
        return _interface_info(router, port.id, port.network_id, subnet_ids)

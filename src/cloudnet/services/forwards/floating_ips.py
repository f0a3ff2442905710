"""Neutron's floating IPs (/v2.0/floatingips): a face over the forwards (services/forwards/floating_common.py says how).

Neutron's rules and words (neutron/db/l3_db.py): the address is given (admins only, as Neutron's policy) or picked
from the external network's IPv4 subnets; association to a port (and one of its IPv4 addresses) needs the router
that links the port's subnet to the floating network, else ExternalGatewayForFloatingIPNotFound; one fixed IP has
at most one floating IP (FloatingIPPortAlreadyAssociated); a floating IP with port forwardings is not associated
whole (FipInUseByPortForwarding), nor to a port that has port forwardings (PortHasPortForwarding). The router is
the port network's uplink router (its own project's router with a gateway, services/forwards/uplinks.py), the one the
dataplane realises the network's forwards on. The `floatingip` quota counts every forward of the project.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import Field, field_validator
from sqlalchemy import Connection, delete, exists, false, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from cloudnet.errors import BadRequest, Conflict, InvalidInput, NotFound, disallowed
from cloudnet.services import common, quotas
from cloudnet.services.context import Context
from cloudnet.services.forwards import floating_common, forward_deps, forward_targets, uplinks
from cloudnet.services.networks import ipam, networks
from cloudnet.services.ports.owners import ROUTER_INTERFACE
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page
from cloudnet.services.validation import Body, Tags, check_ip, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

F, P, A, S = t.forwards, t.ports, t.ip_allocations, t.subnets
TARGET = F.c.config["target_address"].as_string()


def _by_port(values: list[str]) -> Any:
    held = select(A.c.network_id, A.c.ip_address).where(A.c.port_id.in_(values)).subquery()
    return exists().where(held.c.network_id == F.c.network_id, held.c.ip_address == TARGET)


def _by_router(values: list[str]) -> Any:
    legs = select(P.c.network_id).where(P.c.device_owner == ROUTER_INTERFACE, P.c.device_id.in_(values))
    return F.c.network_id.in_(legs)


def _by_status(values: list[str]) -> Any:
    """ACTIVE: targets something (it is a forward of a network); DOWN: holds its address only."""
    conds = {"ACTIVE": F.c.network_id.is_not(None), "DOWN": F.c.network_id.is_(None)}
    return or_(false(), *(conds[v] for v in sorted(set(values)) if v in conds))


def _address(value: str) -> str:
    try:
        return check_ip(value)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


ATTRS: dict[str, Attr] = {
    **common.standard_attrs(F),
    "floating_ip_address": Attr(F.c.listen_address, _address),
    "floating_network_id": Attr(F.c.floating_network_id),
    "fixed_ip_address": Attr(TARGET, sortable=False),
    "port_id": Attr(filter=_by_port, sortable=False),
    "router_id": Attr(filter=_by_router, sortable=False),
    "status": Attr(filter=_by_status, sortable=False),
}


def _ip(value: str | None) -> str | None:
    return None if value is None else check_ip(value)


class FloatingIpCreate(Body):
    floating_network_id: str = Field(max_length=36)
    floating_ip_address: str | None = Field(None, max_length=64)
    subnet_id: str | None = Field(None, max_length=36)
    port_id: str | None = Field(None, max_length=36)
    fixed_ip_address: str | None = Field(None, max_length=64)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    tags: Tags

    _ips = field_validator("floating_ip_address", "fixed_ip_address")(_ip)


class FloatingIpUpdate(Body):
    port_id: str | None = Field(None, max_length=36)
    fixed_ip_address: str | None = Field(None, max_length=64)
    description: str | None = Field(None, max_length=255)

    _ips = field_validator("fixed_ip_address")(_ip)


def bad(message: str) -> BadRequest:
    return BadRequest(f"Bad floatingip request: {message}.", type="BadRequest")


# -- reading ------------------------------------------------------------------------------------


def list_floating_ips(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        rows, more = fetch_page(conn, F, ATTRS, common.only_visible(select(F), F, ctx), q, "floatingip")
        return Page(floating_common.fip_dicts(conn, rows), more)


def get_row(conn: Connection, ctx: Context, fip_id: str) -> Any:
    row = conn.execute(select(F).where(F.c.id == fip_id)).first() if "\x00" not in fip_id else None
    if row is None or not (ctx.is_admin or row.project_id == ctx.project_id):
        raise NotFound(f"Floating IP {fip_id} could not be found", type="FloatingIPNotFound")
    return row


def get_floating_ip(store: Store, ctx: Context, fip_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return floating_common.fip_dicts(conn, [get_row(conn, ctx, fip_id)])[0]


def _reload(conn: Connection, fip_id: str) -> dict[str, Any]:
    return floating_common.fip_dicts(conn, [conn.execute(select(F).where(F.c.id == fip_id)).one()])[0]


# -- the address --------------------------------------------------------------------------------


def _ipv4_subnets(conn: Connection, network_id: str) -> list[Any]:
    return [s for s in conn.execute(select(S).where(S.c.network_id == network_id).order_by(S.c.id)).all()
            if s.ip_version == 4]  # fmt: skip


def _check_address(conn: Connection, ctx: Context, subnets: list[Any], address: str) -> None:
    ip = ipaddress.ip_address(address)
    inside = [s for s in subnets if ip in ipaddress.ip_network(s.cidr)]
    if not inside or ip in uplinks.reserved_addresses(ipaddress.ip_network(inside[0].cidr)):
        raise BadRequest(
            f"IP address {address} is not a valid IP for any of the subnets on the specified network.",
            type="InvalidIpForNetwork",
        )
    held = conn.execute(select(F).where(F.c.listen_address == address)).first()
    if held is not None:
        raise floating_common.address_held(ctx, address, held)
    used = conn.execute(select(A.c.port_id).where(A.c.ip_address == address).limit(1)).first()
    snat = any(True for _ in uplinks.external_addresses(conn, addresses=[address], kinds=(uplinks.SNAT,)))
    if used is not None or snat or any(s.gateway_ip == address for s in subnets):
        raise Conflict(f"IP address {address} already allocated in subnet {inside[0].id}.",
                       type="IpAddressAlreadyAllocated")  # fmt: skip


def _pick(conn: Connection, network_id: str, subnets: list[Any]) -> str:
    taken = uplinks.external_addresses_in_use(conn) | {s.gateway_ip for s in subnets if s.gateway_ip}
    for subnet in subnets:
        found = ipam.find_free(conn, ipam.SubnetInfo.from_row(subnet), 1, taken)
        if found:
            return found[0]
    raise BadRequest(f"Unable to find any IP address on external network {network_id}.",
                     type="ExternalIpAddressExhausted")  # fmt: skip


# -- association --------------------------------------------------------------------------------


def _internal(conn: Connection, ctx: Context, fip: Any, port_id: str, fixed: str | None) -> tuple[Any, str, str]:
    """The port, its address and that address's subnet the floating IP is to target (Neutron's rules)."""
    port = common.get_row(conn, P, "port", port_id, ctx)
    if port.project_id != fip.project_id and not ctx.is_admin:
        raise bad(f"Cannot process floating IP association with Port {port_id}, since that port is owned by a "
                  "different tenant")  # fmt: skip
    ips = floating_common.port_ips(conn, port.id)
    if fixed is not None:
        if ipaddress.ip_address(fixed).version != 4:
            raise bad(f"Cannot process floating IP association with {fixed}, since that is not an IPv4 address")
        found = [s for s, ip in ips if ip == fixed]
        if not found:
            raise bad(f"Port {port_id} does not have fixed ip {fixed}")
        return port, fixed, found[0]
    v4 = sorted((ip, s) for s, ip in ips if ipaddress.ip_address(ip).version == 4)
    if not v4:
        raise bad(f"Cannot add floating IP to port {port_id} that has no fixed IPv4 addresses")
    if len(v4) > 1:
        raise bad(f"Port {port_id} has multiple fixed IPv4 addresses.  Must provide a specific IPv4 address when "
                  "assigning a floating IP")  # fmt: skip
    return port, v4[0][0], v4[0][1]


def require_router(conn: Connection, external_id: str, port: Any, subnet_id: str) -> str:
    """The router through which the floating network reaches the port's subnet (the network's uplink router)."""
    router = uplinks.router_of(conn, port.network_id)
    link = forward_deps.link_of(conn, port.network_id)
    if router is None or router[1] != external_id or subnet_id not in link.attached:
        raise NotFound(
            f"External network {external_id} is not reachable from subnet {subnet_id}.  Therefore, cannot associate "
            f"Port {port.id} with a Floating IP.",
            type="ExternalGatewayForFloatingIPNotFound",
        )
    return router[0]


def _associate(tx: Tx, ctx: Context, fip: Any, external_id: str, port_id: str, fixed: str | None) -> None:
    if fip.ports:
        raise Conflict(f"Floating IP {fip.id} in use by Port Forwarding resources.", type="FipInUseByPortForwarding")
    port, address, subnet_id = _internal(tx.conn, ctx, fip, port_id, fixed)
    uplinks.lock_networks(tx.conn, {port.network_id})  # as every forward writer, the network before its uplink
    uplinks.lock_networks(tx.conn, {external_id})
    require_router(tx.conn, external_id, port, subnet_id)
    same_net = tx.conn.execute(select(F).where(F.c.network_id == port.network_id, F.c.id != fip.id)).all()
    if any((r.config or {}).get("target_address") == address for r in same_net):
        raise Conflict(
            f"Cannot associate floating IP {fip.listen_address} ({fip.id}) with port {port.id} using fixed IP "
            f"{address}, as that fixed IP already has a floating IP on external network {external_id}.",
            type="FloatingIPPortAlreadyAssociated",
        )
    ips = {ip for _s, ip in floating_common.port_ips(tx.conn, port.id)}
    if any(s["target_address"] in ips for r in same_net for s in r.ports or []):
        raise bad(f"Cannot associate floating IP to port {port.id} because it already has a Port Forwarding binding")
    _write(tx, fip, port.network_id, {**_user_config(fip), "target_address": address}, external_id)


def _user_config(fip: Any) -> dict[str, str]:
    return {k: v for k, v in (fip.config or {}).items() if k != "target_address"}


def _write(tx: Tx, fip: Any, network_id: str | None, config: dict[str, str], external_id: str,
           description: str | None = None) -> None:  # fmt: skip
    values: dict[str, Any] = {"network_id": network_id, "config": config, "floating_network_id": external_id}
    if description is not None:
        values["description"] = description
    if all(getattr(fip, k) == v for k, v in values.items()):
        return  # nothing changed: nothing to apply, no revision
    tx.conn.execute(update(F).where(F.c.id == fip.id).values(**values, updated_at=tx.now,
                                                             revision_number=F.c.revision_number + 1))  # fmt: skip
    tx.record("forward", fip.id, "update", fip.project_id)


# -- create/update/delete -----------------------------------------------------------------------


def create_floating_ips(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [parse(FloatingIpCreate, b) for b in bodies]
    with store.write() as tx:
        return [_reload(tx.conn, _create(tx, ctx, spec)) for spec in specs]


def _create(tx: Tx, ctx: Context, spec: FloatingIpCreate) -> str:
    if spec.fixed_ip_address and not spec.port_id:
        raise bad("fixed_ip_address cannot be specified without a port_id")
    if spec.floating_ip_address is not None and not ctx.is_admin:
        raise disallowed("create_floatingip:floating_ip_address")
    external = networks.get_visible(tx.conn, ctx, spec.floating_network_id)
    if not external.router_external:
        raise bad(f"Network {external.id} is not a valid external network")
    subnets = _ipv4_subnets(tx.conn, external.id)
    if not subnets:
        raise bad(f"Network {external.id} does not contain any IPv4 subnet")
    if spec.subnet_id is not None:
        subnets = [s for s in subnets if s.id == spec.subnet_id]
        if not subnets:
            raise bad(f"Subnet {spec.subnet_id} is not an IPv4 subnet of network {external.id}")
    project = common.owner_project(ctx, spec.project_id or spec.tenant_id, "create_floatingip")
    quotas.enforce(tx, project, "floatingip", 1)
    if spec.port_id is not None:  # every forward writer locks the internal network before the uplink
        uplinks.lock_networks(tx.conn, {common.get_row(tx.conn, P, "port", spec.port_id, ctx).network_id})
    uplinks.lock_networks(tx.conn, {external.id})
    if spec.floating_ip_address is not None:
        _check_address(tx.conn, ctx, subnets, spec.floating_ip_address)
        address = spec.floating_ip_address
    else:
        address = _pick(tx.conn, external.id, subnets)
    row = {"id": common.new_id(), "network_id": None, "floating_network_id": external.id, "listen_address": address,
           "description": spec.description, "config": {}, "ports": [], "project_id": project, "created_at": tx.now,
           "updated_at": tx.now, "revision_number": 0, "origin": forward_targets.FLOATINGIP}  # fmt: skip
    try:
        tx.conn.execute(insert(F).values(**row))
    except IntegrityError:  # taken by a forward of another uplink meanwhile (listen addresses are unique)
        raise Conflict(f"IP address {address} already allocated.", type="IpAddressAlreadyAllocated") from None
    tx.record("forward", row["id"], "create", project)
    if spec.tags:
        common.set_tags(tx.conn, row["id"], spec.tags)
    if spec.port_id is not None:
        fip = tx.conn.execute(select(F).where(F.c.id == row["id"])).one()
        _associate(tx, ctx, fip, external.id, spec.port_id, spec.fixed_ip_address)
    return str(row["id"])


def update_floating_ip(store: Store, ctx: Context, fip_id: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = parse(FloatingIpUpdate, body)
    given = spec.model_fields_set
    with store.write() as tx:
        fip = get_row(tx.conn, ctx, fip_id)
        external = fip.floating_network_id or external_of(tx.conn, fip)
        if spec.fixed_ip_address is not None and not spec.port_id:
            raise bad("fixed_ip_address cannot be specified without a port_id")
        if spec.description is not None:
            _write(tx, fip, fip.network_id, fip.config or {}, external, spec.description)
            fip = get_row(tx.conn, ctx, fip_id)
        current = floating_common.fip_dicts(tx.conn, [fip])[0]
        if "port_id" in given and spec.port_id is None:  # {"port_id": null}: disassociate
            config = _user_config(fip)
            _write(tx, fip, forward_targets.kept_network(fip, bool(fip.ports or config)), config, external)
        elif spec.port_id is not None and (
            spec.port_id != current["port_id"] or spec.fixed_ip_address not in (None, current["fixed_ip_address"])
        ):
            _associate(tx, ctx, fip, external, spec.port_id, spec.fixed_ip_address)
        return _reload(tx.conn, fip_id)


def external_of(conn: Connection, fip: Any) -> str:
    router = uplinks.router_of(conn, fip.network_id) if fip.network_id else None
    if router is None:
        raise Conflict(f"Floating IP {fip.id} has no external network (its network has no uplink)",
                       type="FloatingIPNoExternalNetwork")  # fmt: skip
    return router[1]


def delete_floating_ip(store: Store, ctx: Context, fip_id: str) -> None:
    with store.write() as tx:
        fip = get_row(tx.conn, ctx, fip_id)
        if fip.ports:
            raise Conflict(f"Floating IP {fip.id} in use by Port Forwarding resources.",
                           type="FipInUseByPortForwarding")  # fmt: skip
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == fip.id))
        tx.conn.execute(delete(F).where(F.c.id == fip.id))
        tx.record("forward", fip.id, "delete", fip.project_id)

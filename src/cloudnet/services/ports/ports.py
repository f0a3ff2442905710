"""The port resource's operations: list, show, create (atomic in bulk), update and delete, each in its own
transaction, and the in-transaction forms other services use for the ports they make (routers, instances,
pools, metadata)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, or_, select

from cloudnet.errors import BadRequest, Conflict, disallowed
from cloudnet.services import cache, common
from cloudnet.services.context import Context
from cloudnet.services.forwards import floating_common, forward_deps, forward_targets
from cloudnet.services.networks import single_host
from cloudnet.services.networks.ipam import SubnetInfo
from cloudnet.services.ports import port_policy, trunk_rules
from cloudnet.services.ports.port_create import Creator, Plan
from cloudnet.services.ports.port_specs import (
    ROUTER_INTERFACE,
    ROUTER_OWNERS,
    FixedIp,
    PortCreate,
    PortUpdate,
    reject_read_only,
)
from cloudnet.services.ports.port_views import list_page, load, to_dicts
from cloudnet.services.qos import policies as qos_policies
from cloudnet.services.query import ListQuery, Page
from cloudnet.services.security import port_security
from cloudnet.services.validation import parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

P = t.ports
A = t.ip_allocations
PSG = t.port_security_groups


def list_ports(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        return list_page(conn, ctx, q)


def get_port(store: Store, ctx: Context, port_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return to_dicts(conn, [common.get_row(conn, P, "port", port_id, ctx)])[0]


def create_in_tx(tx: Tx, ctx: Context, specs: list[PortCreate], *, quota: bool = True) -> list[str]:
    """Create ports for a caller inside `tx`; `quota` False for the ports cloudnet makes for itself (a router's
    interface and gateway, a network's metadata port), which Neutron does not check either."""
    creator = Creator(tx, ctx, quota=quota)
    plans = [creator.plan(s) for s in specs]
    creator.write(plans)
    return [p.row["id"] for p in plans]


def create_ports(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for b in bodies:
        reject_read_only(b, "POST")
    specs = [parse(PortCreate, b) for b in bodies]
    for spec in specs:
        port_policy.check_binding(ctx, spec.model_fields_set, "create")
    with store.write() as tx:
        creator = Creator(tx, ctx)
        plans = [creator.plan(s) for s in specs]
        for p in plans:
            row = p.row
            port_policy.check(tx.conn, ctx, row["device_owner"], row["device_id"], row["project_id"], p.network)
        creator.write(plans)
        if _check_hosts(tx, [p.row for p in plans]):
            return load(tx.conn, [p.row["id"] for p in plans])  # (some bindings refused: as stored now)
        return creator.results(plans)


def _check_hosts(tx: Tx, rows: list[dict[str, Any]]) -> bool:
    """The single-host rule for ports made bound to a host (services/networks/single_host.py); whether any was
    refused."""
    by_host: dict[str, list[str]] = {}
    for row in rows:
        if row["host_id"]:
            by_host.setdefault(row["host_id"], []).append(row["id"])
    return any([single_host.check_bindings(tx, ids, host) for host, ids in by_host.items()])


# -- updating and deleting ----------------------------------------------------------------------


def update_port(store: Store, ctx: Context, port_id: str, body: dict[str, Any]) -> dict[str, Any]:
    reject_read_only(body, "PUT")
    if isinstance(body, dict) and "network_id" in body:
        raise BadRequest("Attribute 'network_id' not allowed in PUT")
    spec = parse(PortUpdate, body)
    with store.write() as tx:
        row = common.get_row(tx.conn, P, "port", port_id, ctx)  # (404 first for a port the caller cannot see)
        port_policy.check_binding(ctx, spec.model_fields_set, "update")
        if spec.device_owner is not None or spec.device_id is not None:
            owner = row.device_owner if spec.device_owner is None else spec.device_owner
            device = row.device_id if spec.device_id is None else spec.device_id
            port_policy.check(tx.conn, ctx, owner, device, row.project_id, cache.network(tx, row.network_id))
        # A router leg's change may move its network's uplink, which the network's forwards keep.
        leg = {row.network_id} if ROUTER_INTERFACE in (row.device_owner, spec.device_owner) else set()
        with forward_deps.links_kept(tx.conn, leg, f"Port {port_id} cannot be changed", "UplinkInUseByForward"):
            update_in_tx(tx, ctx, port_id, spec)
        if spec.host_id is not None and spec.host_id != row.host_id:
            single_host.check_bindings(tx, [port_id], spec.host_id)
        return load(tx.conn, [port_id])[0]


def update_in_tx(tx: Tx, ctx: Context, port_id: str, spec: PortUpdate, extra: dict[str, Any] | None = None) -> None:
    row = common.get_row(tx.conn, P, "port", port_id, ctx)
    given = spec.model_fields_set
    changes: dict[str, Any] = dict(extra or {})
    # What lives in other tables is compared before and after: a no-op update bumps nothing.
    side = sorted({"fixed_ips", "security_groups", "allowed_address_pairs"} & given)
    before = {k: v for k, v in load(tx.conn, [port_id])[0].items() if k in side} if side else {}
    for key in ("name", "description", "admin_state_up", "device_id", "device_owner", "vnic_type", "host_id"):
        if key in given and getattr(spec, key) is not None:
            changes[key] = getattr(spec, key)
    if "profile" in given:
        changes["profile"] = spec.profile or {}
    if "mac_address" in given and spec.mac_address and spec.mac_address != row.mac_address:
        if not ctx.is_admin:
            raise disallowed("update_port:mac_address")
        if row.vif_type not in ("unbound", "binding_failed"):
            raise Conflict(f"Unable to complete operation on port {port_id}, port is already bound", type="PortBound")
        clash = tx.conn.execute(
            select(P.c.id).where(P.c.network_id == row.network_id, P.c.mac_address == spec.mac_address)
        ).first()
        if clash:
            raise Conflict(
                f"Unable to complete operation for network {row.network_id}. "
                f"The mac address {spec.mac_address} is in use.",
                type="MacAddressInUse",
            )
        changes["mac_address"] = spec.mac_address
    if {"port_security_enabled", "security_groups", "allowed_address_pairs"} & given:
        mac = changes.get("mac_address", row.mac_address)
        changes.setdefault("port_security_enabled", port_security.update(tx, ctx, row, spec, mac))
    if "qos_policy_id" in given:
        changes["qos_policy_id"] = qos_policies.check_usable(tx, ctx, spec.qos_policy_id, port_id)
    if "fixed_ips" in given:
        _update_fixed_ips(tx, ctx, row, spec.fixed_ips or [], changes.get("device_owner", row.device_owner))
    after = {k: v for k, v in load(tx.conn, [port_id])[0].items() if k in side} if side else {}
    common.touch(tx, P, port_id, "port", row.project_id, changes, row=row, changed=after != before)


def _update_fixed_ips(tx: Tx, ctx: Context, row: Any, fixed: list[FixedIp], owner: str) -> None:
    creator = Creator(tx, ctx)
    requested = creator.requested_ips(row.network_id, fixed, owner)
    current = {
        (sid, ip) for sid, ip in tx.conn.execute(select(A.c.subnet_id, A.c.ip_address).where(A.c.port_id == row.id))
    }
    keep: set[tuple[str, str]] = set()
    new: list[tuple[SubnetInfo, str | None]] = []
    for subnet, ip in requested:
        if ip is not None and (subnet.id, ip) in current:
            keep.add((subnet.id, ip))
        elif ip is None and (held := next((c for c in current if c[0] == subnet.id and c not in keep), None)):
            keep.add(held)
        else:
            new.append((subnet, ip))
    forward_targets.release(tx, row.network_id, {ip for _sid, ip in current - keep})  # as when the port goes
    for sid, ip in current - keep:
        tx.conn.execute(delete(A).where(A.c.subnet_id == sid, A.c.ip_address == ip))
    network = creator.network(row.network_id)
    if any(ip for _subnet, ip in new) and not ctx.is_admin and network.project_id != row.project_id:
        raise disallowed("update_port:fixed_ips:ip_address")
    if new:
        plan = Plan(row={"id": row.id}, network=network, ips=new)
        creator.check_requested_free([plan])
        creator.allocate([plan])


def delete_port(store: Store, ctx: Context, port_id: str) -> None:
    with store.write() as tx:
        row = common.get_row(tx.conn, P, "port", port_id, ctx)
        # As Neutron: a router's port is refused only while that router exists (else it is an orphan).
        R = t.routers
        router = select(R.c.id).where(or_(R.c.id == row.device_id, R.c.gw_port_id == row.id))
        if row.device_owner in ROUTER_OWNERS and tx.conn.execute(router).first():
            raise Conflict(
                f"Port {port_id} cannot be deleted directly via the port API: has device owner {row.device_owner}.",
                type="ServicePortInUse",
            )
        delete_in_tx(tx, row)


def delete_in_tx(tx: Tx, row: Any) -> None:
    trunk_rules.port_deletable(tx.conn, row.id)  # (whoever deletes it: a trunk's ports stay while it does)
    # Its addresses go: floating IPs on them are disassociated (Neutron), forwards keep them (LXD).
    forward_targets.release(tx, row.network_id, {ip for _s, ip in floating_common.port_ips(tx.conn, row.id)})
    tx.conn.execute(delete(A).where(A.c.port_id == row.id))
    tx.conn.execute(delete(PSG).where(PSG.c.port_id == row.id))
    tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == row.id))
    tx.conn.execute(delete(P).where(P.c.id == row.id))
    tx.record("port", row.id, "delete", row.project_id)

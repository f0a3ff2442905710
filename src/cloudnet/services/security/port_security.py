"""Port security on ports, as Neutron's ML2 plugin has it: which ports have it, and what may go with it.

A port with port security off has neither security groups nor allowed address pairs (the dataplane filters
nothing on it and checks none of its addresses), so turning it off with either still attached is refused, and
so is attaching either to a port without it. A port that says nothing takes its network's setting; a port
whose device owner is network:* (router, DHCP, metadata: trusted) never has it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import delete, insert, select

from cloudnet.errors import BadRequest, Conflict, disallowed
from cloudnet.services import cache
from cloudnet.services.context import Context
from cloudnet.services.ports.port_policy import NETWORK_DEVICE
from cloudnet.services.security import address_pairs, security_groups
from cloudnet.services.security.address_pairs import Pair
from cloudnet.store import tables as t
from cloudnet.store.db import Tx

PSG = t.port_security_groups
# Attributes only the network's owner, the service role and admins may give a port (Neutron's policy): on
# someone else's shared network, a member's ports are filtered and checked, whatever the member would like.
OWNER_ONLY = ("port_security_enabled", "allowed_address_pairs")


def groups_need_port_security() -> BadRequest:
    return BadRequest(
        "Port security must be enabled and port must have an IP address in order to use security groups.",
        type="PortSecurityAndIPRequiredForSecurityGroups",
    )


def port_has_groups() -> Conflict:
    return Conflict(
        "Port has security group associated. Cannot disable port security or IP address until security group is "
        "removed.",
        type="PortSecurityPortHasSecurityGroup",
    )


def check_policy(ctx: Context, network: Any, given: Collection[str], action: str) -> None:
    """Refuse the OWNER_ONLY attributes in `given` unless the caller is an admin, the service role or the
    network's owner (Neutron's create_port/update_port:port_security_enabled and :allowed_address_pairs)."""
    if ctx.is_admin or ctx.is_service or network.project_id == ctx.project_id:
        return
    for name in OWNER_ONLY:
        if name in given:
            raise disallowed(f"{action}:{name}")


def for_new_port(network: Any, device_owner: str, requested: bool | None) -> bool:
    """Whether a new port has port security: never for trusted owners, else as asked, else its network's."""
    if device_owner.startswith(NETWORK_DEVICE):
        return False
    return bool(network.port_security_enabled) if requested is None else requested


def check_new_port(enabled: bool, groups: list[str] | None, pairs: list[Pair]) -> None:
    """A new port without port security asks for no pairs (409) and no groups (400), in Neutron's order."""
    if enabled:
        return
    if pairs:
        raise address_pairs.need_port_security()
    if groups:
        raise groups_need_port_security()


def update(tx: Tx, ctx: Context, row: Any, spec: Any, mac: str) -> bool:
    """Apply a port update's port_security_enabled, security_groups and allowed_address_pairs (those given, in
    `spec.model_fields_set`) to the port `row` whose MAC is now `mac`; the port's port security afterwards."""
    given = spec.model_fields_set
    check_policy(ctx, cache.network(tx, row.network_id), given, "update_port")
    enabled = bool(row.port_security_enabled)
    if "port_security_enabled" in given and spec.port_security_enabled is not None:
        enabled = spec.port_security_enabled
    pairs = address_pairs.parse(spec.allowed_address_pairs) if "allowed_address_pairs" in given else None
    # Neutron: a null list is an empty one.
    groups = (spec.security_groups or []) if "security_groups" in given else None
    current = [r[0] for r in tx.conn.execute(select(PSG.c.security_group_id).where(PSG.c.port_id == row.id))]
    if not enabled:
        if pairs or (pairs is None and address_pairs.exist(tx.conn, row.id)):
            raise address_pairs.need_port_security()
        if groups:
            raise groups_need_port_security()
        if groups is None and current:
            raise port_has_groups()
    if pairs is not None:
        address_pairs.replace(tx.conn, row.id, address_pairs.resolve(pairs, mac))
    if groups is not None:
        _set_groups(tx, ctx, row, groups, current)
    return enabled


def _set_groups(tx: Tx, ctx: Context, row: Any, requested: list[str], current: Collection[str]) -> None:
    target = security_groups.check_usable(tx.conn, ctx, requested, row.project_id)
    if set(target) != set(current):
        tx.conn.execute(delete(PSG).where(PSG.c.port_id == row.id))
        if target:
            tx.conn.execute(insert(PSG), [{"port_id": row.id, "security_group_id": sg} for sg in target])

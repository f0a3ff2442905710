"""Who may give a port which device owner, and on whose behalf: Neutron's port policy, checked where a request
sets `device_owner`/`device_id` (port create and update through the API; cloudnet's own callers, which make
router, gateway, metadata and pool ports, are trusted and do not come through here).

- `network:*` owners (routers, DHCP, metadata) are for admins, the service role and the network's owner
  (Neutron's `create_port:device_owner`: "not rule:network_device or rule:admin_or_network_owner").
- A router port's `device_id` must name a router of the port's own project (Neutron's
  `_enforce_device_owner_not_router_intf_or_device_id`: DeviceIDNotOwnedByTenant), so nobody can hang a leg of
  their network into someone else's router.
- The owner marking a port as ready in a port pool is cloudnet's own: nobody sets it through the API.
- `binding:host_id` and `binding:profile` say where and how a port is plugged: the runtime's (the service role) or
  an admin's to set (Neutron's `create_port:binding:host_id` / `binding:profile`); a member's port is bound by
  cloudnet when an instance or a pool takes it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from cloudnet.errors import Conflict, Forbidden, InvalidInput
from cloudnet.services.context import Context
from cloudnet.services.networks.networks import POOL_FREE_OWNER
from cloudnet.services.ports.owners import ROUTER_GATEWAY, ROUTER_INTERFACE
from cloudnet.store import tables as t

NETWORK_DEVICE = "network:"
# Neutron's ROUTER_INTERFACE_OWNERS, and the gateway, which names its router in device_id too.
ROUTER_OWNERS = (ROUTER_INTERFACE, "network:router_interface_distributed", "network:ha_router_replicated_interface",
                 ROUTER_GATEWAY)  # fmt: skip


BINDING_FIELDS = {"host_id": "binding:host_id", "profile": "binding:profile"}


def check_binding(ctx: Context, given: set[str], verb: str) -> None:
    """Refuse binding attributes from a caller that may not set them (`given`: the body's fields, by name)."""
    if ctx.names_host_resources:
        return
    for field, attribute in BINDING_FIELDS.items():
        if field in given:
            raise Forbidden(f"(rule:{verb}_port:{attribute}) is disallowed by policy")


def check(conn: Connection, ctx: Context, owner: str, device_id: str, project_id: str, network: Any) -> None:
    """Refuse a `device_owner`/`device_id` pair the caller may not give a port of `project_id` on `network`."""
    if owner == POOL_FREE_OWNER:
        raise InvalidInput(f"device_owner {POOL_FREE_OWNER} is reserved for ready pool ports")
    if ctx.is_admin:
        return
    if owner.startswith(NETWORK_DEVICE) and not (ctx.is_service or network.project_id == ctx.project_id):
        raise Forbidden(
            f"(rule:create_port:device_owner) is disallowed by policy: only admins and the network's owner may "
            f"give a port the device owner {owner}"
        )
    if owner in ROUTER_OWNERS and device_id:
        router = conn.execute(select(t.routers.c.project_id).where(t.routers.c.id == device_id)).first()
        if router is not None and router.project_id != project_id:
            raise Conflict(
                f"The following device_id {device_id} is not owned by your tenant or matches another tenants router.",
                type="DeviceIDNotOwnedByTenant",
            )

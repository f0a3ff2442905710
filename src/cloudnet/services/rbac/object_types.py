"""The object types RBAC policies apply to: one entry each, all the policies' API needs to know of it.

A new type (address_scope, subnetpool, qos_policy, ...) is one `ObjectType` added to TYPES: its table (rows with
`id` and `project_id`), its actions, who depends on it through a policy, and, when the object has a plain `shared`
column, that column (kept equal to "a wildcard access_as_shared policy exists", as Neutron derives it). Its own
service then, with rbac/grants.py:
- makes the wildcard policy where it is created with `shared: true` (`grants.insert(..., grants.WILDCARD)`), and
  moves it when `shared` changes (`grants.wildcard`; turning it off checked first with policies.check_unshare, or
  with grants.check_unshare and the type's dependents where importing policies.py would close a circle, as for QoS
  policies: networks.py, which this module imports, imports qos/policies.py);
- lists and shows what `grants.visible(table, type, ctx, (grants.SHARED,), table.c.shared.is_(True))` lets the
  caller see, `shared` as `row.shared or row.id in grants.shared_with(...)` (what Neutron shows: to whom asks);
- lets a project use another's object (a pool for a subnet, a scope for a pool, a QoS policy on a port or network)
  when `grants.shared_with(conn, type, [id], project)` says so;
- removes the object's policies with it (`grants.remove_all`);
and api/extensions.py advertises its alias (rbac-address-scope, rbac-subnetpool) beside rbac-security-groups
(qos_policy is Neutron's base rbac-policies').
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Column, Connection, Table, select

from cloudnet.services import common
from cloudnet.services.networks.networks import POOL_FREE_OWNER, drop_unusable_ready_ports, external_in_use
from cloudnet.services.qos.policies import users as qos_users
from cloudnet.services.rbac import grants
from cloudnet.store import tables as t
from cloudnet.store import tables_qos as tq
from cloudnet.store import tables_subnetpools as tsp
from cloudnet.store.db import Tx

# (connection, object id) -> the projects that use the object (a policy's removal may not leave one without access)
Dependents = Callable[[Connection, str], set[str]]


@dataclass(frozen=True)
class ObjectType:
    name: str  # the API's object_type
    table: Table
    kind: str  # its resource name: errors.not_found's kind, and the resource of the update event a policy records
    actions: tuple[str, ...]  # in Neutron's order (its error message lists them)
    dependents: Mapping[str, Dependents]  # action -> who uses the object through a policy of that action
    alias: str  # the extension that brings it ("rbac-policies" for the types Neutron's own extension has)
    owned_words: str = "objects"  # "Only admins can manipulate policies on <owned_words> they do not own"
    shared_column: Column[Any] | None = None  # mirror of the wildcard access_as_shared policy
    # Neutron's "Details:" of RbacPolicyInUse, by action: (object id, target) -> text
    in_use: Mapping[str, Callable[[str, str], str]] = field(default_factory=dict)

    def details(self, action: str, object_id: str, target: str) -> str:
        words = self.in_use.get(action)
        return words(object_id, target) if words else f"project_id={target}"

    def after_change(self, tx: Tx, row: Any) -> None:
        """A policy of the object was made, changed or removed: its mirror columns follow, and the object gets an
        update event (its revision bumped, as Neutron's `revises_on_change`; caches of it dropped)."""
        values: dict[str, Any] = {}
        if self.shared_column is not None:
            stars = grants.targets(tx.conn, self.name, row.id, grants.SHARED)
            values[self.shared_column.name] = grants.WILDCARD in stars
        if self.name == "network":
            external = bool(grants.targets(tx.conn, "network", row.id, grants.EXTERNAL))
            if row.router_external and not external and _gateway_routers(tx.conn, row.id):
                raise external_in_use(row.id)  # its last access_as_external policy: it would stop being external
            values["router_external"] = external
        common.touch(tx, self.table, row.id, self.kind, row.project_id, values, changed=True)
        if self.name == "network":
            drop_unusable_ready_ports(tx, row.id)


P, R = t.ports, t.routers
ROUTER_GATEWAY = "network:router_gateway"


def _port_projects(conn: Connection, network_id: str) -> set[str]:
    # (a router's gateway port is on the network through access_as_external, not through sharing; ready pool ports
    # are nobody's in use: they go with the access, networks.drop_unusable_ready_ports)
    not_using = P.c.device_owner.not_in((ROUTER_GATEWAY, POOL_FREE_OWNER))
    stmt = select(P.c.project_id).where(P.c.network_id == network_id, not_using).distinct()
    return {r.project_id for r in conn.execute(stmt)}


def _gateway_routers(conn: Connection, network_id: str) -> set[str]:
    """The projects of the routers whose gateway is on the network."""
    gateways = select(P.c.id).where(P.c.network_id == network_id, P.c.device_owner == ROUTER_GATEWAY)
    return {r.project_id for r in conn.execute(select(R.c.project_id).where(R.c.gw_port_id.in_(gateways)))}


def _group_users(conn: Connection, sg_id: str) -> set[str]:
    PSG = t.port_security_groups
    stmt = select(P.c.project_id).join(PSG, PSG.c.port_id == P.c.id).where(PSG.c.security_group_id == sg_id)
    return {r.project_id for r in conn.execute(stmt.distinct())}


def _pool_users(conn: Connection, pool_id: str) -> set[str]:
    """The projects with subnets from the pool."""
    S = t.subnets
    return {r.project_id for r in conn.execute(select(S.c.project_id).where(S.c.subnetpool_id == pool_id).distinct())}


def _scope_users(conn: Connection, scope_id: str) -> set[str]:
    """The projects with pools in the scope."""
    SP = tsp.subnetpools
    stmt = select(SP.c.project_id).where(SP.c.address_scope_id == scope_id).distinct()
    return {r.project_id for r in conn.execute(stmt)}


def _sharing_in_use(object_id: str, _target: str) -> str:
    return f"Unable to reconfigure sharing settings for network {object_id}. Multiple projects are using it."


def _external_in_use(_object_id: str, _target: str) -> str:
    return "There are routers attached to this network that depend on this policy for access."


TYPES: dict[str, ObjectType] = {
    "network": ObjectType(
        "network", t.networks, "network", (grants.SHARED, grants.EXTERNAL),
        {grants.SHARED: _port_projects, grants.EXTERNAL: _gateway_routers}, "rbac-policies", "networks",
        t.networks.c.shared, {grants.SHARED: _sharing_in_use, grants.EXTERNAL: _external_in_use},
    ),
    "security_group": ObjectType(
        "security_group", t.security_groups, "security_group", (grants.SHARED,), {grants.SHARED: _group_users},
        "rbac-security-groups",
    ),
    # (Neutron's object_type names; qos_policy came with the base extension, the other two with their own)
    "subnetpool": ObjectType(
        "subnetpool", tsp.subnetpools, "subnetpool", (grants.SHARED,), {grants.SHARED: _pool_users},
        "rbac-subnetpool", shared_column=tsp.subnetpools.c.shared,
    ),
    "address_scope": ObjectType(
        "address_scope", tsp.address_scopes, "address_scope", (grants.SHARED,), {grants.SHARED: _scope_users},
        "rbac-address-scope", shared_column=tsp.address_scopes.c.shared,
    ),
    "qos_policy": ObjectType(
        "qos_policy", tq.qos_policies, "qos_policy", (grants.SHARED,), {grants.SHARED: qos_users},
        "rbac-policies", shared_column=tq.qos_policies.c.shared,
    ),
}  # fmt: skip

"""/v2.0/rbac-policies: Neutron's RBAC policies (neutron/db/rbac_db_mixin.py, neutron/objects/rbac_db.py).

A policy is owned by the project that made it (only that project, and admins, see and change it: its target does
not see it). Only the object's owner or an admin may make one, and only an admin a wildcard ("*") one. A change
that would take access from a project still using the object (its ports on the network, its router's gateway, its
ports in the group) is refused with Neutron's RbacPolicyInUse. Neutron's words, with one difference: where Neutron
wraps a refusal in its callback's name ("Callback neutron...validate_...--<hash> failed with ..."), the reason
is given alone, the name and hash being Neutron's process internals.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator
from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError

from cloudnet.errors import Conflict, InvalidInput, NotFound, disallowed, not_found
from cloudnet.services import common, quotas
from cloudnet.services.context import Context
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page
from cloudnet.services.rbac import grants
from cloudnet.services.rbac.object_types import TYPES, ObjectType
from cloudnet.services.validation import Body, check_uuid, is_uuid, parse
from cloudnet.store.db import Store, Tx
from cloudnet.store.tables_rbac import rbac_policies as RB

ATTRS: dict[str, Attr] = {
    "id": Attr(RB.c.id),
    "project_id": Attr(RB.c.project_id),
    "tenant_id": Attr(RB.c.project_id),
    "object_type": Attr(RB.c.object_type),
    "object_id": Attr(RB.c.object_id),
    "action": Attr(RB.c.action),
    "target_tenant": Attr(RB.c.target_project),
    "target_project": Attr(RB.c.target_project),
}


def _target(value: str) -> str:
    """'*' or a project id: cloudnet's project ids are Keystone's or names (not only UUIDs, which Neutron wants)."""
    if value != grants.WILDCARD and (not value.strip() or not value.isprintable()):
        raise ValueError(f"'{value}' is not a valid target project ID; expected a project ID or '*'")
    return value


class PolicyCreate(Body):
    object_type: str = Field(max_length=255)
    object_id: str = Field(max_length=36)
    action: str = Field(max_length=255)
    target_tenant: str = Field(min_length=1, max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)

    _uuid = field_validator("object_id")(lambda v: check_uuid(v, "object_id"))
    _project = field_validator("target_tenant")(_target)


class PolicyUpdate(Body):
    target_tenant: str = Field(min_length=1, max_length=255)

    _project = field_validator("target_tenant")(_target)


def policy_dict(row: Any) -> dict[str, Any]:
    return {"id": row.id, "project_id": row.project_id, "tenant_id": row.project_id, "object_type": row.object_type,
            "object_id": row.object_id, "action": row.action, "target_tenant": row.target_project}  # fmt: skip


def _visible(ctx: Context) -> Any:
    return common.only_visible(select(RB), RB, ctx)


def _get(conn: Connection, ctx: Context, policy_id: str) -> Any:
    row = conn.execute(_visible(ctx).where(RB.c.id == policy_id)).first() if is_uuid(policy_id) else None
    if row is None:
        raise NotFound(f"RBAC policy of type unknown with ID {policy_id} not found", type="RbacPolicyNotFound")
    return row


def list_policies(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        rows, more = fetch_page(conn, RB, ATTRS, _visible(ctx), q, "rbac_policy")
        return Page([policy_dict(r) for r in rows], more)


def get_policy(store: Store, ctx: Context, policy_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return policy_dict(_get(conn, ctx, policy_id))


def create_policies(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [parse(PolicyCreate, b) for b in bodies]
    with store.write() as tx:
        rows = [_create(tx, ctx, spec) for spec in specs]
        return [policy_dict(_row(tx.conn, r["id"])) for r in rows]


def _create(tx: Tx, ctx: Context, spec: PolicyCreate) -> dict[str, Any]:
    otype = TYPES.get(spec.object_type.strip().lower())
    if otype is None:
        raise InvalidInput(f"'{spec.object_type}' is not a valid RBAC object type")
    if spec.target_tenant == grants.WILDCARD and not ctx.is_admin:
        raise disallowed("create_rbac_policy:target_tenant")
    owner = common.owner_project(ctx, spec.project_id or spec.tenant_id, "create_rbac_policy")
    obj = _object(tx.conn, ctx, otype, spec.object_id)
    if spec.action not in otype.actions:
        raise InvalidInput(
            f"Invalid action '{spec.action}' for object type '{otype.name}'. Valid actions: {otype.actions!r}"
        )
    quotas.enforce(tx, owner, "rbac_policy", 1)
    try:
        with tx.conn.begin_nested():
            row = grants.insert(tx, otype.name, obj.id, owner, spec.action, spec.target_tenant)
    except IntegrityError:
        raise Conflict("An RBAC policy already exists with those values.", type="DuplicateRbacPolicy") from None
    otype.after_change(tx, obj)
    tx.record("rbac_policy", row["id"], "create", owner)
    return row


def _object(conn: Connection, ctx: Context, otype: ObjectType, object_id: str) -> Any:
    """The object a policy is made or changed on, which the caller must own (or be an admin). As in Neutron a
    refusal is a 400 (its callbacks' failures are InvalidInput); an object the caller cannot see reads as one
    that does not exist."""
    row = conn.execute(select(otype.table).where(otype.table.c.id == object_id)).first()
    if row is None or not (ctx.is_admin or row.project_id == ctx.project_id or _sees(conn, ctx, otype, row.id)):
        raise InvalidInput(not_found(otype.kind, object_id).message)
    if not (ctx.is_admin or row.project_id == ctx.project_id):
        raise InvalidInput(f"Only admins can manipulate policies on {otype.owned_words} they do not own")
    return row


def _sees(conn: Connection, ctx: Context, otype: ObjectType, object_id: str) -> bool:
    return bool(grants.actions_for(conn, otype.name, object_id, ctx.project_id))


def update_policy(store: Store, ctx: Context, policy_id: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = parse(PolicyUpdate, body)
    with store.write() as tx:
        row = _get(tx.conn, ctx, policy_id)
        if spec.target_tenant == grants.WILDCARD and not ctx.is_admin:
            raise disallowed("update_rbac_policy:target_tenant")
        if spec.target_tenant == row.target_project:
            return policy_dict(row)
        otype = TYPES[row.object_type]
        obj = _owned_object(tx.conn, ctx, otype, row)
        _check_losing(tx.conn, otype, obj, row, spec.target_tenant)
        try:
            with tx.conn.begin_nested():
                tx.conn.execute(RB.update().where(RB.c.id == row.id).values(target_project=spec.target_tenant))
        except IntegrityError:
            raise Conflict("An RBAC policy already exists with those values.", type="DuplicateRbacPolicy") from None
        otype.after_change(tx, obj)
        tx.record("rbac_policy", row.id, "update", row.project_id)
        return policy_dict(_row(tx.conn, row.id))


def delete_policy(store: Store, ctx: Context, policy_id: str) -> None:
    with store.write() as tx:
        row = _get(tx.conn, ctx, policy_id)
        otype = TYPES[row.object_type]
        obj = _locked(tx.conn, otype, row.object_id)
        _check_losing(tx.conn, otype, obj, row, None)
        tx.conn.execute(RB.delete().where(RB.c.id == row.id))
        otype.after_change(tx, obj)
        tx.record("rbac_policy", row.id, "delete", row.project_id)


def _owned_object(conn: Connection, ctx: Context, otype: ObjectType, policy: Any) -> Any:
    obj = _locked(conn, otype, policy.object_id)
    if not (ctx.is_admin or obj.project_id == ctx.project_id):  # (Neutron: BEFORE_UPDATE's failure is InUse)
        words = f"Only admins can manipulate policies on {otype.owned_words} they do not own"
        raise grants.in_use(policy.object_id, words)
    return obj


def _locked(conn: Connection, otype: ObjectType, object_id: str) -> Any:
    """The object a policy is taken from, locked until commit: on PostgreSQL a port (or anything referring to it)
    being added meanwhile holds a key-share lock on it, so the check that follows waits for it and sees it."""
    return conn.execute(select(otype.table).where(otype.table.c.id == object_id).with_for_update()).one()


def _check_losing(conn: Connection, otype: ObjectType, obj: Any, policy: Any, new_target: str | None) -> None:
    """Refuse to take access from a project that still uses the object through this policy (Neutron's
    `_validate_rbac_policy_delete` and its network variants): the policy is removed (`new_target` None) or moved."""
    target = policy.target_project
    if target == obj.project_id:  # a self-share grants nothing its owner needs
        return
    keeping = grants.targets(conn, otype.name, obj.id, policy.action, but=policy.id) | {obj.project_id}
    if new_target is not None:
        keeping.add(new_target)
    if grants.WILDCARD in keeping:
        return
    dependents = otype.dependents.get(policy.action)
    users = dependents(conn, obj.id) if dependents else set()
    losing = users - keeping if target == grants.WILDCARD else users & {target}
    if losing:
        raise grants.in_use(obj.id, otype.details(policy.action, obj.id, target))


def check_unshare(conn: Connection, object_type: str, obj: Any) -> None:
    """`shared` turned off on an object of a registered type (its wildcard policy about to go, with
    `grants.wildcard(..., False)`): refused as that policy's removal would be (Neutron's update_shared)."""
    star = conn.execute(
        select(RB).where(
            RB.c.object_type == object_type,
            RB.c.object_id == obj.id,
            RB.c.action == grants.SHARED,
            RB.c.target_project == grants.WILDCARD,
        )
    ).first()
    if star is not None:
        _check_losing(conn, TYPES[object_type], obj, star, None)


def _row(conn: Connection, policy_id: str) -> Any:
    return conn.execute(select(RB).where(RB.c.id == policy_id)).one()

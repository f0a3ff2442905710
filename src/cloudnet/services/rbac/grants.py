"""What RBAC policies grant a project, for every place that checks ownership (networks, subnets, ports, pools,
security groups, router gateways, forwards): conditions for lists, checks for one object, and the writes of the
wildcard policies that `shared` and `router:external` stand for. The policies' own API is policies.py.

A grant is (object type, object id, action, target project or "*"). An object is the caller's when they own it,
and usable by them when a policy grants one of the actions asked to their project or to "*".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from sqlalchemy import Connection, Select, delete, or_, select
from sqlalchemy.sql import ColumnElement

from cloudnet.errors import Conflict, not_found
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.query import to_bool
from cloudnet.services.validation import is_uuid
from cloudnet.store.db import Tx
from cloudnet.store.tables_rbac import rbac_policies as RB

SHARED = "access_as_shared"
EXTERNAL = "access_as_external"
WILDCARD = "*"


def granted_ids(object_type: str, project_id: str, actions: Collection[str] = (SHARED,)) -> Select[Any]:
    """Ids of the objects of `object_type` that policies open to `project_id` for one of `actions`."""
    return select(RB.c.object_id).where(
        RB.c.object_type == object_type, RB.c.action.in_(actions), RB.c.target_project.in_((WILDCARD, project_id))
    )


def visible(table: Any, object_type: str, ctx: Context, actions: Collection[str] = (SHARED,),
            *extra: ColumnElement[bool]) -> ColumnElement[bool] | None:  # fmt: skip
    """Rows of `table` the caller owns or was granted one of `actions` on (None: every row, for admins);
    `extra`: more conditions that make a row visible (a network's `shared` column, the wildcard's mirror)."""
    if ctx.is_admin:
        return None
    return or_(table.c.project_id == ctx.project_id, *extra,
               table.c.id.in_(granted_ids(object_type, ctx.project_id, actions)))  # fmt: skip


def actions_for(conn: Connection, object_type: str, object_id: str, project_id: str) -> frozenset[str]:
    """The actions policies grant `project_id` (itself or through "*") on one object."""
    mine = RB.c.target_project.in_((WILDCARD, project_id))
    rows = conn.execute(select(RB.c.action).where(RB.c.object_type == object_type, RB.c.object_id == object_id, mine))
    return frozenset(r.action for r in rows)


def shared_with(conn: Connection, object_type: str, ids: Iterable[str], project_id: str) -> set[str]:
    """Which of `ids` are shared (access_as_shared) with `project_id` itself or with everyone: their `shared`."""
    out: set[str] = set()
    for chunk in common.chunks(list(ids), 5000):
        stmt = granted_ids(object_type, project_id).where(RB.c.object_id.in_(chunk))
        out.update(r.object_id for r in conn.execute(stmt))
    return out


def get_visible(conn: Connection, table: Any, object_type: str, ident: str, ctx: Context) -> Any:
    """`table`'s row `ident` when the caller owns it or it is shared with their project (404 otherwise)."""
    row = conn.execute(select(table).where(table.c.id == ident)).first() if is_uuid(ident) else None
    if row is None or not (ctx.is_admin or row.project_id == ctx.project_id
                           or shared_with(conn, object_type, [row.id], ctx.project_id)):  # fmt: skip
        raise not_found(object_type, ident)
    return row


def shared_filter(id_column: Any, object_type: str, ctx: Context) -> Any:
    """The `?shared=` filter, as Neutron reads it: shared with the caller's project or with everyone."""

    def condition(values: list[str]) -> ColumnElement[bool]:
        from_policies = id_column.in_(granted_ids(object_type, ctx.project_id))
        return from_policies if to_bool(values[0]) else ~from_policies  # (Neutron reads the first value)

    return condition


def insert(tx: Tx, object_type: str, object_id: str, owner: str, action: str, target: str) -> dict[str, Any]:
    row = {"id": common.new_id(), "project_id": owner, "object_type": object_type, "object_id": object_id,
           "action": action, "target_project": target}  # fmt: skip
    tx.conn.execute(RB.insert().values(**row))
    return row


def wildcard(tx: Tx, object_type: str, object_id: str, owner: str, action: str, on: bool) -> None:
    """Make or remove the "*" policy of `action` (a network's `shared: true` and `router:external: true`)."""
    stmt = select(RB.c.id).where(*_of(object_type, object_id, action), RB.c.target_project == WILDCARD)
    exists = tx.conn.execute(stmt).first()
    if on and exists is None:
        insert(tx, object_type, object_id, owner, action, WILDCARD)
    elif not on and exists is not None:
        tx.conn.execute(delete(RB).where(RB.c.id == exists.id))


def remove_all(tx: Tx, object_type: str, object_id: str, action: str | None = None) -> None:
    """Remove the object's policies (of one action, or all of them: the object is going)."""
    conds = _of(object_type, object_id, action) if action else _of(object_type, object_id)
    tx.conn.execute(delete(RB).where(*conds))


def targets(conn: Connection, object_type: str, object_id: str, action: str, but: str | None = None) -> set[str]:
    """The projects (and "*") that policies of `action` on the object name, except the policy `but`."""
    stmt = select(RB.c.target_project).where(*_of(object_type, object_id, action))
    if but is not None:
        stmt = stmt.where(RB.c.id != but)
    return {r.target_project for r in conn.execute(stmt)}


def in_use(object_id: str, details: str) -> Conflict:
    """Neutron's RbacPolicyInUse: a policy's removal (or move) would take the object from a project using it."""
    return Conflict(
        f"RBAC policy on object {object_id} cannot be removed because other objects depend on it.\nDetails: {details}",
        type="RbacPolicyInUse",
    )


def check_unshare(conn: Connection, object_type: str, obj: Any, users: set[str]) -> None:
    """`shared` turned off on an object its `users` (projects) use: refused while one of them is neither its owner
    nor named by another access_as_shared policy (for the services that cannot reach policies.check_unshare)."""
    keeping = targets(conn, object_type, obj.id, SHARED) - {WILDCARD} | {obj.project_id}
    if users - keeping:
        raise in_use(obj.id, f"project_id={WILDCARD}")


def _of(object_type: str, object_id: str, action: str | None = None) -> list[ColumnElement[bool]]:
    conds = [RB.c.object_type == object_type, RB.c.object_id == object_id]
    if action is not None:
        conds.append(RB.c.action == action)
    return conds

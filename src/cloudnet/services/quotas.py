"""Quotas per project, as Neutron has them (the `quotas` and `quota_details` extensions).

A limit is the project's own (a row of `quotas`) or the server's default (`--quota RESOURCE=N`); -1 is unlimited.
A create checks its project's usage in its own transaction, after taking a lock that serialises creates of one
resource in one project: on PostgreSQL an upsert of the (project, resource) row of `quotas` (its row lock is held
until commit, so concurrent bulk creates count one after another and can never pass the limit together); SQLite
has one writer at a time, so its count is already exact. Usage is counted, not kept: what the database holds is
what the project uses, whatever path created or deleted it.

As in Neutron, the quota is checked where a request creates something for a project (the API's creates, an
instance's ports, a pool's refill), not for what cloudnet makes on its own (a router's interface and gateway
ports, a network's metadata port, a project's default security group); what a project holds counts in full.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.expression import CTE, ScalarSelect

from cloudnet.errors import BadRequest, Conflict, disallowed
from cloudnet.services.context import Context
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.store.tables_rbac import rbac_policies

Q = t.quotas
# Neutron's defaults are lower (network 10, port 50); these are the issue's, for a cloud of containers.
DEFAULTS: dict[str, int] = {
    "network": 100,
    "subnet": 100,
    "port": 500,
    "router": 10,
    "security_group": 10,
    "security_group_rule": 100,
    "floatingip": 50,
    "forward": 50,  # a network forward's listen address (an external address, like a floating IP)
    "rbac_policy": 100,  # policies a project owns (Neutron: 10)
}
MAX_LIMIT = 2**31 - 1
# Ports cloudnet makes for itself on a project's behalf count for nobody (Neutron's gateway ports have no project).
UNCOUNTED_PORT_OWNERS = ("network:router_gateway", "network:distributed")


class OverQuota(Conflict):
    type = "OverQuota"

    def __init__(self, resources: list[str]) -> None:
        super().__init__(f"Quota exceeded for resources: {resources!r}.")


# resource -> (table, extra conditions): what a project uses of it. A floating IP is a network forward (one model:
# services/forwards/floating_common.py), so both quotas count the project's forwards.
USAGE: dict[str, tuple[Any, tuple[ColumnElement[bool], ...]]] = {
    "network": (t.networks, ()),
    "subnet": (t.subnets, ()),
    "port": (t.ports, (t.ports.c.device_owner.not_in(UNCOUNTED_PORT_OWNERS),)),
    "router": (t.routers, ()),
    "security_group": (t.security_groups, ()),
    "security_group_rule": (t.security_group_rules, ()),
    "forward": (t.forwards, ()),
    "floatingip": (t.forwards, ()),
    "rbac_policy": (rbac_policies, ()),
}

_defaults: weakref.WeakKeyDictionary[Store, dict[str, int]] = weakref.WeakKeyDictionary()


def configure(store: Store, overrides: Mapping[str, int]) -> None:
    """The default limits of this server (DEFAULTS, with `--quota` overrides)."""
    _defaults[store] = {**DEFAULTS, **check_limits(dict(overrides))}


def defaults(store: Store) -> dict[str, int]:
    return dict(_defaults.get(store, DEFAULTS))


def check_limits(values: Mapping[str, Any]) -> dict[str, int]:
    """Limits from a request or the command line: known resources, integers from -1 (unlimited) up."""
    unknown = sorted(k for k in values if k not in DEFAULTS)
    if unknown:
        raise BadRequest(f"Unrecognized attribute(s) '{', '.join(unknown)}'")
    out: dict[str, int] = {}
    for key, value in values.items():
        if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 12:
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or not -1 <= value <= MAX_LIMIT:
            raise BadRequest(f"Invalid input for {key}. Reason: '{value}' is not an integer from -1 to {MAX_LIMIT}.")
        out[key] = value
    return out


# -- enforcement ---------------------------------------------------------------------------------


def _upsert(project_id: Any, resource: str) -> Any:
    """PostgreSQL: the (project, resource) row, made if missing, locked until commit; RETURNING its limit."""
    stmt = postgresql.insert(Q).values(project_id=project_id, resource=resource, limit=None)
    stmt = stmt.on_conflict_do_update(index_elements=[Q.c.project_id, Q.c.resource], set_={"limit": Q.c.limit})
    return stmt.returning(Q.c.limit)


def _stored(conn: Connection, project_id: str, resource: str) -> int | None:
    """The project's own limit of `resource` (None: the server's default), its row locked on PostgreSQL."""
    if conn.dialect.name == "postgresql":
        return conn.execute(_upsert(project_id, resource)).scalar()
    return conn.execute(select(Q.c.limit).where(Q.c.project_id == project_id, Q.c.resource == resource)).scalar()


def stored_limit(dialect: str, project_id: Any, resource: str) -> tuple[CTE | None, ScalarSelect[Any]]:
    """What `_stored` reads, as a column for a statement of the caller's (a round trip saved; `enforce_read`
    then checks it): on PostgreSQL with the upsert that locks the row, a CTE to add to that statement. The
    statement must lock nothing else (the order of two locks taken in one statement is the planner's).
    `project_id`: a value, or a bindparam of a statement built once."""
    if dialect == "postgresql":
        cte = _upsert(project_id, resource).cte("quota_row")
        return cte, select(cte.c.limit).scalar_subquery()
    return None, select(Q.c.limit).where(Q.c.project_id == project_id, Q.c.resource == resource).scalar_subquery()


def _used(conn: Connection, project_id: str, resource: str, at_most: int | None = None) -> int:
    if resource not in USAGE:
        return 0
    table, extra = USAGE[resource]
    inner = select(table.c.id).where(table.c.project_id == project_id, *extra)
    if at_most is not None:  # counting stops past the limit: a create costs the same at 10 or 100,000 ports
        inner = inner.limit(at_most)
    return int(conn.execute(select(func.count()).select_from(inner.subquery())).scalar_one())


def enforce(tx: Tx, project_id: str, resource: str, adding: int) -> None:
    """Refuse (409 OverQuota) a create of `adding` more `resource`s that would take the project past its limit."""
    if adding > 0:
        enforce_read(tx, project_id, resource, adding, _stored(tx.conn, project_id, resource))


def enforce_read(tx: Tx, project_id: str, resource: str, adding: int, stored: int | None) -> None:
    """`enforce`, with the project's own limit already read (and locked) in this transaction (`stored_limit`)."""
    if stored is None:
        assert tx.store is not None
        limit = defaults(tx.store)[resource]
    else:
        limit = int(stored)
    if adding <= 0 or limit < 0:
        return
    # (Counted in a statement of its own, after the row lock: it sees what the creates it waited for committed.)
    if adding > limit or _used(tx.conn, project_id, resource, limit - adding + 1) + adding > limit:
        raise OverQuota([resource])


# -- the API ----------------------------------------------------------------------------------------


def _may_read(ctx: Context, project_id: str) -> None:
    if not ctx.is_admin and project_id != ctx.project_id:
        raise disallowed("get_quota")


def _admin(ctx: Context, action: str) -> None:
    if not ctx.is_admin:
        raise disallowed(action)


def _check_project(project_id: str) -> str:
    if not project_id or len(project_id) > 255 or "\x00" in project_id:
        raise BadRequest("Invalid input for project_id. Reason: 1 to 255 characters, no NUL.")
    return project_id


def _own(conn: Connection, project_id: str) -> dict[str, int]:
    rows = conn.execute(select(Q.c.resource, Q.c.limit).where(Q.c.project_id == project_id, Q.c.limit.is_not(None)))
    return {r: int(v) for r, v in rows if r in DEFAULTS}


def get_quota(store: Store, ctx: Context, project_id: str) -> dict[str, int]:
    _may_read(ctx, _check_project(project_id))
    with store.read() as conn:
        return {**defaults(store), **_own(conn, project_id)}


def get_details(store: Store, ctx: Context, project_id: str) -> dict[str, dict[str, int]]:
    _may_read(ctx, _check_project(project_id))
    with store.read() as conn:
        limits = {**defaults(store), **_own(conn, project_id)}
        return {r: {"limit": limit, "used": _used(conn, project_id, r), "reserved": 0} for r, limit in limits.items()}


def get_defaults(store: Store, ctx: Context, project_id: str) -> dict[str, int]:
    _may_read(ctx, _check_project(project_id))
    return defaults(store)


def list_quotas(store: Store, ctx: Context) -> list[dict[str, Any]]:
    """Projects with limits of their own (Neutron lists only those), each with all its limits."""
    _admin(ctx, "get_quota")
    with store.read() as conn:
        projects = [r[0] for r in conn.execute(
            select(Q.c.project_id).where(Q.c.limit.is_not(None)).distinct().order_by(Q.c.project_id))]  # fmt: skip
        out = []
        for project in projects:
            limits = {**defaults(store), **_own(conn, project)}
            out.append({**limits, "project_id": project, "tenant_id": project})
        return out


def update_quota(store: Store, ctx: Context, project_id: str, body: Any) -> dict[str, int]:
    _admin(ctx, "update_quota")
    _check_project(project_id)
    if not isinstance(body, dict) or not isinstance(body.get("quota"), dict):
        raise BadRequest("Unable to find 'quota' in request body")
    values = dict(body["quota"])
    check_limit = values.pop("check_limit", False)  # the quota-check-limit extension
    if not isinstance(check_limit, bool):
        raise BadRequest(f"Invalid input for check_limit. Reason: '{check_limit}' is not a boolean.")
    for key in ("project_id", "tenant_id"):
        if key in values and values.pop(key) != project_id:
            raise BadRequest(f"Invalid input for {key}. Reason: it must be the project of the URL.")
    changes = check_limits(values)
    with store.write() as tx:
        for resource, limit in changes.items():
            if check_limit and limit >= 0 and (used := _used(tx.conn, project_id, resource)) > limit:
                raise BadRequest(
                    f"Quota limit {limit} for {resource} must be greater than or equal to already used and reserved "
                    f"{used}.",
                    type="InvalidQuotaValue",
                )
            found = tx.conn.execute(
                update(Q).where(Q.c.project_id == project_id, Q.c.resource == resource).values(limit=limit)
            ).rowcount
            if not found:
                tx.conn.execute(insert(Q).values(project_id=project_id, resource=resource, limit=limit))
        if changes:
            tx.record("quota", project_id, "update", project_id)
        return {**defaults(store), **_own(tx.conn, project_id)}


def reset_quota(store: Store, ctx: Context, project_id: str) -> None:
    """Back to the defaults (Neutron's DELETE /v2.0/quotas/{project_id})."""
    _admin(ctx, "delete_quota")
    _check_project(project_id)
    with store.write() as tx:
        # Lock rows of PostgreSQL creates stay (limit NULL: the default), and a create waiting on one still works.
        tx.conn.execute(update(Q).where(Q.c.project_id == project_id).values(limit=None))
        tx.record("quota", project_id, "delete", project_id)

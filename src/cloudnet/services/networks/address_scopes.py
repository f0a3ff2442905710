"""Address scopes (Neutron's address-scope extension): a space of addresses in which subnet pools never overlap,
so routers route between its subnets without NAT (services/networks/subnetpools.py, the routers' dataplanes)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from sqlalchemy import Connection, delete, insert, select

from cloudnet.errors import BadRequest, Conflict, disallowed, not_found
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_bool, to_int
from cloudnet.services.rbac import grants
from cloudnet.services.validation import Body, is_uuid, parse
from cloudnet.store import tables as t
from cloudnet.store import tables_subnetpools as tsp
from cloudnet.store.db import Store

AS = tsp.address_scopes
RBAC = "address_scope"  # its RBAC object type (rbac/object_types.py, rbac-address-scope)

ATTRS: dict[str, Attr] = {
    **common.standard_attrs(AS),
    "ip_version": Attr(AS.c.ip_version, to_int),
    "shared": Attr(AS.c.shared, to_bool),
}


class ScopeCreate(Body):
    name: str = Field("", max_length=255)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    ip_version: Literal[4, 6]
    shared: bool = False


class ScopeUpdate(Body):
    name: str | None = Field(None, max_length=255)
    description: str | None = Field(None, max_length=255)
    shared: bool | None = None


def to_dicts(conn: Connection, rows: list[Any], ctx: Context) -> list[dict[str, Any]]:
    # `shared`: with everyone or with the caller's project (as Neutron shows it: to whom asks)
    shared_here = grants.shared_with(conn, RBAC, [r.id for r in rows if not r.shared], ctx.project_id)
    out = []
    for r in rows:
        d = common.standard_fields(r, None)
        del d["tags"]  # (Neutron's address scopes carry no tags)
        d.update({"ip_version": r.ip_version, "shared": r.shared or r.id in shared_here})
        out.append(d)
    return out


def _visible_stmt(ctx: Context) -> Any:
    cond = grants.visible(AS, RBAC, ctx, (grants.SHARED,), AS.c.shared.is_(True))
    return select(AS) if cond is None else select(AS).where(cond)


def usable(conn: Connection, ctx: Context, scope: Any) -> bool:
    """Whether the caller may put a pool in the scope: theirs, or shared with everyone or with their project."""
    return bool(ctx.is_admin or scope.project_id == ctx.project_id or scope.shared
                or grants.shared_with(conn, RBAC, [scope.id], ctx.project_id))  # fmt: skip


def get_visible(conn: Connection, ctx: Context, scope_id: str) -> Any:
    row = conn.execute(_visible_stmt(ctx).where(AS.c.id == scope_id)).first() if is_uuid(scope_id) else None
    if row is None:
        raise not_found("address_scope", scope_id)
    return row


def _get_owned(conn: Connection, ctx: Context, scope_id: str, action: str) -> Any:
    row = get_visible(conn, ctx, scope_id)
    if not (ctx.is_admin or row.project_id == ctx.project_id):
        raise disallowed(action)
    return row


def list_scopes(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        attrs = {**ATTRS, "shared": Attr(filter=grants.shared_filter(AS.c.id, RBAC, ctx), sortable=False)}
        rows, more = fetch_page(conn, AS, attrs, _visible_stmt(ctx), q, "address_scope")
        return Page(to_dicts(conn, rows, ctx), more)


def get_scope(store: Store, ctx: Context, scope_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return to_dicts(conn, [get_visible(conn, ctx, scope_id)], ctx)[0]


def create_scopes(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [parse(ScopeCreate, b) for b in bodies]
    with store.write() as tx:
        ids = []
        for spec in specs:
            if spec.shared and not ctx.is_admin:
                raise disallowed("create_address_scope:shared")
            row = common.new_standard(
                ctx, spec.project_id or spec.tenant_id, tx.now, spec.name, spec.description, "address_scope"
            )
            row.update(ip_version=spec.ip_version, shared=spec.shared)
            tx.conn.execute(insert(AS).values(**row))
            if spec.shared:  # (`shared` is the wildcard policy, as in Neutron)
                grants.insert(tx, RBAC, row["id"], row["project_id"], grants.SHARED, grants.WILDCARD)
            tx.record("address_scope", row["id"], "create", row["project_id"])
            ids.append(row["id"])
        rows = {r.id: r for r in tx.conn.execute(select(AS).where(AS.c.id.in_(ids)))}
        return to_dicts(tx.conn, [rows[i] for i in ids], ctx)


def update_scope(store: Store, ctx: Context, scope_id: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = parse(ScopeUpdate, body)
    given = spec.model_fields_set
    with store.write() as tx:
        row = _get_owned(tx.conn, ctx, scope_id, "update_address_scope")
        changes = {k: getattr(spec, k) for k in ("name", "description") if k in given and getattr(spec, k) is not None}
        if "shared" in given and spec.shared is not None and spec.shared != row.shared:
            if not ctx.is_admin:
                raise disallowed("update_address_scope:shared")
            if not spec.shared:
                raise BadRequest(f"Unable to update address scope {scope_id} : Shared address scope can't be "
                                 "unshared.", type="AddressScopeUpdateError")  # fmt: skip
            changes["shared"] = True  # (never turned off: nothing to check before the wildcard policy goes)
            grants.wildcard(tx, RBAC, scope_id, row.project_id, grants.SHARED, True)
        common.touch(tx, AS, scope_id, "address_scope", row.project_id, changes, row=row)
        return to_dicts(tx.conn, [tx.conn.execute(select(AS).where(AS.c.id == scope_id)).one()], ctx)[0]


def delete_scope(store: Store, ctx: Context, scope_id: str) -> None:
    with store.write() as tx:
        row = _get_owned(tx.conn, ctx, scope_id, "delete_address_scope")
        tx.conn.execute(select(AS.c.id).where(AS.c.id == scope_id).with_for_update())
        if tx.conn.execute(select(tsp.subnetpools.c.id).where(tsp.subnetpools.c.address_scope_id == scope_id)).first():
            raise Conflict(f"Unable to complete operation on address scope {scope_id}. There are one or more subnet "
                           "pools in use on the address scope.", type="AddressScopeInUse")  # fmt: skip
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == scope_id))
        tx.conn.execute(delete(AS).where(AS.c.id == scope_id))
        grants.remove_all(tx, RBAC, scope_id)
        tx.record("address_scope", scope_id, "delete", row.project_id)

"""Helpers shared by the resource services: ids, standard attributes, visibility, tags, updates."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Row, Select, Table, and_, delete, insert, select, true, update
from sqlalchemy.sql import ColumnElement

from cloudnet.errors import disallowed, not_found
from cloudnet.services.context import Context
from cloudnet.services.query import Attr, to_int, to_time
from cloudnet.store import tables as t
from cloudnet.store.db import Tx


def new_id() -> str:
    return str(uuid.uuid4())


def fmt_time(value: datetime) -> str:
    """Neutron's timestamp form, 2026-01-02T03:04:05Z (isoformat: several times cheaper than strftime)."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(timespec="seconds") + "Z"


def standard_attrs(table: Table) -> dict[str, Attr]:
    c = table.c
    attrs = {
        "id": Attr(c.id),
        "project_id": Attr(c.project_id),
        "tenant_id": Attr(c.project_id),
        "description": Attr(c.description),
        "revision_number": Attr(c.revision_number, to_int),
        "created_at": Attr(c.created_at, to_time),
        "updated_at": Attr(c.updated_at, to_time),
    }
    if "name" in c:
        attrs["name"] = Attr(c.name)
    attrs.update(tag_attrs(c.id))
    return attrs


def standard_fields(row: Row[Any] | Mapping[str, Any], tags: list[str] | None) -> dict[str, Any]:
    """The standard attributes of a database row (or of the column values about to be inserted)."""
    m = row._mapping if isinstance(row, Row) else row
    out: dict[str, Any] = {"id": m["id"]}
    if "name" in m:
        out["name"] = m["name"]
    out.update(
        {
            "description": m["description"],
            "project_id": m["project_id"],
            "tenant_id": m["project_id"],
            "created_at": fmt_time(m["created_at"]),
            "updated_at": fmt_time(m["updated_at"]),
            "revision_number": m["revision_number"],
            "tags": tags if tags is not None else [],
        }
    )
    return out


def new_standard(
    ctx: Context, body_project: str | None, now: datetime, name: str = "", description: str = "", kind: str = ""
) -> dict[str, Any]:
    return {
        "id": new_id(),
        "project_id": owner_project(ctx, body_project, f"create_{kind}" if kind else "create"),
        "name": name,
        "description": description,
        "created_at": now,
        "updated_at": now,
        "revision_number": 0,
    }


def owner_project(ctx: Context, requested: str | None, action: str = "create") -> str:
    """The project a new resource is for; only admins name another (Neutron: the `create_<kind>` rule fails)."""
    if requested is None or requested == ctx.project_id:
        return ctx.project_id
    if not ctx.is_admin:
        raise disallowed(action)
    return requested


def visible(table: Table, ctx: Context) -> ColumnElement[bool] | None:
    """Condition limiting rows to the caller's project (None for admins)."""
    if ctx.is_admin:
        return None
    return table.c.project_id == ctx.project_id


def only_visible(stmt: Select[Any], table: Table, ctx: Context) -> Select[Any]:
    """`stmt` limited to the rows of `table` the caller may see (every row for admins)."""
    cond = visible(table, ctx)
    return stmt if cond is None else stmt.where(cond)


def only_owner(row: Any, ctx: Context, action: str) -> Any:
    """`row`, which the caller sees, if they may change it: theirs (or they are an admin); 403 for one they only
    see (shared with them), as Neutron's policy refuses it."""
    if not (ctx.is_admin or row.project_id == ctx.project_id):
        raise disallowed(action)
    return row


def get_row(conn: Connection, table: Table, kind: str, ident: str, ctx: Context) -> Row[Any]:
    if "\x00" in ident:  # no such id, and PostgreSQL refuses NUL characters in a query
        raise not_found(kind, ident)
    row = conn.execute(select(table).where(table.c.id == ident)).first()
    if row is None or not (ctx.is_admin or row.project_id == ctx.project_id):
        raise not_found(kind, ident)
    return row


def touch(
    tx: Tx, table: Table, ident: str, resource: str, project_id: str, values: dict[str, Any] | None = None,
    *, row: Row[Any] | None = None, changed: bool = False,
) -> bool:  # fmt: skip
    """Write changed values, bump updated_at and revision_number, record the update event. Given the current `row`,
    values it already holds are dropped, and when nothing is left (and nothing else `changed`) nothing is written:
    a no-op update keeps its revision_number and updated_at, as in Neutron. Returns whether it wrote."""
    values = dict(values or {})
    if row is not None:
        current = row._mapping
        values = {k: v for k, v in values.items() if k not in current or current[k] != v}
        if not values and not changed:
            return False
    tx.conn.execute(
        update(table)
        .where(table.c.id == ident)
        .values(**values, updated_at=tx.now, revision_number=table.c.revision_number + 1)
    )
    tx.record(resource, ident, "update", project_id)
    return True


# -- tags ---------------------------------------------------------------------------------------


def load_tags(conn: Connection, ids: Iterable[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    id_list = list(ids)
    for chunk in chunks(id_list, 5000):
        for rid, tag in conn.execute(
            select(t.tags.c.resource_id, t.tags.c.tag).where(t.tags.c.resource_id.in_(chunk)).order_by(t.tags.c.tag)
        ):
            out[rid].append(tag)
    return out


def set_tags(conn: Connection, resource_id: str, values: Iterable[str]) -> None:
    conn.execute(delete(t.tags).where(t.tags.c.resource_id == resource_id))
    unique = sorted(set(values))
    if unique:
        conn.execute(insert(t.tags), [{"resource_id": resource_id, "tag": v} for v in unique])


def tag_attrs(id_column: ColumnElement[Any]) -> dict[str, Attr]:
    def split(values: list[str]) -> list[str]:
        return [tag for v in values for tag in v.split(",") if tag]

    def unless_empty(
        condition: Callable[[list[str]], ColumnElement[bool]],
    ) -> Callable[[list[str]], ColumnElement[bool]]:
        # An empty tag list ("?tags=") filters nothing out, whichever of the four filters it is.
        return lambda values: condition(values) if split(values) else true()

    def having(tag: str) -> ColumnElement[bool]:
        return id_column.in_(select(t.tags.c.resource_id).where(t.tags.c.tag == tag))

    def all_of(values: list[str]) -> ColumnElement[bool]:
        return and_(*[having(tag) for tag in split(values)])

    def any_of(values: list[str]) -> ColumnElement[bool]:
        return id_column.in_(select(t.tags.c.resource_id).where(t.tags.c.tag.in_(split(values))))

    return {
        "tags": Attr(filter=unless_empty(all_of), sortable=False),
        "tags-any": Attr(filter=unless_empty(any_of), sortable=False),
        "not-tags": Attr(filter=unless_empty(lambda v: ~all_of(v)), sortable=False),
        "not-tags-any": Attr(filter=unless_empty(lambda v: ~any_of(v)), sortable=False),
    }


def chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]

"""Neutron's tag extension: replace, add, remove and list the tags of any resource."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from cloudnet.errors import BadRequest, NotFound, disallowed, not_found
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.networks import networks, subnetpools, subnets
from cloudnet.services.validation import MAX_TAGS, check_tags, tag_error
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.store.tables_trunks import trunks

# (conn, ctx, id) -> the row, if the caller may see it (else a NotFound)
Finder = Callable[[Connection, Context, str], Any]


@dataclass(frozen=True)
class Taggable:
    kind: str  # e.g. "security_group": the NotFound's wording and the event's resource
    table: Table  # a table with Neutron's standard attributes (id, project_id, revision_number, updated_at)
    find: Finder | None = None  # None: the caller's own rows (all for admins)


# The collections whose /tags the API serves, by URL segment. A new taggable resource adds itself with one line:
# `tags.register("floatingips", Taggable("floatingip", t.floating_ips))`.
TABLES: dict[str, Taggable] = {
    "networks": Taggable("network", t.networks, networks.get_visible),
    "subnets": Taggable("subnet", t.subnets, subnets.get_visible),
    "ports": Taggable("port", t.ports),
    "routers": Taggable("router", t.routers),
    "security-groups": Taggable("security_group", t.security_groups),
    "floatingips": Taggable("floatingip", t.forwards),
    "trunks": Taggable("trunk", trunks),
    "subnetpools": Taggable("subnetpool", subnetpools.SP, subnetpools.get_visible),
}


def register(collection: str, taggable: Taggable) -> None:
    TABLES[collection] = taggable


def _check(tag: str) -> str:
    why = tag_error(tag)
    if why:
        raise BadRequest(f"Invalid input for operation: {why}.")
    return tag


def _visible(conn: Connection, ctx: Context, collection: str, resource_id: str) -> Any:
    """The resource if the caller may see it (shared and external networks, and their subnets, included)."""
    res = TABLES[collection]
    if "\x00" in resource_id:  # no such id, and PostgreSQL refuses the query
        raise not_found(res.kind, resource_id)
    if res.find is not None:
        return res.find(conn, ctx, resource_id)
    return common.get_row(conn, res.table, res.kind, resource_id, ctx)


def _resource(tx: Tx, ctx: Context, collection: str, resource_id: str) -> tuple[str, str]:
    """Kind and project of a resource whose tags the caller may change: its own (or any, for admins)."""
    kind = TABLES[collection].kind
    row = _visible(tx.conn, ctx, collection, resource_id)
    if not ctx.is_admin and row.project_id != ctx.project_id:
        raise disallowed(f"update_{kind}")  # (Neutron: changing tags is an update of the resource)
    return kind, row.project_id


def _checked(values: list[Any]) -> list[str]:
    """A request's list of tags, sorted: the bounds of the tag API's PUT and POST (and of create bodies)."""
    if not all(isinstance(v, str) for v in values):
        raise BadRequest("Invalid input for tags: every tag must be a string")
    try:
        return sorted(check_tags(values))
    except ValueError as exc:
        raise BadRequest(f"Invalid input for operation: {exc}.") from None


def _too_many() -> BadRequest:
    return BadRequest(f"Invalid input for operation: a resource has at most {MAX_TAGS} tags.")


def _insert(tx: Tx, resource_id: str, values: list[str]) -> bool:
    """Add tags a resource may already have; whether any was new. ON CONFLICT: two concurrent adds of one tag both
    succeed (adding is idempotent), one of them changes it."""
    module = postgresql if tx.conn.dialect.name == "postgresql" else sqlite
    stmt = module.insert(t.tags).values([{"resource_id": resource_id, "tag": v} for v in values])
    return bool(tx.conn.execute(stmt.on_conflict_do_nothing().returning(t.tags.c.tag)).all())


def _count(tx: Tx, resource_id: str) -> int:
    return int(tx.conn.execute(select(func.count()).select_from(t.tags).where(t.tags.c.resource_id == resource_id))
               .scalar_one())  # fmt: skip


def replace(store: Store, ctx: Context, collection: str, resource_id: str, values: list[Any]) -> list[str]:
    clean = _checked(values)
    with store.write() as tx:
        kind, project = _resource(tx, ctx, collection, resource_id)
        if common.load_tags(tx.conn, [resource_id]).get(resource_id, []) != clean:  # (the same set: no revision)
            common.set_tags(tx.conn, resource_id, clean)
            common.touch(tx, TABLES[collection].table, resource_id, kind, project)
    return clean


def add(store: Store, ctx: Context, collection: str, resource_id: str, tag: str) -> None:
    _check(tag)
    with store.write() as tx:
        kind, project = _resource(tx, ctx, collection, resource_id)
        if _insert(tx, resource_id, [tag]):
            if _count(tx, resource_id) > MAX_TAGS:
                raise _too_many()
            common.touch(tx, TABLES[collection].table, resource_id, kind, project)


def add_many(store: Store, ctx: Context, collection: str, resource_id: str, values: list[Any]) -> list[str]:
    """Neutron's POST .../tags: these tags besides those the resource has (none new: no revision); all of them."""
    clean = _checked(values)
    with store.write() as tx:
        kind, project = _resource(tx, ctx, collection, resource_id)
        if clean and _insert(tx, resource_id, clean):
            if _count(tx, resource_id) > MAX_TAGS:
                raise _too_many()
            common.touch(tx, TABLES[collection].table, resource_id, kind, project)
        return common.load_tags(tx.conn, [resource_id]).get(resource_id, [])


def remove(store: Store, ctx: Context, collection: str, resource_id: str, tag: str | None) -> None:
    with store.write() as tx:
        kind, project = _resource(tx, ctx, collection, resource_id)
        stmt = delete(t.tags).where(t.tags.c.resource_id == resource_id)
        if tag is not None:
            stmt = stmt.where(t.tags.c.tag == tag)
        if tx.conn.execute(stmt).rowcount == 0:
            if tag is not None:
                raise NotFound(f"Tag {tag} could not be found for {kind} {resource_id}.", type="TagNotFound")
            return  # (no tags to remove: no revision)
        common.touch(tx, TABLES[collection].table, resource_id, kind, project)


def get_all(store: Store, ctx: Context, collection: str, resource_id: str) -> list[str]:
    with store.read() as conn:
        _visible(conn, ctx, collection, resource_id)
        return common.load_tags(conn, [resource_id]).get(resource_id, [])


def has(store: Store, ctx: Context, collection: str, resource_id: str, tag: str) -> bool:
    return tag in get_all(store, ctx, collection, resource_id)

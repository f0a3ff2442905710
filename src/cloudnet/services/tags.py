"""Neutron's tag extension: replace, add, remove and list the tags of any resource."""

from __future__ import annotations

from sqlalchemy import delete, insert, select

from cloudnet.errors import BadRequest, NotFound
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

TABLES = {
    "networks": ("network", t.networks),
    "subnets": ("subnet", t.subnets),
    "ports": ("port", t.ports),
    "routers": ("router", t.routers),
    "security-groups": ("security_group", t.security_groups),
}


def _check(tag: str) -> str:
    if not tag or len(tag) > 255 or "," in tag or "/" in tag:
        raise BadRequest(f"Invalid input for operation: '{tag}' is not a valid tag.")
    return tag


def _resource(tx: Tx, ctx: Context, collection: str, resource_id: str) -> tuple[str, str]:
    kind, table = TABLES[collection]
    row = common.get_row(tx.conn, table, kind, resource_id, ctx)
    return kind, row.project_id


def replace(store: Store, ctx: Context, collection: str, resource_id: str, values: list[str]) -> list[str]:
    clean = sorted({_check(v) for v in values})
    with store.write() as tx:
        kind, project = _resource(tx, ctx, collection, resource_id)
        common.set_tags(tx.conn, resource_id, clean)
        common.touch(tx, TABLES[collection][1], resource_id, kind, project)
    return clean


def add(store: Store, ctx: Context, collection: str, resource_id: str, tag: str) -> None:
    _check(tag)
    with store.write() as tx:
        kind, project = _resource(tx, ctx, collection, resource_id)
        exists = tx.conn.execute(
            select(t.tags.c.tag).where(t.tags.c.resource_id == resource_id, t.tags.c.tag == tag)
        ).first()
        if not exists:
            tx.conn.execute(insert(t.tags).values(resource_id=resource_id, tag=tag))
            common.touch(tx, TABLES[collection][1], resource_id, kind, project)


def remove(store: Store, ctx: Context, collection: str, resource_id: str, tag: str | None) -> None:
    with store.write() as tx:
        kind, project = _resource(tx, ctx, collection, resource_id)
        stmt = delete(t.tags).where(t.tags.c.resource_id == resource_id)
        if tag is not None:
            stmt = stmt.where(t.tags.c.tag == tag)
        if tx.conn.execute(stmt).rowcount == 0 and tag is not None:
            raise NotFound(f"Tag {tag} could not be found for {kind} {resource_id}.", type="TagNotFound")
        common.touch(tx, TABLES[collection][1], resource_id, kind, project)


def get_all(store: Store, ctx: Context, collection: str, resource_id: str) -> list[str]:
    kind, table = TABLES[collection]
    with store.read() as conn:
        common.get_row(conn, table, kind, resource_id, ctx)
        return common.load_tags(conn, [resource_id]).get(resource_id, [])


def has(store: Store, ctx: Context, collection: str, resource_id: str, tag: str) -> bool:
    return tag in get_all(store, ctx, collection, resource_id)

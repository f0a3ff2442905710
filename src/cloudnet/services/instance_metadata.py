"""An instance's metadata items: the stored part of the SmartOS key space (rules: wire/mdata_keys.py), read and
written one key at a time (customer metadata; internal metadata where the guest's rules or an admin say so)."""

from __future__ import annotations

from typing import Any

from pydantic import Field
from sqlalchemy import Connection, select

from cloudnet.errors import Forbidden, InvalidInput, NotFound, not_found
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.validation import Body, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.wire import mdata_keys

I = t.instances  # noqa: E741


class MetadataItem(Body):
    value: str = Field(..., max_length=mdata_keys.MAX_VALUE_LENGTH)
    # An admin (the platform) may put any key in internal metadata, e.g. an internal namespace's keys.
    internal: bool = False


def _metadata_view(customer: dict[str, Any], internal: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Customer metadata, and the internal metadata the caller may see: all of it for admins, what the
    guest itself can read (`*_pw`, internal namespaces) for the owner."""
    if not ctx.is_admin:
        namespaces = mdata_keys.internal_namespaces(internal)
        internal = {k: v for k, v in internal.items() if mdata_keys.reads_internal(k, namespaces)}
    return {"metadata": dict(customer), "internal_metadata": dict(internal)}


def _revision(conn: Connection) -> int:
    return int(conn.execute(select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1)).scalar() or 0)


def _checked_key(key: str) -> str:
    why = mdata_keys.key_error(key)
    if why:
        raise InvalidInput(f"metadata key '{key}': {why}")
    return key


def _row_for_update(tx: Tx, ctx: Context, instance_id: str) -> Any:
    """The instance row, locked until commit (PostgreSQL), so concurrent writes of two keys both land."""
    if "\x00" in instance_id:
        raise not_found("instance", instance_id)
    row = tx.conn.execute(select(I).where(I.c.id == instance_id).with_for_update()).first()
    if row is None or not (ctx.is_admin or row.project_id == ctx.project_id):
        raise not_found("instance", instance_id)
    return row


def _item_not_found(instance_id: str, key: str) -> NotFound:
    return NotFound(f"Metadata item {key} of instance {instance_id} could not be found.", type="MetadataItemNotFound")


def get_metadata(store: Store, ctx: Context, instance_id: str) -> tuple[dict[str, Any], int]:
    """The instance's metadata and the revision it is at least as new as (agents compare it with their
    desired state's revision)."""
    with store.read(snapshot=True) as conn:
        row = common.get_row(conn, I, "instance", instance_id, ctx)
        return _metadata_view(row.meta or {}, row.internal_meta or {}, ctx), _revision(conn)


def get_metadata_item(store: Store, ctx: Context, instance_id: str, key: str) -> dict[str, Any]:
    """One key, read where the guest reads it (internal metadata for `*_pw` and internal namespaces)."""
    with store.read() as conn:
        row = common.get_row(conn, I, "instance", instance_id, ctx)
    internal = row.internal_meta or {}
    source = internal if mdata_keys.reads_internal(key, mdata_keys.internal_namespaces(internal)) else row.meta
    if key not in (source or {}):
        raise _item_not_found(instance_id, key)
    return {"key": key, "value": source[key]}


def _target(
    ctx: Context, key: str, internal: dict[str, Any], customer: dict[str, Any], explicit: bool
) -> dict[str, Any]:
    """Which of the two maps a write of `key` changes: the guest's rules, unless an admin says internal."""
    if explicit:
        if not ctx.is_admin:
            raise Forbidden("Only admins may write internal metadata")
        return internal
    why = mdata_keys.refusal(key, mdata_keys.internal_namespaces(internal))
    if why:
        raise Forbidden(why, type="MetadataKeyReadOnly")
    return internal if mdata_keys.writes_internal(key) else customer


def set_metadata_item(
    store: Store, ctx: Context, instance_id: str, key: str, body: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    spec = parse(MetadataItem, body)
    _checked_key(key)
    with store.write() as tx:
        row = _row_for_update(tx, ctx, instance_id)
        customer, internal = dict(row.meta or {}), dict(row.internal_meta or {})
        target = _target(ctx, key, internal, customer, spec.internal)
        if target.get(key) != spec.value:
            target[key] = spec.value
            common.touch(tx, I, instance_id, "instance", row.project_id, {"meta": customer, "internal_meta": internal})
    return _metadata_view(customer, internal, ctx), store.current_revision()


def delete_metadata_item(store: Store, ctx: Context, instance_id: str, key: str, internal_only: bool = False) -> int:
    """Remove one key (404 when it is not there); returns a revision that includes the change."""
    _checked_key(key)
    with store.write() as tx:
        row = _row_for_update(tx, ctx, instance_id)
        customer, internal = dict(row.meta or {}), dict(row.internal_meta or {})
        target = _target(ctx, key, internal, customer, internal_only)
        if key not in target:
            raise _item_not_found(instance_id, key)
        del target[key]
        common.touch(tx, I, instance_id, "instance", row.project_id, {"meta": customer, "internal_meta": internal})
    return store.current_revision()

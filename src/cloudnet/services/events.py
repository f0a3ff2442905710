"""The revision log: what changed after revision N, long-polled by agents and followed as a typed event stream
(`cloudnet monitor`, the web UI's map): admins see every event (or one project's), members their project's only.

A member's answer names only its project's events, and its `revision` (where to go on from) is the last of them,
not the cloud's counter: nothing in it moves when another project changes."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, func, or_, select

from cloudnet.errors import BadRequest, Forbidden
from cloudnet.services.context import Context
from cloudnet.store import tables as t
from cloudnet.store.db import Store
from cloudnet.store.events import default_type

E = t.events
MAX_BATCH = 10000
MAX_REVISION = 2**63 - 1  # the column's range
MAX_TYPES = 16
MAX_PROJECT = 255  # (the column's length)
# port.active, or port (every port.* type), as services record them (store/events.py).
_TYPE = re.compile(r"[a-z][a-z_]{0,31}(?:\.[a-z][a-z_]{0,31})?")


@dataclass(frozen=True)
class Follow:
    """A checked request to follow the log: after `since`, at most `limit` events, waiting up to `timeout` s."""

    since: int
    limit: int
    timeout: float
    project_id: str | None = None  # only this project's events (always a member's own)
    types: tuple[str, ...] = ()  # only these types (a bare resource: all of its types)


def _scope(ctx: Context, project_id: str | None) -> str | None:
    """The project whose events the caller follows (None: all of them, for admins only)."""
    if project_id is not None and len(project_id) > MAX_PROJECT:
        raise BadRequest(f"Invalid input for project_id. Reason: longer than {MAX_PROJECT} characters.")
    if ctx.is_admin:
        return project_id
    if project_id is not None and project_id != ctx.project_id:
        raise Forbidden("Members follow their own project's events only")
    return ctx.project_id


def _types(raw: list[str]) -> tuple[str, ...]:
    if len(raw) > MAX_TYPES:
        raise BadRequest(f"Invalid input for type. Reason: at most {MAX_TYPES} types.")
    for item in raw:
        if not _TYPE.fullmatch(item):
            raise BadRequest(f"Invalid input for type. Reason: '{item[:40]}' is not an event type (e.g. port.active, "
                             "or port for all of a port's).")  # fmt: skip
    return tuple(dict.fromkeys(raw))


def _integer(name: str, raw: str | None, default: int, high: int) -> int:
    if raw is None:
        return default
    text = raw.strip()
    if not text.isdigit() or len(text) > 19 or int(text) > high:  # (isdigit: no sign, no inf/nan, no exponent)
        raise BadRequest(f"Invalid input for {name}. Reason: '{raw[:40]}' is not an integer from 0 to {high}.")
    return int(text)


def follow(ctx: Context, since: str | None, limit: str | None, timeout: str | None, max_wait: float,
           project_id: str | None = None, types: list[str] | None = None) -> Follow:  # fmt: skip
    """What the caller may follow (admins: everything, or `project_id`'s; members: their own project's), with its
    parameters finite and in range (checked after the caller's scope: a refusal says nothing of them)."""
    scope = _scope(ctx, project_id)
    count = _integer("limit", limit, MAX_BATCH, MAX_BATCH) or MAX_BATCH
    return Follow(_integer("since", since, 0, MAX_REVISION), count, seconds("timeout", timeout, max_wait),
                  scope, _types(types or []))  # fmt: skip


def seconds(name: str, raw: str | None, high: float) -> float:
    """A wait in seconds asked for in a query (finite, >= 0), cut to `high`; 0 when not asked for."""
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError:
        wait = math.nan
    if not math.isfinite(wait) or wait < 0 or len(raw) > 40:
        raise BadRequest(f"Invalid input for {name}. Reason: '{raw[:40]}' is not a number of seconds >= 0.")
    return min(wait, high)


def _matches(types: tuple[str, ...]) -> ColumnElement[bool]:
    exact = [name for name in types if "." in name]
    kinds = [name for name in types if "." not in name]
    return or_(E.c.type.in_(exact), E.c.resource.in_(kinds))


def events_since(store: Store, ctx: Context, q: Follow) -> tuple[list[dict[str, Any]], int]:
    """The events `q` asks for (at most its limit: go on from the last one when it was reached), and the latest
    committed revision, or for a member the latest of their project's events."""
    project = _scope(ctx, q.project_id)  # (the service holds its own rule, whoever calls it)
    stmt = select(E).where(E.c.revision > q.since)
    if project is not None:
        stmt = stmt.where(E.c.project_id == project)
    if q.types:
        stmt = stmt.where(_matches(q.types))
    with store.read() as conn:
        rows = conn.execute(stmt.order_by(E.c.revision).limit(q.limit)).all()
        if not ctx.is_admin:
            # (through the (project_id, revision) index: what the member may know of, no more)
            latest = conn.execute(select(func.max(E.c.revision)).where(E.c.project_id == project)).scalar()
            latest = max(int(latest or 0), q.since)
        else:
            latest = conn.execute(select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1)).scalar()
    return [_event(r) for r in rows], int(latest or 0)


def _event(r: Any) -> dict[str, Any]:
    return {
        "revision": r.revision,
        "resource": r.resource,
        "resource_id": r.resource_id,
        "operation": r.operation,
        "project_id": r.project_id,
        "created_at": r.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "type": r.type or default_type(r.resource, r.operation),
        "request_id": r.request_id,
        "detail": r.detail,
    }

"""The revision log: what changed after revision N, with a long poll for agents."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from cloudnet.errors import BadRequest, Forbidden
from cloudnet.services.context import Context
from cloudnet.store import tables as t
from cloudnet.store.db import Store

E = t.events
MAX_BATCH = 10000
MAX_REVISION = 2**63 - 1  # the column's range


@dataclass(frozen=True)
class Follow:
    """A checked request to follow the log: after `since`, at most `limit` events, waiting up to `timeout` s."""

    since: int
    limit: int
    timeout: float


def _admin(ctx: Context) -> None:
    if not ctx.is_admin:
        raise Forbidden("Only admins may follow the revision log")


def _integer(name: str, raw: str | None, default: int, high: int) -> int:
    if raw is None:
        return default
    text = raw.strip()
    if not text.isdigit() or len(text) > 19 or int(text) > high:  # (isdigit: no sign, no inf/nan, no exponent)
        raise BadRequest(f"Invalid input for {name}. Reason: '{raw[:40]}' is not an integer from 0 to {high}.")
    return int(text)


def follow(ctx: Context, since: str | None, limit: str | None, timeout: str | None, max_wait: float) -> Follow:
    """The caller may follow the log (admins: agents), and its parameters are finite and in range."""
    _admin(ctx)
    count = _integer("limit", limit, MAX_BATCH, MAX_BATCH) or MAX_BATCH
    return Follow(_integer("since", since, 0, MAX_REVISION), count, seconds("timeout", timeout, max_wait))


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


def events_since(store: Store, ctx: Context, since: int, limit: int = MAX_BATCH) -> tuple[list[dict[str, Any]], int]:
    """Events after `since` (at most `limit`), and the latest committed revision."""
    _admin(ctx)
    with store.read() as conn:
        rows = conn.execute(select(E).where(E.c.revision > since).order_by(E.c.revision).limit(limit)).all()
        latest = conn.execute(select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1)).scalar() or 0
    return [
        {
            "revision": r.revision,
            "resource": r.resource,
            "resource_id": r.resource_id,
            "operation": r.operation,
            "project_id": r.project_id,
            "created_at": r.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        for r in rows
    ], int(latest)

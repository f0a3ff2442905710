"""The revision log: what changed after revision N, with a long poll for agents."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from cloudnet.errors import Forbidden
from cloudnet.services.context import Context
from cloudnet.store import tables as t
from cloudnet.store.db import Store

E = t.events
MAX_BATCH = 10000


def events_since(store: Store, ctx: Context, since: int, limit: int = MAX_BATCH) -> tuple[list[dict[str, Any]], int]:
    """Events after `since` (at most `limit`), and the latest committed revision."""
    if not ctx.is_admin:
        raise Forbidden("Only admins may follow the revision log")
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

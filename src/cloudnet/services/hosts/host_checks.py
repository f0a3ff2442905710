"""A drift check asked of a host's agent: recorded as an event of the revision log, which every agent follows.

The agent of that host sees the event, runs a check (a full pass that reads back what it otherwise trusts and
repairs every difference from the desired state) and puts the result in its report (`report.check`), with the
revision of the desired state it compared against: any check at or after the request's revision answers it, so
a request made while the agent is down is answered by the check every agent runs when it starts.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from cloudnet.errors import Forbidden, not_found
from cloudnet.services.context import Context
from cloudnet.store import tables as t
from cloudnet.store.db import Store

CHECK = "check"  # the event's operation


def request_check(store: Store, ctx: Context, name: str) -> dict[str, Any]:
    if not ctx.is_admin:
        raise Forbidden("Only admins may ask a host for a check")
    with store.write() as tx:
        if tx.conn.execute(select(t.hosts.c.name).where(t.hosts.c.name == name)).first() is None:
            raise not_found("host", name)
        before = tx.revision_before()  # the revision the event gets is the next one
        tx.record("host", name, CHECK)
    return {"host": name, "revision": before + 1}

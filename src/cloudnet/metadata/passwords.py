"""The one write the metadata service makes: a guest posting its (encrypted) admin password, once.

nova's password handler: the first POST stores it, a second one is a 409; reading it back is a plain GET. The
update is conditional in SQL, so two concurrent posts (even on two servers) cannot both win.
"""

from __future__ import annotations

from enum import Enum

from sqlalchemy import select, update

from cloudnet.store import tables as t
from cloudnet.store.db import Store

I = t.instances  # noqa: E741


class Outcome(Enum):
    STORED = "stored"
    ALREADY_SET = "already set"
    NO_INSTANCE = "no instance"


def store_password(store: Store, instance_id: str, project_id: str, password: str) -> Outcome:
    with store.write() as tx:
        changed = tx.conn.execute(
            update(I)
            .where(I.c.id == instance_id, I.c.password.is_(None))
            .values(password=password, updated_at=tx.now, revision_number=I.c.revision_number + 1)
        ).rowcount
        if changed:
            # An event like any other change: every server's metadata cache drops the instance's view.
            tx.record("instance", instance_id, "update", project_id)
            return Outcome.STORED
        exists = tx.conn.execute(select(I.c.id).where(I.c.id == instance_id)).first()
        return Outcome.ALREADY_SET if exists else Outcome.NO_INSTANCE

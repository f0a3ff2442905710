"""Port pools, recovery: pool membership rebuilt from the database after a start, and a host's pools dropped
when the host is gone."""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update

from cloudnet.services.pools.pool_model import FREE_OWNER, PP, TAG_PREFIX, M, P, manager, precise_now
from cloudnet.services.ports import ports
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx


def recover(store: Store) -> dict[str, int]:
    """After a start: rebuild pool membership from the database alone (device_owner and the pool tag).

    Tagged ports missing from `pool_ports` are added; `idle_since` is set on ready ports that lack it (a claimed
    port keeps the time it last became ready: nothing reads it until it is ready again); ready pool-tagged
    ports of no pool (their pool is gone) are deleted, so nothing leaks."""
    fixed = {"adopted": 0, "idle_fixed": 0, "leaked_deleted": 0}
    with store.write() as tx:
        T = t.tags
        tagged = tx.conn.execute(
            select(T.c.resource_id, T.c.tag).where(T.c.tag.like(TAG_PREFIX + "%"), T.c.resource_id.in_(select(P.c.id)))
        ).all()  # fmt: skip
        pools = {r[0] for r in tx.conn.execute(select(PP.c.id))}
        members = {r[0] for r in tx.conn.execute(select(M.c.port_id))}
        now = precise_now()
        adopt = [{"port_id": pid, "pool_id": tag[len(TAG_PREFIX):], "idle_since": None}
                 for pid, tag in tagged if pid not in members and tag[len(TAG_PREFIX):] in pools]  # fmt: skip
        if adopt:
            tx.conn.execute(insert(M), adopt)
            fixed["adopted"] = len(adopt)
        ready = select(P.c.id).where(P.c.device_owner == FREE_OWNER)
        r1 = tx.conn.execute(update(M).where(M.c.idle_since.is_(None), M.c.port_id.in_(ready)).values(idle_since=now))
        fixed["idle_fixed"] = r1.rowcount
        pool_tagged = select(T.c.resource_id).where(T.c.tag.like(TAG_PREFIX + "%"))
        orphans = tx.conn.execute(select(P).where(
            P.c.device_owner == FREE_OWNER, P.c.id.in_(pool_tagged), P.c.id.not_in(select(M.c.port_id))))  # fmt: skip
        for row in orphans.all():
            ports.delete_in_tx(tx, row)
            fixed["leaked_deleted"] += 1
    mgr = manager(store)
    with mgr.guard:
        mgr.pending.clear()
        mgr.maintained.clear()
        mgr.failed.clear()
    mgr.forget()
    return fixed


# -- host, network and security group deletion ------------------------------------------------------


def drop_host(tx: Tx, host: str) -> int:
    """A host is gone: delete its pools and their ready ports (Kuryr's removed-node cleanup), so that no
    address stays reserved for it; returns how many ports were deleted. Its in-use pool ports stay with their
    instances and, no longer in a pool, are deleted as ordinary ports when released."""
    pool_ids = select(PP.c.id).where(PP.c.host == host)
    ready = select(P).select_from(M.join(P, P.c.id == M.c.port_id))
    rows = tx.conn.execute(ready.where(M.c.pool_id.in_(pool_ids), P.c.device_owner == FREE_OWNER)).all()
    for row in rows:
        ports.delete_in_tx(tx, row)
    tx.conn.execute(delete(PP).where(PP.c.host == host))  # memberships go with them (ON DELETE CASCADE)
    if tx.store is not None:  # the cached pool rows of the host (its ports' events drop only their hints)
        mgr = manager(tx.store)
        tx.after_commit(mgr.forget)
    return len(rows)

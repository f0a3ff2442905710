"""The store's hot-path machinery on both backends: prepared statements (store/prepared.py), transaction hooks,
the revision log as the invalidation feed of caches (store/changes.py) and SQLite's background checkpoints."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import httpx
import pytest
from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError

from cloudnet.services.context import Context
from cloudnet.services.networks import networks
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.store.events import Event
from cloudnet.store.prepared import BulkInsert, Prepared
from tests.support.api import create

N = t.networks
_INSERT = BulkInsert(N, [c.name for c in N.c], conflict=["id"], returning=["id", "created_at", "config"])
_GET = Prepared(select(N.c.id, N.c.shared, N.c.created_at, N.c.config, N.c.routes).where(N.c.id == bindparam("id")))


def network_row(i: int, now: datetime) -> dict[str, object]:
    return {"id": f"00000000-0000-4000-8000-{i:012d}", "project_id": "p", "name": f"n{i}", "description": "",
            "created_at": now, "updated_at": now, "revision_number": 0, "admin_state_up": True, "shared": i % 2 == 0,
            "mtu": 1500, "status": "ACTIVE", "router_external": False, "network_type": "local",
            "physical_network": None, "segmentation_id": None, "segment_key": None, "config": {"k": [i]},
            "routes": [], "port_security_enabled": True, "availability_zone_hints": [],
            "qos_policy_id": None}  # fmt: skip


def naive(value: datetime) -> datetime:
    return value.replace(tzinfo=None)


def test_prepared_statements_convert_values_both_ways(store: Store) -> None:
    with store.write() as tx:
        one = _INSERT.run(tx.conn, [network_row(1, tx.now)])
        many = _INSERT.run(tx.conn, [network_row(i, tx.now) for i in range(2, 7)])
        again = _INSERT.run(tx.conn, [network_row(1, tx.now), network_row(7, tx.now)])  # 1: conflict, skipped
        now = tx.now
    assert [(r[0], naive(r[1]), r[2]) for r in one] == [(network_row(1, now)["id"], now, {"k": [1]})]
    assert len(many) == 5 and [r[0] for r in again] == [network_row(7, now)["id"]]
    with store.write() as tx:
        got = _GET.first(tx.conn, {"id": network_row(4, now)["id"]})
        assert got is not None
        assert (got[1], naive(got[2]), got[3], got[4]) == (True, now, {"k": [4]}, [])
        assert _GET.first(tx.conn, {"id": "no-such-id"}) is None
        renamed = Prepared(update(N).where(N.c.shared.is_(True)).values(name=bindparam("name")))
        assert renamed.rowcount(tx.conn, {"name": "even"}) == 3  # networks 2, 4 and 6


def test_driver_errors_are_raised_as_sqlalchemys(store: Store) -> None:
    plain = BulkInsert(N, [c.name for c in N.c])  # no ON CONFLICT
    with store.write() as tx:
        plain.run(tx.conn, [network_row(1, tx.now)])
    with pytest.raises(IntegrityError), store.write() as tx:
        plain.run(tx.conn, [network_row(1, tx.now)])
    with store.write() as tx:  # the failed transaction left the store usable, and nothing of it behind
        assert len(tx.conn.execute(select(N.c.id)).all()) == 1


def test_transaction_hooks_run_after_commit_or_rollback(store: Store) -> None:
    seen: list[str] = []
    with store.write() as tx:
        tx.after_commit(lambda: seen.append("committed"))
        tx.after_rollback(lambda: seen.append("rolled back"))
        tx.record("network", "x", "update")
        assert seen == []
    assert seen == ["committed"]
    with pytest.raises(RuntimeError), store.write() as tx:
        tx.after_commit(lambda: seen.append("committed 2"))
        tx.after_rollback(lambda: seen.append("rolled back 2"))
        raise RuntimeError("boom")
    assert seen == ["committed", "rolled back 2"]


# -- the revision log as a feed of changes ----------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.told: list[tuple[list[tuple[str, str]] | None, bool]] = []

    def __call__(self, events: Sequence[Event] | None, tx: Tx | None) -> None:
        self.told.append((None if events is None else [(e.resource, e.resource_id) for e in events], tx is not None))


@pytest.fixture
def second(db_url: str) -> Iterator[Store]:
    """Another process's store on the same database."""
    s = Store(db_url)
    yield s
    s.dispose()


def write(store: Store, *events: tuple[str, str]) -> None:
    with store.write() as tx:
        for resource, ident in events:
            tx.record(resource, ident, "update")


def sync(store: Store) -> None:
    with store.write() as tx:
        tx.sync()


def test_own_and_foreign_changes_reach_the_watchers(store: Store, second: Store) -> None:
    seen = Recorder()
    store.changes.watch(seen)
    sync(store)  # from here on, the store knows the revision
    write(store, ("network", "a"))
    assert seen.told == [([("network", "a")], True)]  # own: told at its commit, with the transaction
    write(second, ("subnet", "b"), ("port", "c"))
    write(store, ("network", "d"))  # own again: no query needed for it, and the foreign ones not yet read
    assert seen.told[-1] == ([("network", "d")], True)
    seen.told.clear()
    sync(store)
    assert seen.told == [([("subnet", "b"), ("port", "c")], False)]  # foreign: read from the log at the sync
    seen.told.clear()
    sync(store)
    assert seen.told == []  # nothing new


def test_a_reset_log_makes_the_watchers_forget_everything(store: Store) -> None:
    seen = Recorder()
    store.changes.watch(seen)
    write(store, ("network", "a"))
    sync(store)
    with store.write() as tx:  # what a restore of an older database looks like
        tx.conn.execute(update(t.revision_counter).values(value=0))
    seen.told.clear()
    sync(store)
    assert seen.told == [(None, False)]


def test_revisions_of_own_transactions_still_finishing_are_not_foreign(store: Store, second: Store) -> None:
    seen = Recorder()
    store.changes.watch(seen)
    sync(store)
    with store.read() as conn:
        next_revision = int(conn.execute(select(t.revision_counter.c.value)).scalar_one()) + 1
    # An own transaction that has published revision `next_revision` and committed, but not yet told anyone
    # (its bookkeeping runs after the commit): the log has its event, the feed knows it as pending.
    with store.read() as conn:
        finishing = Tx(conn)
        finishing.record("network", "mine", "update")
        store.changes.publishing(finishing, next_revision)
    seen.told.clear()
    write(second, ("network", "mine"))  # stands in for that commit: same revision, same event
    write(second, ("network", "theirs"))
    sync(store)
    assert seen.told == [([("network", "theirs")], False)]


def test_a_sync_after_an_own_uncommitted_bump_goes_only_up_to_what_was_committed(store: Store, second: Store) -> None:
    """A transaction that bumped the counter itself (a PostgreSQL claim publishing its event with its statement)
    and then syncs: up to the revision it saw before its bump, never to its own, uncommitted one (which a
    rollback undoes, and which another transaction may then commit with another event)."""
    seen = Recorder()
    store.changes.watch(seen)
    sync(store)
    write(second, ("network", "theirs"))  # foreign, committed
    committed = store.current_revision()
    seen.told.clear()
    with pytest.raises(RuntimeError), store.write() as tx:
        tx.synced = True  # a deferred sync (services/pools/pool_claims.py)
        tx.conn.execute(update(t.revision_counter).values(value=t.revision_counter.c.value + 1))  # own bump
        tx.synced = False
        tx.sync(upto=committed)
        assert store.changes.seen == committed
        raise RuntimeError("rolled back")
    assert store.changes.seen == committed == store.current_revision()
    assert seen.told == [([("network", "theirs")], False)]  # told once, and never of a full reset
    write(second, ("network", "next"))  # the revision the rolled-back bump had: theirs now, and seen
    sync(store)
    assert seen.told[-1] == ([("network", "next")], False)


def test_caches_follow_a_network_change_made_elsewhere(store: Store, second: Store) -> None:
    ctx = Context.admin("p")
    alice = Context(project_id="alice")
    (net,) = networks.create_networks(store, ctx, [{"name": "n", "shared": True}], 1500)
    with store.write() as tx:
        assert networks.visible_in_tx(tx, alice, net["id"]).shared  # cached by this store
    networks.update_network(second, ctx, net["id"], {"shared": False})
    with store.write() as tx, pytest.raises(Exception, match="could not be found"):
        networks.visible_in_tx(tx, alice, net["id"])


# -- SQLite: checkpoints in the background ------------------------------------------------------------


def test_sqlite_checkpoints_run_in_the_background(store: Store) -> None:
    if not store.is_sqlite:
        pytest.skip("SQLite only")
    checkpointer = store._checkpointer
    assert checkpointer is not None
    with store.read() as conn:  # commits never checkpoint by themselves
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
    for i in range(checkpointer.EVERY + 1):
        write(store, ("network", str(i)))
    deadline = time.monotonic() + 30
    while checkpointer.runs == 0:
        assert time.monotonic() < deadline, "no checkpoint ran"
        time.sleep(0.01)


def test_a_write_waits_for_another_process_without_blocking_the_server(
    store: Store, api: httpx.Client, db_url: str
) -> None:
    """Port creates run on the event loop when the write lock is free (api/deps.py `quick`); while another
    process holds SQLite's lock they wait on a worker thread instead: answered once it is released, and the
    server keeps answering meanwhile."""
    if not store.is_sqlite:
        pytest.skip("SQLite only")
    net = create(api, "networks", "network", name="n")
    create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    other = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write transaction
    with ThreadPoolExecutor(1) as ex:
        pending = ex.submit(api.post, "/ports", json={"port": {"network_id": net["id"]}})
        try:
            for _ in range(5):  # the server still answers (its loop is not stuck in the waiting create)
                assert api.get("/networks").status_code == 200
            assert not pending.done()
        finally:
            other.execute("COMMIT")
            other.close()
        r = pending.result(timeout=60)
    assert r.status_code == 201, r.text

"""The NB writer lock moves when its holder dies (issue 29): two real `cloudnet serve` processes on one database and
one NB; the writer is killed with SIGKILL while ports are created and deleted through the other, which takes the lock,
resyncs, and leaves NB equal to the store with nothing it acknowledged lost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudnet.store.db import Store
from tests.ovn.converged import nb_differences
from tests.support.api import create
from tests.support.ovn import OvnSandbox
from tests.support.port_churn import churning
from tests.support.writer_pair import WriterPair, writer_pair, writer_then_standby


@pytest.fixture
def pair(tmp_path: Path, ovn: OvnSandbox) -> Iterator[WriterPair]:
    with writer_pair(tmp_path, ovn) as p:
        yield p
    for name in ovn.nbctl("--bare", "--columns=name", "list", "Logical_Switch").split():
        ovn.nbctl("ls-del", name)  # (the module's next test starts from an empty NB)


def test_the_writer_killed_during_churn_hands_nb_to_the_other_server(pair: WriterPair, ovn: OvnSandbox) -> None:
    _writer, standby, net = writer_then_standby(pair, "handover")
    with standby.api() as api:
        with churning(api, net["id"]) as churn:
            pair.until("ports created through the standby", lambda: churn.acknowledged() >= 5)
            pair.kill("a")  # the writer, mid-churn
            before = churn.acknowledged()
            pair.until("ports created after the kill", lambda: churn.acknowledged() >= before + 10)
        # the API kept answering: the kill cost no request
        assert (churn.failures, churn.lost, churn.unknown) == ([], 0, set()), churn.failures
        listed = {p["id"] for p in api.get("/ports", params={"network_id": net["id"]}).json()["ports"]}
    kept = churn.kept()
    assert kept <= listed and not (churn.deleted & listed), "an acknowledged create or delete was lost"
    store = Store(pair.db_url)
    try:
        pair.until("NB in step with the store", lambda: not nb_differences(ovn, store, []), timeout=30, step=0.2)
    finally:
        store.dispose()
    assert kept <= pair.switch_ports() and not (churn.deleted & pair.switch_ports())
    pair.until("the survivor logged its resync", lambda: "northbound resync" in standby.log_text())  # (log thread)


def test_the_standby_never_writes_while_the_writer_lives(pair: WriterPair, ovn: OvnSandbox) -> None:
    """Hostile to the lock: a change behind cloudnet's back is repaired by the writer alone; the standby, which sees
    the same NB and the same database, stays out (its log says it stands by and never resyncs)."""
    writer, standby, net = writer_then_standby(pair, "one-writer")
    with standby.api() as api:
        port = create(api, "ports", "port", network_id=net["id"], name="via-standby")
    pair.until("the writer wrote the standby's port", lambda: port["id"] in pair.switch_ports())
    ovn.nbctl("lsp-del", port["id"])
    pair.until("the writer repaired NB", lambda: port["id"] in pair.switch_ports())
    repaired = "rows changed outside cloudnet, repaired"  # (sync.py's line; polled: the server's log thread)
    pair.until("the writer logged its repair", lambda: repaired in writer.log_text())
    assert "northbound resync" not in standby.log_text() and "repaired" not in standby.log_text()

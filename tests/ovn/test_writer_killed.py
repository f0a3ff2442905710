"""The NB writer lock moves when its holder dies (issue 29): two real `cloudnet serve` processes on one database and
one NB; the writer is killed with SIGKILL while ports are created and deleted through the other, which takes the lock,
resyncs, and leaves NB equal to the store with nothing it acknowledged lost."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cloudnet.store.db import Store
from tests.ovn.converged import nb_differences
from tests.support.api import create
from tests.support.ovn import OvnSandbox
from tests.support.writer_pair import WriterPair, writer_pair, writer_then_standby


@pytest.fixture
def pair(tmp_path: Path, ovn: OvnSandbox) -> Iterator[WriterPair]:
    with writer_pair(tmp_path, ovn) as p:
        yield p
    for name in ovn.nbctl("--bare", "--columns=name", "list", "Logical_Switch").split():
        ovn.nbctl("ls-del", name)  # (the module's next test starts from an empty NB)


class Churn:
    """Creates (and every third time deletes an earlier one) ports through one server until stopped; keeps what
    the server acknowledged."""

    def __init__(self, api: httpx.Client, network: str) -> None:
        self.api, self.network = api, network
        self.created: list[str] = []
        self.deleted: set[str] = set()
        self.failures: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            n += 1
            r = self.api.post("/ports", json={"port": {"network_id": self.network, "name": f"churn-{n}"}})
            if r.status_code != 201:
                self.failures.append(f"create: {r.status_code} {r.text[:200]}")
                continue
            self.created.append(r.json()["port"]["id"])
            if n % 3 == 0:
                victim = self.created[-2]
                r = self.api.delete(f"/ports/{victim}")
                if r.status_code == 204:
                    self.deleted.add(victim)
                else:
                    self.failures.append(f"delete: {r.status_code} {r.text[:200]}")

    def acknowledged(self) -> int:
        return len(self.created)


def test_the_writer_killed_during_churn_hands_nb_to_the_other_server(pair: WriterPair, ovn: OvnSandbox) -> None:
    _writer, standby, net = writer_then_standby(pair, "handover")
    with standby.api() as api:
        churn = Churn(api, net["id"])
        churn.thread.start()
        try:
            pair.until("ports created through the standby", lambda: churn.acknowledged() >= 5)
            pair.kill("a")  # the writer, mid-churn
            before = churn.acknowledged()
            pair.until("ports created after the kill", lambda: churn.acknowledged() >= before + 10)
        finally:
            churn.stopping.set()
            churn.thread.join(timeout=60)
        assert churn.failures == [], churn.failures  # the API kept answering: the kill cost no request
        listed = {p["id"] for p in api.get("/ports", params={"network_id": net["id"]}).json()["ports"]}
    kept = set(churn.created) - churn.deleted
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

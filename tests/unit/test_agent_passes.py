"""The agent passes again at once while its dataplane has work left over (devices to park beyond a pass's budget),
without waiting for an event; then it goes back to waiting on the revision log."""

from __future__ import annotations

import threading
from typing import Any

from cloudnet.agent.agent import Agent
from cloudnet.dataplane.base import DesiredState, PortReport


class _Api:
    """A quiet revision log: no events ever; records how long the agent asked to wait each time."""

    host = "h"

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.quiet = threading.Event()  # the agent asked to wait with nothing left to do

    def heartbeat(self, report: dict[str, Any]) -> dict[str, Any]:
        return {}

    def desired_state(self, since: int | None = None) -> dict[str, Any]:
        return {"revision": 1, "ports": {}, "networks": {}, "instances": []}

    def events(self, since: int, timeout: float) -> tuple[list[dict[str, Any]], int]:
        self.waits.append(timeout)
        if timeout > 0:
            self.quiet.set()
            threading.Event().wait(0.01)  # (a long poll that would last `timeout`: the test stops the agent)
        return [], 1

    def report_ports(self, ports: list[dict[str, Any]]) -> None:
        return None


class _Leftovers:
    """A dataplane that needs three more passes to finish after the first."""

    def __init__(self) -> None:
        self.passes: list[bool] = []  # `full` of each pass

    def apply(self, state: DesiredState, full: bool = True, check: bool = False) -> list[PortReport]:
        self.passes.append(full)
        return []

    def unfinished(self) -> bool:
        return len(self.passes) < 4

    def news(self) -> bool:
        return False

    def on_news(self, wake: Any) -> None: ...

    def differences(self) -> list[dict[str, str]]:
        return []

    def failures(self) -> list[dict[str, Any]]:
        return []

    def close(self) -> None: ...


def _run_until_quiet(api: _Api, dataplane: Any) -> None:
    """The real agent on its thread until it waits for events with nothing to do (`api.quiet`), then stopped."""
    agent = Agent(api, dataplane, heartbeat_interval=60, poll_timeout=30)  # type: ignore[arg-type]
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        assert api.quiet.wait(10), api.waits
    finally:
        agent.stop()
        thread.join(timeout=10)


def test_left_over_work_is_done_in_passes_at_once_then_the_agent_waits() -> None:
    api, dataplane = _Api(), _Leftovers()
    _run_until_quiet(api, dataplane)
    assert dataplane.passes[:4] == [True, False, False, False]  # the first (full), then one per leftover
    assert api.waits[:3] == [0.0, 0.0, 0.0]  # new events are looked at between passes, never waited for
    assert api.waits[3] > 0


class _Log(_Api):
    """A revision log that counts state fetches, keeps the ports reported, and hands out `pending` events once."""

    def __init__(self) -> None:
        super().__init__()
        self.fetches = 0
        self.reported: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []

    def desired_state(self, since: int | None = None) -> dict[str, Any]:
        self.fetches += 1
        port = {"id": "p1", "network_id": None, "status": "DOWN", "binding:vif_type": "unbound",
                "binding:vif_details": {}}  # fmt: skip
        return {"revision": 5, "ports": {"p1": port}, "networks": {}, "instances": []}

    def events(self, since: int, timeout: float) -> tuple[list[dict[str, Any]], int]:
        given, self.pending = self.pending, []
        return given, since + len(given)

    def report_ports(self, ports: list[dict[str, Any]]) -> dict[str, Any] | None:
        self.reported += ports
        return None


class _Binding(_Leftovers):
    """The port is BUILD until `bound`, then ACTIVE; `news` says it changed since the last pass."""

    def __init__(self) -> None:
        super().__init__()
        self.bound = self.changed = False

    def apply(self, state: DesiredState, full: bool = True, check: bool = False) -> list[PortReport]:
        self.passes.append(full)
        self.changed = False
        return [PortReport("p1", "ACTIVE" if self.bound else "BUILD", "ovs", {})]

    def unfinished(self) -> bool:
        return False

    def news(self) -> bool:
        return self.changed


def test_a_pass_woken_by_the_dataplanes_news_alone_reuses_the_state_and_an_event_fetches_it_again() -> None:
    api, dataplane = _Log(), _Binding()
    agent = Agent(api, dataplane)  # type: ignore[arg-type]
    agent.reconcile(full=True)
    assert api.fetches == 1 and [p["status"] for p in api.reported] == ["BUILD"] and agent.held_back
    dataplane.bound = dataplane.changed = True  # (ovn-controller bound it: the driver's news)
    agent.reconcile(full=False, reuse=True)  # (what _follow asks when only the news woke it)
    assert api.fetches == 1, "the state was fetched again though the log had nothing new"
    assert [p["status"] for p in api.reported] == ["BUILD", "ACTIVE"] and agent.revision == 5
    agent.reconcile(full=False, reuse=True)  # (the reused state holds what was reported: nothing again)
    assert len(api.reported) == 2
    agent.reconcile(full=False, reuse=False)  # (an event came: what the server holds now is fetched)
    assert api.fetches == 2 and len(api.reported) == 3  # (this fake server kept DOWN: reported again)


class _Overdue(_Leftovers):
    """A dataplane with one failed object whose backoff has ended and that its passes never try again (as one an
    incremental pass does not look at)."""

    def unfinished(self) -> bool:
        return False

    def failures(self) -> list[dict[str, Any]]:
        return [{"object": "router:r", "reason": "boom", "since": "", "attempts": 1, "retry_in": 0.0}]


def test_a_failure_due_as_a_pass_ends_gets_one_pass_at_once_and_no_busy_loop() -> None:
    """Its backoff may have ended while the last pass ran, after that pass looked at it: one more pass at once; still
    due after it, the object was not looked at, and the agent waits for events (no pass after pass)."""
    api, dataplane = _Api(), _Overdue()
    _run_until_quiet(api, dataplane)
    assert dataplane.passes[:2] == [True, False]  # the first (full), then the one for the due object
    assert api.waits[0] == 0.0 and api.waits[1] > 0, api.waits
    assert len(dataplane.passes) == 2, dataplane.passes

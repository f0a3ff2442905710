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

    def desired_state(self) -> dict[str, Any]:
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


def test_left_over_work_is_done_in_passes_at_once_then_the_agent_waits() -> None:
    api, dataplane = _Api(), _Leftovers()
    agent = Agent(api, dataplane, heartbeat_interval=60, poll_timeout=30)  # type: ignore[arg-type]
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        assert api.quiet.wait(10), api.waits
    finally:
        agent.stop()
        thread.join(timeout=10)
    assert dataplane.passes[:4] == [True, False, False, False]  # the first (full), then one per leftover
    assert api.waits[:3] == [0.0, 0.0, 0.0]  # new events are looked at between passes, never waited for
    assert api.waits[3] > 0

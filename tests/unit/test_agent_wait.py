"""While ports wait on the dataplane (OVN: to be bound), the agent's long poll for events runs on a side thread and the
dataplane's news ends the wait at once; a poll still running is taken up by the next wait, so no event is lost.
Otherwise the wait is one long poll on the agent's own thread."""

from __future__ import annotations

import threading
import time
from typing import Any

from cloudnet.agent.agent import Agent


class _Client:
    """A revision log whose long polls last until `release` is set (or their timeout runs out)."""

    def __init__(self, events: list[dict[str, Any]] | None = None) -> None:
        self.asked: list[tuple[int, float, str]] = []  # (since, timeout, thread name)
        self.release = threading.Event()
        self.events_to_give = events or []

    def events(self, since: int, timeout: float) -> tuple[list[dict[str, Any]], int]:
        self.asked.append((since, timeout, threading.current_thread().name))
        if self.release.wait(timeout):
            return self.events_to_give, since + len(self.events_to_give)
        return [], since


class _Dataplane:
    def __init__(self) -> None:
        self.wake: Any = None
        self.changed = False

    def news(self) -> bool:
        return self.changed

    def on_news(self, wake: Any) -> None:
        self.wake = wake

    def bind(self) -> None:
        """What the OVN driver does when ovn-controller binds a port: news, then the wake, from another thread."""
        self.changed = True
        self.wake()


def test_held_back_wait_ends_at_the_dataplanes_news() -> None:
    client, dataplane = _Client(), _Dataplane()
    agent = Agent(client, dataplane)  # type: ignore[arg-type]
    agent.held_back = True
    threading.Timer(0.05, dataplane.bind).start()
    t0 = time.monotonic()
    try:
        assert agent._wait(30.0) == ([], agent.revision)
        assert time.monotonic() - t0 < 10  # (the poll itself would have lasted 30 s)
        assert len(client.asked) == 1 and client.asked[0][2] == "cloudnet-events"
    finally:
        client.release.set()


def test_news_already_there_ends_the_wait_before_it_starts() -> None:
    client, dataplane = _Client(), _Dataplane()
    agent = Agent(client, dataplane)  # type: ignore[arg-type]
    agent.held_back = True
    dataplane.changed = True
    try:
        assert agent._wait(30.0) == ([], agent.revision)
    finally:
        client.release.set()


def test_a_poll_left_running_is_taken_up_by_the_next_wait_and_its_events_kept() -> None:
    event = {"resource": "port", "resource_id": "p1", "operation": "update"}
    client, dataplane = _Client([event]), _Dataplane()
    agent = Agent(client, dataplane)  # type: ignore[arg-type]
    agent.revision = 7
    agent.held_back = True
    threading.Timer(0.05, dataplane.bind).start()
    assert agent._wait(30.0) == ([], 7)  # (the news ended the wait: the poll runs on)
    agent.held_back, agent.revision, dataplane.changed = False, 9, False  # (a pass came between)
    threading.Timer(0.05, client.release.set).start()
    assert agent._wait(30.0) == ([event], 8)  # the same poll, from revision 7: nothing since is missed
    assert [a[0] for a in client.asked] == [7]
    assert agent._wait(0.01) == ([event], 10)  # then a plain long poll again, on the agent's thread
    assert client.asked[-1][2] == threading.current_thread().name


def test_a_failed_poll_is_raised_on_the_agents_thread() -> None:
    class _Down(_Client):
        def events(self, since: int, timeout: float) -> tuple[list[dict[str, Any]], int]:
            raise ConnectionError("API away")

    agent = Agent(_Down(), _Dataplane())  # type: ignore[arg-type]
    agent.held_back = True
    try:
        agent._wait(10.0)
    except ConnectionError as exc:
        assert "API away" in str(exc)
    else:
        raise AssertionError("the poll's failure was not raised")
    assert agent._poll is None


def test_not_held_back_is_one_long_poll_on_the_agents_thread() -> None:
    client = _Client()
    agent = Agent(client, _Dataplane())  # type: ignore[arg-type]
    agent._wait(0.1)
    assert len(client.asked) == 1 and client.asked[0][1] > 0.09
    assert client.asked[0][2] == threading.current_thread().name

"""While ports wait on the dataplane (OVN: to be bound), the agent's wait for events is cut into short long polls, so
that a change underneath (the dataplane's news) ends it; otherwise it is one long poll."""

from __future__ import annotations

import threading
from typing import Any

from cloudnet.agent import agent as agent_module
from cloudnet.agent.agent import Agent


class _Client:
    def __init__(self) -> None:
        self.asked: list[float] = []

    def events(self, since: int, timeout: float) -> tuple[list[dict[str, Any]], int]:
        self.asked.append(timeout)
        threading.Event().wait(timeout)  # (an API with nothing new: the long poll runs out)
        return [], since


class _Dataplane:
    def __init__(self, news_after: int, client: _Client) -> None:
        self.news_after, self.client = news_after, client

    def news(self) -> bool:
        return len(self.client.asked) >= self.news_after


def test_held_back_waits_end_at_the_dataplanes_news(monkeypatch: Any) -> None:
    monkeypatch.setattr(agent_module, "WAKE_SLICE", 0.05)
    client = _Client()
    agent = Agent(client, _Dataplane(2, client))  # type: ignore[arg-type]
    agent.held_back = True
    assert agent._wait(10.0) == ([], agent.revision)
    assert client.asked == [0.05, 0.05]  # news after the second slice: no third


def test_held_back_without_news_polls_in_slices_to_the_end(monkeypatch: Any) -> None:
    monkeypatch.setattr(agent_module, "WAKE_SLICE", 0.05)
    client = _Client()
    agent = Agent(client, _Dataplane(10**6, client))  # type: ignore[arg-type]
    agent.held_back = True
    agent._wait(0.2)
    assert 3 <= len(client.asked) <= 5 and all(t <= 0.05 for t in client.asked)


def test_not_held_back_is_one_long_poll() -> None:
    client = _Client()
    agent = Agent(client, _Dataplane(0, client))  # type: ignore[arg-type]
    agent._wait(0.1)
    assert len(client.asked) == 1 and client.asked[0] > 0.09

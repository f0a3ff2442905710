"""The agent's first connect waits for the API (it may be starting); only losing an API it reached is a loss."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx
import pytest

from cloudnet.agent.agent import Agent
from cloudnet.agent.client import ApiClient
from tests.support.process import free_port


def _run_until(agent: Agent, caplog: pytest.LogCaptureFixture, text: str) -> None:
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    try:
        while text not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.01)
    finally:
        agent.stop()
        thread.join(timeout=10)


class _NoDataplane:
    """Never reached: the agent fails before its first pass."""

    def on_news(self, wake: Any) -> None: ...


def test_an_api_not_up_yet_is_waited_for_not_lost(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cloudnet.agent")
    client = ApiClient(f"http://127.0.0.1:{free_port()}", "h", timeout=1)
    _run_until(Agent(client, _NoDataplane(), heartbeat_interval=60), caplog, "waiting for the API")  # type: ignore[arg-type]
    assert "lost the API" not in caplog.text


class _Reached:
    """An API that answers the registration, then drops the connection."""

    def heartbeat(self, report: dict[str, Any]) -> dict[str, Any]:
        return {}

    def desired_state(self, since: int | None = None) -> dict[str, Any]:
        raise httpx.ConnectError("connection reset")


def test_losing_a_reached_api_is_a_loss(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cloudnet.agent")
    _run_until(Agent(_Reached(), _NoDataplane(), heartbeat_interval=60), caplog, "lost the API")  # type: ignore[arg-type]
    assert "waiting for the API" not in caplog.text

"""The Docker driver served on a Unix socket of the test's own, against a real server (and agent, for joins).
Import `driver_for` into a conftest or test module to use it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cloudnet.docker.app import start_in_thread
from cloudnet.docker.cloudnet_api import CloudnetApi
from cloudnet.docker.plugin import Plugin
from cloudnet.docker.state import State
from tests.support.server import RunningServer

PLUGINS = Path("/run/docker/plugins")  # where dockerd looks (a socket of the test's own name there)


@dataclass
class Driver:
    name: str  # the plugin's name for dockerd (its socket's file name)
    path: Path
    client: httpx.Client  # speaks to the socket as dockerd does

    def call(self, method: str, body: object = None) -> httpx.Response:
        return self.client.post(f"/{method}", json=body)


def start_driver(url: str, token: str, host: str, state: Path) -> Iterator[Driver]:
    name = f"cnt{uuid.uuid4().hex[:8]}"
    path = PLUGINS / f"{name}.sock"
    stop = start_in_thread(Plugin(CloudnetApi(url, token), State.load(state), host, join_timeout=20), path)
    client = httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), base_url="http://plugin", timeout=30)
    try:
        yield Driver(name, path, client)
    finally:
        client.close()
        stop()


@pytest.fixture
def driver_for(server: RunningServer, tmp_path: Path) -> Iterator[object]:
    """driver_for(token, host): a driver acting with `token` for agent host `host`."""
    stack: list[Iterator[Driver]] = []

    def make(token: str, host: str = "nohost") -> Driver:
        gen = start_driver(server.url, token, host, tmp_path / f"driver-{len(stack)}.json")
        stack.append(gen)
        return next(gen)

    yield make
    for gen in stack:
        next(gen, None)

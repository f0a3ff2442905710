"""The Docker driver as `cloudnet up --docker-driver` runs it: beside the API, in the same process, acting with an
internal token the server makes for it (cloudnet.server.Companion)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cloudnet.docker.app import start_in_thread
from cloudnet.docker.cloudnet_api import CloudnetApi
from cloudnet.docker.plugin import Plugin
from cloudnet.docker.state import State

Stop = Callable[[], None]


def starter(url: str, host: str, path: Path, state: Path, join_timeout: float = 25) -> Callable[[str], Stop]:
    """What starts the driver for agent host `host` on `path` once the server gives it its token."""

    def start(token: str) -> Stop:
        plugin = Plugin(CloudnetApi(url, token), State.load(state), host, join_timeout)
        return start_in_thread(plugin, path)

    return start

"""The Docker driver as `cloudnet up --docker-driver` runs it: beside the API, in the same process, acting with an
internal token the server makes for it (cloudnet.server.Companion)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cloudnet.config import AgentConfig
from cloudnet.docker.app import start_in_thread
from cloudnet.docker.cloudnet_api import CloudnetApi
from cloudnet.docker.plugin import Plugin
from cloudnet.docker.state import State
from cloudnet.pki import tls

Stop = Callable[[], None]


def starter(agent: AgentConfig, path: Path, state: Path, join_timeout: float = 25) -> Callable[[str], Stop]:
    """What starts the driver for the agent's host on `path` once the server gives it its token: the API as the
    agent reaches it, read then (with --tls the server has made it https, verified against the cloud's CA)."""

    def start(token: str) -> Stop:
        verify = tls.client_context(agent.ca_file) if agent.ca_file is not None else True
        plugin = Plugin(CloudnetApi(agent.server, token, verify=verify), State.load(state), agent.host, join_timeout)
        return start_in_thread(plugin, path)

    return start

"""`cloudnet docker-driver`: run the Docker network and IPAM driver for this host."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_SOCKET = Path("/run/docker/plugins/cloudnet.sock")
DEFAULT_STATE = Path("/var/lib/cloudnet/docker-driver.json")


def register(app: typer.Typer) -> None:
    @app.command("docker-driver")
    def docker_driver(
        url: Annotated[str, typer.Option(envvar="CLOUDNET_URL", help="cloudnet API URL.")] = "http://127.0.0.1:9696",
        token: Annotated[str, typer.Option(envvar="CLOUDNET_TOKEN", help="The driver's token: the `service` role "
                                           "of the project docker's networks and ports belong to.")] = "admin",
        plugin_socket: Annotated[Path, typer.Option("--socket", help="Where dockerd finds the plugin; the file "
                                                    "name without .sock is the driver's name.")] = DEFAULT_SOCKET,
        agent_host: Annotated[str | None, typer.Option(help="This host's name in cloudnet (default: hostname).")]
        = None,
        state_file: Annotated[Path, typer.Option(help="What the driver remembers across restarts.")] = DEFAULT_STATE,
        join_timeout: Annotated[float, typer.Option(min=1, max=28, help="Seconds a Join waits for the port.")] = 25,
    ) -> None:  # fmt: skip
        """Serve dockerd as a network driver and IPAM driver: `docker network create -d cloudnet --ipam-driver
        cloudnet --subnet 10.1.0.0/24 net1`, then `docker run --network net1 ...`."""
        # Imported here, as the CLI's other daemons are: client commands don't pay ~0.3 s for the server stack.
        from cloudnet.docker.app import serve
        from cloudnet.docker.cloudnet_api import CloudnetApi
        from cloudnet.docker.plugin import Plugin
        from cloudnet.docker.state import State

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        plugin = Plugin(CloudnetApi(url, token), State.load(state_file), agent_host or socket.gethostname(),
                        join_timeout)  # fmt: skip
        serve(plugin, plugin_socket)

"""Run the real cloudnet API (uvicorn) in a thread on a loopback port picked by the kernel."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any

import uvicorn

from cloudnet.api.app import create_app
from cloudnet.api.auth import Authenticator
from cloudnet.config import ServerConfig
from cloudnet.store.db import Store


@dataclass
class RunningServer:
    url: str
    store: Store
    config: ServerConfig
    _server: uvicorn.Server
    _thread: threading.Thread

    @property
    def app(self) -> Any:
        """The application this server runs (its `state`: what tests look into, such as the notifier)."""
        return self._server.config.app

    @classmethod
    def start(cls, config: ServerConfig, store: Store) -> RunningServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        app = create_app(config, store, Authenticator(config.tokens_file))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        ready = threading.Event()
        # uvicorn sets `started` once it accepts connections; poll it through a condition-free wait.
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("uvicorn failed to start")
            ready.wait(0.005)
        return cls(f"http://127.0.0.1:{port}", store, config, server, thread)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

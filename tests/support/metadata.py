"""Run the real metadata API (uvicorn, in a thread) and speak to it as an agent's proxy does."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from cloudnet.metadata import signing
from cloudnet.metadata.server import MetadataApp
from cloudnet.metadata.service import uvicorn_config


def loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@dataclass
class RunningMetadata:
    url: str
    app: MetadataApp
    _server: uvicorn.Server
    _thread: threading.Thread

    @classmethod
    def start(cls, app: MetadataApp, sock: socket.socket | None = None) -> RunningMetadata:
        sock = sock or loopback_socket()
        server = uvicorn.Server(uvicorn_config(app))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 15
        while not server.started:  # uvicorn sets `started` once it accepts connections
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the metadata server did not start")
            time.sleep(0.005)
        url = "http://metadata" if sock.family == socket.AF_UNIX else f"http://127.0.0.1:{sock.getsockname()[1]}"
        return cls(url, app, server, thread)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def identity(secret: str, instance_id: str, project_id: str, forwarded_for: str = "10.0.0.5") -> dict[str, str]:
    """The headers a proxy adds for a guest it has identified."""
    return {
        "X-Instance-ID": instance_id,
        "X-Tenant-ID": project_id,
        "X-Instance-ID-Signature": signing.sign(secret, instance_id),
        "X-Forwarded-For": forwarded_for,
    }


class Guest:
    """One instance's view of the API, through a (simulated) proxy that signs for it."""

    def __init__(self, client: httpx.Client, secret: str, instance: dict[str, Any]) -> None:
        self.client = client
        self.headers = identity(secret, instance["id"], instance["project_id"])

    def get(self, path: str, **headers: str) -> httpx.Response:
        return self.client.get(path, headers={**self.headers, **headers})

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **kwargs)

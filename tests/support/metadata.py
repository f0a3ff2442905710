"""Run the real metadata API (its HTTP server on uvloop, in a thread) and speak to it as an agent's proxy does."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
import uvloop

from cloudnet.wire import signing
from cloudnet.wire.http_server import Application, HttpServer

App = TypeVar("App", bound=Application)


def loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@dataclass
class RunningMetadata(Generic[App]):
    """The metadata HTTP server serving `app` (a MetadataApp, or another application of the HTTP layer)."""

    url: str
    app: App
    server: HttpServer
    _thread: threading.Thread

    @classmethod
    def start(cls, app: App, sock: socket.socket | None = None, **options: Any) -> RunningMetadata[App]:
        """`options` go to HttpServer (timeouts, limits)."""
        sock = sock or loopback_socket()
        server = HttpServer(app, **options)

        def run() -> None:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(server.serve(sock))

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 15
        while not server.serving:  # set once it accepts connections
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the metadata server did not start")
            time.sleep(0.005)
        url = "http://metadata" if sock.family == socket.AF_UNIX else f"http://127.0.0.1:{sock.getsockname()[1]}"
        return cls(url, app, server, thread)

    def stop(self) -> None:
        self.server.stop()
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the metadata server did not stop"


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

"""cloudnet-cni's standard-library HTTP client against a local server that answers as told: envelopes, the
Neutron error shape, bodies that are not JSON or too large, a server that closes kept-alive connections, one that
never answers, and one that is not there."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cloudnet.cli.errors import ApiError, CliError
from cloudnet.cli.resources import NETWORK
from cloudnet.cni import http

ANSWERS: dict[str, tuple[int, bytes]] = {
    "/v2.0/networks/n1": (200, b'{"network": {"id": "n1"}}'),
    "/v2.0/networks?name=a+b": (200, b'{"networks": [{"id": "n2"}]}'),
    "/v2.0/networks/gone": (404, b'{"NeutronError": {"type": "NetworkNotFound", "message": "no such", "detail": ""}}'),
    "/v2.0/networks/text": (200, b"<html>"),
    "/v2.0/networks/huge": (200, b"[" + b"0," * (http.MAX_BODY // 2) + b"0]"),
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/v2.0/networks/slow":
            threading.Event().wait(2)
        assert self.headers["X-Auth-Token"] == "tok"
        status, body = ANSWERS.get(self.path, (500, b"{}"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if self.path == "/v2.0/networks/n1":
            self.close_connection = True  # a kept-alive connection closed: the next GET reconnects

    def do_DELETE(self) -> None:
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_answers_and_errors(url: str) -> None:
    client = http.PluginClient(url, "tok", 1.0)
    assert client.show(NETWORK, "n1") == {"id": "n1"}
    assert client.list_all(NETWORK, [("name", "a b")]) == [{"id": "n2"}]  # after the server closed the first
    client.remove(NETWORK, "n1")
    with pytest.raises(ApiError) as err:
        client.show(NETWORK, "gone")
    assert err.value.status == 404 and err.value.type == "NetworkNotFound"
    for path, words in (("text", "not JSON"), ("huge", "over"), ("slow", "did not answer")):
        with pytest.raises(CliError, match=words):
            client.show(NETWORK, path)
    client.close()


def test_nothing_there_and_bad_urls() -> None:
    with pytest.raises(CliError, match="cannot reach"):
        http.PluginClient("http://127.0.0.1:9", "tok", 1.0).show(NETWORK, "n1")
    for bad in ("ftp://x", "http://", "127.0.0.1:9696"):
        with pytest.raises(CliError, match="must start with"):
            http.PluginClient(bad, "tok", 1.0)

"""The HTTP/1.1 request and response model the metadata proxy and the metadata API share, with the size limits
and the rendering of an answer. Parsing is llhttp's (httptools): the server's connections (http_connection.py)
and the proxy's upstream connections (agent/metadata/upstream.py) both read with it, so the proxy and the API
behind it can never disagree about where one request ends.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

MAX_HEAD = 64 * 1024
MAX_BODY = 1024 * 1024
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}


class HttpError(Exception):
    """The peer sent something that is not acceptable HTTP; `status` is what to answer it."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Request:
    """One request. The HTTP servers hand over the header lines as parsed (`raw_headers`, bytes as sent):
    decoding them all costs more than answering a cached metadata request, and most readers need two or
    three of them. `headers` decodes them on first use: names lower-cased, values without surrounding blanks."""

    __slots__ = ("_headers", "_raw_headers", "body", "method", "peer", "target", "version")

    def __init__(
        self,
        method: str,
        target: str,
        version: str,
        headers: list[tuple[str, str]] | None = None,
        body: bytes = b"",
        raw_headers: list[tuple[bytes, bytes]] | None = None,
        peer: Any = None,
    ) -> None:
        self.method = method
        self.peer = peer  # the client's socket address (`peername`), when a server knows it
        self.target = target
        self.version = version
        self.body = body
        self._headers = headers if headers is not None or raw_headers is not None else []
        self._raw_headers = raw_headers

    @property
    def headers(self) -> list[tuple[str, str]]:
        headers = self._headers
        if headers is None:
            headers = self._headers = [
                (n.decode("ascii").lower(), v.decode("latin-1").strip(" \t")) for n, v in self.raw_headers
            ]
        return headers

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        raw = self._raw_headers
        if raw is None:
            raw = self._raw_headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in self.headers]
        return raw

    @property
    def keep_alive(self) -> bool:
        tokens = _connection_tokens(self.headers)
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens

    @property
    def path(self) -> str:
        """The target's path, percent-decoded and without its query; `http://host/x` (absolute-form) gives `/x`."""
        return _path(self.target)

    def __repr__(self) -> str:
        return f"Request({self.method!r}, {self.target!r}, {self.version!r}, {self.headers!r}, {self.body!r})"


@dataclass(slots=True)
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    keep_alive: bool = True
    # The whole answer to a GET on a kept-alive connection, rendered ahead: a cached answer is then written
    # as it is (rendering it again for every request was a measurable share of the metadata API's work).
    wire: bytes | None = None


@functools.lru_cache(maxsize=1024)  # the same few dozen targets over and over
def _path(target: str) -> str:
    if not target.startswith("/"):
        rest = target.split("://", 1)[-1]
        target = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    path = target.split("?", 1)[0]
    return unquote(path) if "%" in path else path


def _connection_tokens(headers: list[tuple[str, str]]) -> set[str]:
    return {tok.strip().lower() for name, value in headers if name == "connection" for tok in value.split(",")}


def render_response(
    status: int, headers: list[tuple[str, str]], body: bytes, keep_alive: bool, head_length: int | None = None
) -> bytes:
    """The response bytes; for a HEAD request pass `head_length` (the length a GET would have), no body."""
    head = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} Unknown\r\n"
    for name, value in headers:
        head += f"{name}: {value}\r\n"
    head += f"Content-Length: {len(body) if head_length is None else head_length}\r\n"
    head += "Connection: keep-alive\r\n\r\n" if keep_alive else "Connection: close\r\n\r\n"
    out = head.encode("latin-1")
    return out if head_length is not None else out + body


def with_first_header(response: Response, name: str, value: str) -> Response:
    """`response` with one more header line, first (a request's id: the rest of the answer may be shared by many
    requests), its rendering spliced rather than made again."""
    wire = response.wire
    if wire is not None:
        end = wire.index(b"\r\n") + 2  # after the status line
        wire = b"".join((wire[:end], f"{name}: {value}\r\n".encode("latin-1"), wire[end:]))
    return Response(response.status, [(name, value), *response.headers], response.body, response.keep_alive, wire)


def plain(status: int, text: str, *headers: tuple[str, str]) -> Response:
    return Response(status, [("Content-Type", "text/plain; charset=utf-8"), *headers], text.encode())

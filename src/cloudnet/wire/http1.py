"""Just enough HTTP/1.1 for the metadata proxy and the metadata API (a protocol module both sides share): read a
whole request or response from a stream, write one.

Neutron's agent read a request with one `recv(4096)`, so larger heads or bodies were cut short. Here heads are
read up to their blank line (bounded), bodies by Content-Length or chunked encoding (bounded), and anything
ambiguous (both framings, conflicting lengths, folded or malformed header lines) is refused, since the proxy
must never disagree with the server behind it about where one request ends.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

MAX_HEAD = 64 * 1024
MAX_BODY = 1024 * 1024
_TOKEN_CHARS = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
# Control characters, space and DEL: never part of a request target.
_BAD_TARGET = re.compile(r"[\x00-\x20\x7f]")


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


def _is_token(value: bytes) -> bool:
    # translate() deletes every token character in C: a token is what leaves nothing behind.
    return bool(value) and not value.translate(None, _TOKEN_CHARS)


def parse_headers(lines: list[bytes]) -> list[tuple[str, str]]:
    headers = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            raise HttpError(400, "folded header lines are not accepted")
        name, sep, value = line.partition(b":")
        if not sep or not _is_token(name):  # also refuses "Name : value", a classic smuggling vector
            raise HttpError(400, "malformed header line")
        headers.append((name.decode("ascii").lower(), value.strip(b" \t").decode("latin-1")))
    return headers


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError(431, "request head too large") from None


async def read_request(
    reader: asyncio.StreamReader, max_body: int = MAX_BODY, send_continue: Callable[[], None] | None = None
) -> Request | None:
    """The next request on the connection, body included; None if the peer closed cleanly between requests.

    `reader` must have been created with a limit of MAX_HEAD (asyncio.start_server(limit=...)).
    `send_continue` answers `Expect: 100-continue` before the body is read (curl waits a second otherwise)."""
    try:
        head = await _read_head(reader)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise HttpError(400, "incomplete request head") from None
    lines = head[:-4].split(b"\r\n")
    while lines and not lines[0]:  # tolerated: stray CRLFs before a request line (RFC 9112 2.2)
        lines.pop(0)
    if not lines:
        return None
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _is_token(parts[0]) or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise HttpError(400, "malformed request line")
    target = parts[1].decode("latin-1")
    if not target or _BAD_TARGET.search(target):
        raise HttpError(400, "malformed request target")
    request = Request(parts[0].decode("ascii"), target, parts[2].decode("ascii"), parse_headers(lines[1:]))
    framed = any(name in ("content-length", "transfer-encoding") for name, _v in request.headers)
    if (
        send_continue is not None
        and framed
        and any(name == "expect" and value.lower() == "100-continue" for name, value in request.headers)
    ):
        send_continue()
    try:
        request.body = await _read_body(reader, request.headers, max_body, request_side=True)
    except asyncio.LimitOverrunError:
        raise HttpError(400, "malformed chunked body") from None
    return request


async def _read_body(
    reader: asyncio.StreamReader, headers: list[tuple[str, str]], max_body: int, request_side: bool
) -> bytes:
    encodings = [v.strip().lower() for n, v in headers if n == "transfer-encoding" for v in v.split(",")]
    lengths = {v.strip() for n, v in headers if n == "content-length"}
    if encodings:
        if lengths or encodings != ["chunked"]:
            raise HttpError(400, "unsupported or ambiguous message framing")
        return await _read_chunked(reader, max_body)
    if len(lengths) > 1:
        raise HttpError(400, "conflicting Content-Length headers")
    if lengths:
        value = lengths.pop()
        if not value.isascii() or not value.isdigit():
            raise HttpError(400, "malformed Content-Length")
        size = int(value)
        if size > max_body:
            raise HttpError(413, "request body too large")
        return await reader.readexactly(size) if size else b""
    if request_side:
        return b""  # a request without framing headers has no body
    return await _read_to_close(reader, max_body)


async def _read_chunked(reader: asyncio.StreamReader, max_body: int) -> bytes:
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HttpError(400, "malformed chunk size") from None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers: read and dropped
                pass
            return bytes(body)
        if size < 0 or len(body) + size > max_body:
            raise HttpError(413, "request body too large")
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise HttpError(400, "malformed chunk")


async def _read_to_close(reader: asyncio.StreamReader, max_body: int) -> bytes:
    body = await reader.read(max_body + 1)
    while chunk := await reader.read(max_body + 1 - len(body)):
        body += chunk
        if len(body) > max_body:
            break
    if len(body) > max_body:
        raise HttpError(502, "response body too large")
    return body


async def read_response(reader: asyncio.StreamReader, method: str, max_body: int = MAX_BODY) -> Response:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or not parts[1].isdigit():
        raise HttpError(502, "malformed response from the metadata API")
    status = int(parts[1])
    headers = parse_headers(lines[1:])
    no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
    body = b"" if no_body else await _read_body(reader, headers, max_body, request_side=False)
    # Without framing the body ran to the end of the connection: it cannot carry another exchange.
    framed = no_body or any(n in ("content-length", "transfer-encoding") for n, _v in headers)
    keep = parts[0] == b"HTTP/1.1" and "close" not in _connection_tokens(headers) and framed
    return Response(status, headers, body, keep)


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


def plain(status: int, text: str, *headers: tuple[str, str]) -> Response:
    return Response(status, [("Content-Type", "text/plain; charset=utf-8"), *headers], text.encode())

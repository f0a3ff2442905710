"""The SmartOS metadata protocol, version 2 and the version 1 fallback: lines, frames, CRC, request ids.

Pure functions over bytes, no I/O: the agent's socket service (agent/metadata/mdata_service) and the guest
client (cli/mdata) share them. Wire format (reference/metadata.md §2.3-2.6, joyent/smartos-live agent.js,
joyent/mdata-client proto.c):

    request  (v1)  <CMD> [arg]\\n                       NEGOTIATE V2 -> V2_OK, bare \\n -> invalid command
    frame    (v2)  V2 <clen> <crc> <body>\\n            body = <reqid> SP <code> [SP <base64 payload>]

`clen` is the byte length of the body, `crc` the zlib CRC-32 of the body as exactly 8 lowercase hex digits,
`reqid` 8 lowercase hex digits chosen by the client and echoed by the server. A frame whose length, CRC or
request id does not check out is dropped without a reply: the client times out and resets, exactly as
with the SmartOS agent. This module only imports the standard library, so the guest client stays light.
"""

from __future__ import annotations

import binascii
import os
import re
import zlib
from dataclasses import dataclass

# Longest line accepted, either way. A PUT of a 64 KiB value is about 117 KiB on the wire (the value is
# base64-encoded twice); 1 MiB leaves room without letting a guest make the agent buffer without bound.
MAX_LINE = 1 << 20

SUCCESS, NOTFOUND, FAILURE = "SUCCESS", "NOTFOUND", "FAILURE"
GET, KEYS, PUT, DELETE = "GET", "KEYS", "PUT", "DELETE"
INVALID_COMMAND = b"invalid command\n"
V2_OK = b"V2_OK\n"
NEGOTIATE_V2 = b"NEGOTIATE V2\n"

_V2_FRAME = re.compile(rb"V2 ([0-9]{1,8}) ([0-9a-f]{8}) (.+)", re.S)
_V1_LINE = re.compile(rb"(\S+)\s?(.*)", re.S)
_REQID = re.compile(rb"[0-9a-f]{8}")
_V2_REPLY = re.compile(rb"V2 [0-9]{1,8} [0-9a-f]{8} [0-9a-f]{8} (?:SUCCESS|NOTFOUND|FAILURE)(?: \S*)?")
_REPLY_LINES = frozenset((INVALID_COMMAND.rstrip(), V2_OK.rstrip(), b"SUCCESS", b"NOTFOUND", b"FAILURE", b"."))


def crc32_hex(body: bytes) -> bytes:
    """CRC-32 (IEEE, as zlib) of `body` as the protocol prints it: 8 lowercase hex digits, zero-padded."""
    return b"%08x" % zlib.crc32(body)


def b64encode(data: bytes) -> bytes:
    return binascii.b2a_base64(data, newline=False)


def b64decode(data: bytes) -> bytes | None:
    """Standard base64 with padding, strictly (mdata-client rejects anything else too); None if invalid."""
    try:
        return binascii.a2b_base64(data, strict_mode=True)
    except binascii.Error:
        return None


def new_reqid() -> bytes:
    return os.urandom(4).hex().encode()


# -- lines --------------------------------------------------------------------------------------


class LineSplitter:
    """Splits a byte stream into LF-terminated lines, dropping any line longer than `max_line`.

    An over-long line is discarded as it arrives (nothing is buffered past the limit) up to its newline;
    the lines after it are read normally, so one bad request never costs the connection. Each byte is looked at
    once: a line that arrives a byte at a time costs what it costs whole (a split of the whole buffer on every
    read made a slow 1 MiB line cost seconds).
    """

    __slots__ = ("_buf", "_skipping", "dropped", "max_line")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._skipping = False
        self.dropped = 0

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        if self._skipping:  # the rest of an over-long line: up to its newline
            start = data.find(b"\n") + 1
            if not start:
                return out
            self._skipping = False
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                if start < len(data):
                    if len(self._buf) + len(data) - start > self.max_line:
                        self.dropped += 1
                        self._skipping = True
                        self._buf = bytearray()
                    else:
                        self._buf += memoryview(data)[start:]
                return out
            if self._buf:
                if len(self._buf) + end - start <= self.max_line:
                    self._buf += memoryview(data)[start:end]
                    out.append(bytes(self._buf))
                else:
                    self.dropped += 1
                self._buf = bytearray()
            elif end - start <= self.max_line:
                out.append(data[start:end])
            else:
                self.dropped += 1
            start = end + 1

    @property
    def pending(self) -> int:
        return len(self._buf)


# -- server side: parsing requests, formatting responses ------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """One request to answer. `arg` is the decoded v2 payload, or the rest of a v1 line (stripped)."""

    op: str
    arg: bytes
    reqid: bytes | None = None  # None: a v1 request (no id, no binary safety, no PUT/DELETE)

    @property
    def v2(self) -> bool:
        return self.reqid is not None


@dataclass(frozen=True, slots=True)
class Reply:
    """A fixed answer that needs no lookup (session start, unparseable v1 lines, bad v2 payloads)."""

    data: bytes


def parse_request(line: bytes) -> Request | Reply | None:
    """What a server does with one line: a request, a fixed reply, or None to drop it silently.

    Follows agent.js: trailing whitespace is ignored; an empty or unparseable line, or NEGOTIATE/GET
    without an argument, gets `invalid command`; a v2 frame failing its length, CRC or request-id
    check is dropped; an authentic frame with an undecodable payload gets a FAILURE for that request.
    """
    line = line.rstrip()
    if line.startswith(b"V2 "):
        return _parse_v2(line)
    m = _V1_LINE.fullmatch(line)
    if m is None:
        return Reply(INVALID_COMMAND)
    cmd, arg = m.group(1), m.group(2).strip()
    if cmd == b"V2":  # a frame that is not "V2 <clen> ...": broken, dropped like any bad frame
        return None
    if cmd in (b"NEGOTIATE", b"GET") and not arg:
        return Reply(INVALID_COMMAND)
    if cmd == b"NEGOTIATE":
        return Reply(V2_OK if arg == b"V2" else b"FAILURE\n")
    return Request(cmd.decode("ascii", "replace"), arg)


def looks_like_reply(line: bytes) -> bool:
    """Whether `line` is shaped like a server's reply line rather than a request. On a serial line a guest tty
    left in cooked mode echoes what the server sends back to it; answering the echo (with a FAILURE, whose echo
    is answered, ...) would loop forever, so the serial service drops such lines."""
    line = line.strip()
    return line in _REPLY_LINES or _V2_REPLY.fullmatch(line) is not None


def _parse_v2(line: bytes) -> Request | Reply | None:
    m = _V2_FRAME.fullmatch(line)
    if m is None:
        return None
    body = m.group(3)
    if int(m.group(1)) != len(body) or m.group(2) != crc32_hex(body):
        return None
    reqid, sep, rest = body.partition(b" ")
    if not sep or not _REQID.fullmatch(reqid):
        return None
    code, _sep, payload = rest.partition(b" ")
    op = code.decode("ascii", "replace")
    if not code or b" " in payload:
        return Reply(v2_response(reqid, FAILURE, b"Invalid Request"))
    arg = b64decode(payload) if payload else b""
    if arg is None:
        return Reply(v2_response(reqid, FAILURE, f"Invalid {op} Request".encode()))
    return Request(op, arg, reqid)


def v2_response(reqid: bytes, code: str, value: bytes | None = None) -> bytes:
    """A response frame; an empty value is sent without a payload (as agent.js does)."""
    body = reqid + b" " + code.encode("ascii")
    if value:
        body += b" " + b64encode(value)
    return b"V2 %d %s %s\n" % (len(body), crc32_hex(body), body)


def v1_response(code: str, value: bytes | None = None) -> bytes:
    """`SUCCESS` + the value's lines, dot-stuffed, + a lone `.`; other codes are one line."""
    if code != SUCCESS:
        return code.encode("ascii") + b"\n"
    text = value or b""
    if text.startswith(b"."):
        text = b"." + text
    text = text.replace(b"\n.", b"\n..")
    return b"SUCCESS\n" + text + b"\n.\n"


def response(request: Request, code: str, value: bytes | None = None) -> bytes:
    if request.reqid is not None:
        return v2_response(request.reqid, code, value)
    return v1_response(code, value)


def put_payload(key: str, value: bytes) -> bytes:
    """The PUT argument: base64(key) SP base64(value) (the frame encodes this whole string again)."""
    return b64encode(key.encode()) + b" " + b64encode(value)


def parse_put_payload(arg: bytes) -> tuple[str, bytes] | None:
    """(key, value) of a PUT argument, or None when it is not exactly two base64 terms."""
    terms = arg.strip().split(b" ")
    if len(terms) != 2:
        return None
    key, value = b64decode(terms[0]), b64decode(terms[1])
    if key is None or value is None:
        return None
    try:
        return key.decode().strip(), value
    except UnicodeDecodeError:
        return None


# -- client side: building requests, reading responses ------------------------------------------


@dataclass(frozen=True, slots=True)
class Response:
    code: str  # SUCCESS | NOTFOUND | FAILURE
    value: bytes | None = None


def v2_request(reqid: bytes, op: str, payload: bytes | None = None) -> bytes:
    body = reqid + b" " + op.encode("ascii")
    if payload:  # an empty payload would leave a trailing blank, which servers strip (and then drop the frame)
        body += b" " + b64encode(payload)
    return b"V2 %d %s %s\n" % (len(body), crc32_hex(body), body)


def parse_v2_response(line: bytes, reqid: bytes) -> Response | None:
    """The response to request `reqid`, or None for a frame to ignore (bad length/CRC, another id).

    The checks of mdata-client's `proto_parse_v2`: a non-empty body of exactly `clen` bytes, a matching
    CRC, and our request id.
    """
    m = _V2_FRAME.fullmatch(line.rstrip(b"\r"))
    if m is None:
        return None
    body = m.group(3)
    if int(m.group(1)) != len(body) or m.group(2) != crc32_hex(body):
        return None
    parts = body.split(b" ")
    if not 2 <= len(parts) <= 3 or parts[0] != reqid or parts[1] not in (b"SUCCESS", b"NOTFOUND", b"FAILURE"):
        return None
    value = None
    if len(parts) == 3:
        value = b64decode(parts[2])
        if value is None:
            return None
    return Response(parts[1].decode(), value)


class V1Reader:
    """Collects a v1 response: one status line, and for SUCCESS the value lines up to a lone `.`."""

    def __init__(self) -> None:
        self._status: str | None = None
        self._lines: list[bytes] = []

    def feed(self, line: bytes) -> Response | None:
        line = line.rstrip(b"\r")
        if self._status is None:
            status = line.decode("ascii", "replace")
            if status != SUCCESS:
                return Response(status if status in (NOTFOUND, FAILURE) else FAILURE)
            self._status = status
            return None
        if line == b".":
            return Response(SUCCESS, b"\n".join(self._lines))
        self._lines.append(line[1:] if line.startswith(b"..") else line)
        return None

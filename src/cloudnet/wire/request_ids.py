"""Request ids: the `req-<uuid4>` Neutron (oslo.middleware) gives every API request, answered in
`X-OpenStack-Request-ID`, recorded with the changes the request makes and carried into every log line it causes,
on the server and in the agent's pass that realises the change: one grep follows a port from POST to kernel.

The id of the work in hand lives in a context variable (per request task on the server; per pass on the agent),
read by the log filter (wire/logs.py) and by the store when it records an event."""

from __future__ import annotations

import os
import re
from contextvars import ContextVar

HEADER = "X-OpenStack-Request-ID"
# What a client may send, first match wins: OpenStack clients send the first, proxies and other tools the second.
CLIENT_HEADERS = (b"x-openstack-request-id", b"x-request-id")
_FIRST, _OTHER = CLIENT_HEADERS
_VARIANT = "89ab"  # RFC 4122's variant: the first hex digit of the fourth group
MAX_LENGTH = 64
# A client's id is kept only if it is short and of characters that need no escaping anywhere (a log line, JSON, a
# shell): a hostile one can neither forge log lines nor bloat them. Anything else is replaced by a fresh id.
_WELL_FORMED = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_LENGTH - 1}}}")
PATTERN = _WELL_FORMED.pattern

# The id (or, in an agent's pass, the ids, comma-separated) of the work this context does; None outside a request.
current: ContextVar[str | None] = ContextVar("cloudnet_request_id", default=None)


def new() -> str:
    """`req-<uuid4>` as oslo.middleware makes it, written out from 16 random bytes: half the time of uuid.uuid4()
    (the metadata relay makes one per request), and no `uuid` import on cloudnet-cni's start-up."""
    h = os.urandom(16).hex()
    return f"req-{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


def well_formed(raw: bytes | str | None) -> str | None:
    """The client's id when it may be kept as it is, else None."""
    if raw is None or len(raw) > MAX_LENGTH:
        return None
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    return text if _WELL_FORMED.fullmatch(text) else None


def from_headers(headers: list[tuple[bytes, bytes]]) -> str:
    """The id of a request with these header lines (names in any case: ASGI's are lower-cased, the metadata server's
    as received): the client's when well-formed, else a new one."""
    other = None
    for key, value in headers:  # (one pass, names compared only at their length: the relay asks on every request)
        size = len(key)
        if size == len(_FIRST) and key.lower() == _FIRST and (kept := well_formed(value)) is not None:
            return kept
        if size == len(_OTHER) and other is None and key.lower() == _OTHER:
            other = well_formed(value)
    return other or new()


def split_first(headers: list[tuple[bytes, bytes]]) -> tuple[str, list[tuple[bytes, bytes]]]:
    """(the request's id, the other header lines). The metadata relay sends its id as the first line: the lines
    after it are the same for every request of one guest, and are what the metadata API's caches are keyed by.
    From any other sender: as `from_headers`, the lines as they are."""
    if headers:
        name, value = headers[0]
        if len(name) == len(_FIRST) and name.lower() == _FIRST and (kept := well_formed(value)) is not None:
            return kept, headers[1:]
    return from_headers(headers), headers


def joined(ids: list[str], most: int = 8) -> str | None:
    """Several ids as one context value (an agent's pass realises several requests): at most `most`, then a count."""
    unique = list(dict.fromkeys(ids))
    if not unique:
        return None
    shown = ",".join(unique[:most])
    return shown if len(unique) <= most else f"{shown},+{len(unique) - most}"

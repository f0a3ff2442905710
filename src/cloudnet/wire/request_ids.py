"""Request ids: the `req-<uuid4>` Neutron (oslo.middleware) gives every API request, answered in
`X-OpenStack-Request-ID`, recorded with the changes the request makes and carried into every log line it causes,
on the server and in the agent's pass that realises the change: one grep follows a port from POST to kernel.

The id of the work in hand lives in a context variable (per request task on the server; per pass on the agent),
read by the log filter (wire/logs.py) and by the store when it records an event."""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

HEADER = "X-OpenStack-Request-ID"
# What a client may send, first match wins: OpenStack clients send the first, proxies and other tools the second.
CLIENT_HEADERS = (b"x-openstack-request-id", b"x-request-id")
MAX_LENGTH = 64
# A client's id is kept only if it is short and of characters that need no escaping anywhere (a log line, JSON, a
# shell): a hostile one can neither forge log lines nor bloat them. Anything else is replaced by a fresh id.
_WELL_FORMED = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_LENGTH - 1}}}")
PATTERN = _WELL_FORMED.pattern

# The id (or, in an agent's pass, the ids, comma-separated) of the work this context does; None outside a request.
current: ContextVar[str | None] = ContextVar("cloudnet_request_id", default=None)


def new() -> str:
    return f"req-{uuid.uuid4()}"


def well_formed(raw: bytes | str | None) -> str | None:
    """The client's id when it may be kept as it is, else None."""
    if raw is None or len(raw) > MAX_LENGTH:
        return None
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    return text if _WELL_FORMED.fullmatch(text) else None


def from_headers(headers: list[tuple[bytes, bytes]]) -> str:
    """The id of a request with these (ASGI, lower-cased) headers: the client's when well-formed, else a new one."""
    for name in CLIENT_HEADERS:
        for key, value in headers:
            if key == name and (kept := well_formed(value)) is not None:
                return kept
    return new()


def joined(ids: list[str], most: int = 8) -> str | None:
    """Several ids as one context value (an agent's pass realises several requests): at most `most`, then a count."""
    unique = list(dict.fromkeys(ids))
    if not unique:
        return None
    shown = ",".join(unique[:most])
    return shown if len(unique) <= most else f"{shown},+{len(unique) - most}"

"""cloudnet's Neutron v2.0 resources as a client sees them (kinds, envelopes, member paths) and the operations on
them, over any transport: the CLI's is httpx (cli/client.py), cloudnet-cni's the standard library's (a plugin is a
process per call, and its start-up is on every container's path)."""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from cloudnet.cli.errors import ApiError, CliError

DEFAULT_URL = "http://127.0.0.1:9696"
DEFAULT_TOKEN = "admin"
DEFAULT_TIMEOUT = 30.0
API_PREFIX = "/v2.0"

Params = Sequence[tuple[str, str]]
Resource = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """One Neutron resource type: where it lives and how its envelope is keyed."""

    collection: str  # URL segment, e.g. "security-groups"
    key: str  # envelope key of one resource, e.g. "security_group"

    @property
    def plural_key(self) -> str:
        return f"{self.key}s"

    @property
    def label(self) -> str:
        return self.key.replace("_", " ")


NETWORK = Kind("networks", "network")
SUBNET = Kind("subnets", "subnet")
PORT = Kind("ports", "port")
ROUTER = Kind("routers", "router")
SECURITY_GROUP = Kind("security-groups", "security_group")
SECURITY_GROUP_RULE = Kind("security-group-rules", "security_group_rule")
INSTANCE = Kind("instances", "instance")
HOST = Kind("hosts", "host")


def api_root(url: str) -> str:
    """The `/v2.0` root under `url`, accepting a URL that already ends with it."""
    base = url.rstrip("/")
    return base if base.endswith(API_PREFIX) else base + API_PREFIX


class Resources(ABC):
    """Requests against `<url>/v2.0`, authenticated with `X-Auth-Token`; every failure is a `CliError` (an
    `ApiError` when cloudnet answered with an error status)."""

    url: str
    last_request_id = ""  # the X-OpenStack-Request-ID of the last answer, when the client keeps it (cloudnet-cni)

    @abstractmethod
    def request(self, method: str, path: str, *, params: Params | None = None, body: Any = None) -> Any:
        """The decoded JSON answer (None for an empty one) of `method` on `path`, relative to /v2.0."""

    # Raw verbs; `path` is relative to /v2.0, e.g. "networks/<id>".

    def get(self, path: str, params: Params | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body=body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body=body)

    def delete(self, path: str) -> None:
        self.request("DELETE", path)

    # Resource operations, unwrapping Neutron's envelopes.

    def list_all(self, kind: Kind, params: Params | None = None) -> list[Resource]:
        return self._unwrap(self.get(kind.collection, params), kind.plural_key, list, "GET", kind.collection)

    def show(self, kind: Kind, ident: str, params: Params | None = None) -> Resource:
        path = member_path(kind, ident)
        return self._unwrap(self.get(path, params), kind.key, dict, "GET", path)

    def show_settled(self, kind: Kind, ident: str, wait: float, pause: float) -> Resource:
        """The object as the server answers a long poll (GET ?wait=S: once it has settled, e.g. an instance plugged,
        or after `wait` seconds); one still building from a server that answered at once (that does not wait) is
        shown after a `pause`, so that a caller's loop does not spin."""
        asked = time.monotonic()
        found = self.show(kind, ident, [("wait", f"{max(wait, 0.0):.2f}")])
        if found.get("status") == "BUILD" and time.monotonic() - asked < wait / 2:
            time.sleep(pause)
        return found

    def create(self, kind: Kind, body: Resource) -> Resource:
        return self._unwrap(self.post(kind.collection, {kind.key: body}), kind.key, dict, "POST", kind.collection)

    def update(self, kind: Kind, ident: str, body: Resource) -> Resource:
        path = member_path(kind, ident)
        return self._unwrap(self.put(path, {kind.key: body}), kind.key, dict, "PUT", path)

    def remove(self, kind: Kind, ident: str) -> None:
        self.delete(member_path(kind, ident))

    def find(self, kind: Kind, value: str, params: Params = ()) -> Resource:
        """The resource whose id is `value`, else the only one named `value` (within `params`)."""
        if value:  # "" is no id, but it is a name (Neutron's default one)
            try:
                return self.show(kind, value)
            except ApiError as exc:
                if exc.status != 404:
                    raise
        matches = self.list_all(kind, [*params, ("name", value)])
        if not matches:
            raise CliError(f"No {kind.label} found for '{value}'")
        if len(matches) > 1:
            raise CliError(f"More than one {kind.label} named '{value}'; use its id")
        return matches[0]

    def find_id(self, kind: Kind, value: str, params: Params = ()) -> str:
        return str(self.find(kind, value, params)["id"])

    def _unwrap(self, payload: Any, key: str, expected: type, method: str, path: str) -> Any:
        """`payload[key]` of a Neutron envelope; anything else is an error, not a traceback."""
        if not isinstance(payload, dict) or not isinstance(payload.get(key), expected):
            what = "list" if expected is list else "object"
            raise CliError(f"cloudnet at {self.url} answered {method} {path} without a '{key}' {what}")
        return payload[key]


def member_path(kind: Kind, ident: str) -> str:
    """`<collection>/<ident>`, `ident` kept one path segment whatever the user typed.

    '/', '?', spaces are percent-encoded by `quote`; "." and ".." would be dot segments that the URL
    parser resolves away (`networks/..` is `/v2.0/`), so their dots are encoded too; "" would be the
    collection itself.
    """
    if not ident:
        raise CliError(f"A {kind.label} id cannot be empty")
    segment = quote(ident, safe="")
    if segment in (".", ".."):
        segment = segment.replace(".", "%2E")
    return f"{kind.collection}/{segment}"


def reason(exc: Exception) -> str:
    # "[Errno 111] Connection refused" -> "Connection refused"
    return re.sub(r"^\[Errno -?\d+\]\s*", "", str(exc)) or type(exc).__name__

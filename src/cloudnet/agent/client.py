"""The agent's view of the API: register/heartbeat, desired state, events, port status reports, and the
instance metadata writes guests make over their SmartOS metadata sockets."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from cloudnet import __version__

REVISION_HEADER = "X-Cloudnet-Revision"


@dataclass(frozen=True)
class InstanceMetadata:
    """An instance's stored metadata, and a revision of the event log that includes it."""

    metadata: dict[str, Any]
    internal_metadata: dict[str, Any]
    revision: int


def error_message(exc: httpx.HTTPStatusError) -> str:
    """The NeutronError message of a failed call, else its status line."""
    try:
        return str(exc.response.json()["NeutronError"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"{exc.response.status_code} {exc.response.reason_phrase}"


def _item_path(instance_id: str, key: str) -> str:
    # One path segment per key whatever it holds; "." and ".." would be dot segments a URL parser removes.
    segment = quote(key, safe="")
    if segment in (".", ".."):
        segment = segment.replace(".", "%2E")
    return f"/instances/{quote(instance_id, safe='')}/metadata/{segment}"


class ApiClient:
    def __init__(self, server: str, host: str, token: str = "agent", timeout: float = 30.0,
                 tls: ssl.SSLContext | None = None) -> None:  # fmt: skip
        """`token` "": none sent (a host certificate in `tls` is the credential)."""
        self.host = host
        self._http = httpx.Client(base_url=server.rstrip("/") + "/v2.0", headers={"X-Auth-Token": token} if token
                                  else {}, timeout=timeout, verify=True if tls is None else tls)  # fmt: skip

    def close(self) -> None:
        self._http.close()

    def _check(self, r: httpx.Response) -> Any:
        r.raise_for_status()
        return r.json()

    def heartbeat(self, report: dict[str, Any]) -> dict[str, Any]:
        body = {"host": {"agent_version": __version__, "report": report}}
        return self._check(self._http.put(f"/hosts/{self.host}", json=body))["host"]

    def desired_state(self) -> dict[str, Any]:
        return self._check(self._http.get(f"/hosts/{self.host}/state"))  # type: ignore[no-any-return]

    def events(self, since: int, timeout: float) -> tuple[list[dict[str, Any]], int]:
        r = self._http.get("/events", params={"since": since, "timeout": timeout}, timeout=timeout + 30)
        body = self._check(r)
        return body["events"], int(body["revision"])

    def report_ports(self, ports: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The server's answer (updated, ignored, revision_before, revision), or None with nothing to report."""
        if not ports:
            return None
        return dict(self._check(self._http.put(f"/hosts/{self.host}/ports", json={"ports": ports})))

    # -- instance metadata (SmartOS PUT/DELETE from guests) --

    def _metadata(self, r: httpx.Response) -> InstanceMetadata:
        body = self._check(r)
        return InstanceMetadata(body["metadata"], body["internal_metadata"], int(r.headers[REVISION_HEADER]))

    def instance_metadata(self, instance_id: str) -> InstanceMetadata:
        return self._metadata(self._http.get(f"/instances/{quote(instance_id, safe='')}/metadata"))

    def put_instance_metadata(self, instance_id: str, key: str, value: str) -> InstanceMetadata:
        """Store one key where the guest rules put it (`*_pw` in internal metadata); 403 for read-only ones."""
        return self._metadata(self._http.put(_item_path(instance_id, key), json={"value": value}))

    def delete_instance_metadata(self, instance_id: str, key: str) -> bool:
        """Remove one key; False when there was no such key (not an error for a guest's DELETE)."""
        r = self._http.delete(_item_path(instance_id, key))
        if r.status_code == 404 and _error_type(r) == "MetadataItemNotFound":
            return False
        r.raise_for_status()
        return True


def _error_type(r: httpx.Response) -> str | None:
    try:
        return str(r.json()["NeutronError"]["type"])
    except (ValueError, KeyError, TypeError):
        return None

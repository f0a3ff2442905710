"""The agent's view of the API: register/heartbeat, desired state, events, port status reports, and the
instance metadata writes guests make over their SmartOS metadata sockets."""

from __future__ import annotations

import itertools
import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from cloudnet import __version__

log = logging.getLogger("cloudnet.agent")
REVISION_HEADER = "X-Cloudnet-Revision"
MAX_PART_PORTS = 100  # ports a part of the desired state may name (the server's services/hosts/host_qos.MAX_PORTS)


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


def servers_of(server: str | Sequence[str]) -> list[str]:
    """`URL1,URL2` (or a list) as the list of API base URLs."""
    items = server.split(",") if isinstance(server, str) else server
    urls = [url.strip().rstrip("/") for url in items if url.strip()]
    if not urls:
        raise ValueError("no API server given")
    return urls


class _Servers:
    """The API servers, one httpx client each: a request goes to the one that answered last, and on a connection
    error or a 5xx to the next in turn (any server answers any request: they share the store); when all of them
    fail, the last failure is the caller's (the agent backs off and tries again)."""

    def __init__(self, urls: list[str], headers: dict[str, str], timeout: float, verify: ssl.SSLContext | bool):
        self.urls = urls
        self._clients = [httpx.Client(base_url=url + "/v2.0", headers=headers, timeout=timeout, verify=verify)
                         for url in urls]  # fmt: skip
        self._current = 0

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        count = len(self._clients)
        order = [(self._current + step) % count for step in range(count)]
        for index, after in itertools.pairwise(order):  # (all but the last: its failure is the caller's)
            try:
                r = self._clients[index].request(method, path, **options)
            except httpx.TransportError as exc:
                log.warning("API server %s failed (%s): trying %s", self.urls[index], exc or type(exc).__name__,
                            self.urls[after])  # fmt: skip
                continue
            if r.status_code >= 500:
                log.warning("API server %s answered %d: trying %s", self.urls[index], r.status_code, self.urls[after])
                continue
            return self._answered(index, r)
        return self._answered(order[-1], self._clients[order[-1]].request(method, path, **options))

    def _answered(self, index: int, r: httpx.Response) -> httpx.Response:
        if index != self._current:
            log.warning("API server now %s (was %s)", self.urls[index], self.urls[self._current])
            self._current = index
        return r

    def get(self, path: str, **options: Any) -> httpx.Response:
        return self.request("GET", path, **options)

    def put(self, path: str, **options: Any) -> httpx.Response:
        return self.request("PUT", path, **options)

    def delete(self, path: str, **options: Any) -> httpx.Response:
        return self.request("DELETE", path, **options)

    def close(self) -> None:
        for client in self._clients:
            client.close()


class ApiClient:
    def __init__(self, server: str | Sequence[str], host: str, token: str = "agent", timeout: float = 30.0,
                 tls: ssl.SSLContext | None = None, availability_zone: str | None = None) -> None:  # fmt: skip
        """`server`: one URL, `URL1,URL2,...` or a list (failed over in turn); `token` "": none sent (a host
        certificate in `tls` is the credential); `availability_zone`: the zone its heartbeats report."""
        self.host = host
        self.availability_zone = availability_zone
        self._http = _Servers(servers_of(server), {"X-Auth-Token": token} if token else {}, timeout,
                              True if tls is None else tls)  # fmt: skip

    def close(self) -> None:
        self._http.close()

    def _check(self, r: httpx.Response) -> Any:
        r.raise_for_status()
        return r.json()

    def heartbeat(self, report: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"host": {"agent_version": __version__, "report": report}}
        if self.availability_zone is not None:
            body["host"]["availability_zone"] = self.availability_zone
        return self._check(self._http.put(f"/hosts/{self.host}", json=body))["host"]

    def desired_state(self, since: int | None = None) -> dict[str, Any]:
        """The host's desired state; `since`: the revision read up to, for the requests that changed its ports
        after it (`requests`)."""
        params = {} if since is None else {"since": since}
        return self._check(self._http.get(f"/hosts/{self.host}/state", params=params))  # type: ignore[no-any-return]

    def desired_part(self, part: str, ports: list[str]) -> dict[str, Any]:
        """A part of the desired state (services/hosts/host_qos.py): "qos" with the views of `ports`."""
        r = self._http.get(f"/hosts/{self.host}/state", params={"part": part, "port": ports})
        return self._check(r)  # type: ignore[no-any-return]

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

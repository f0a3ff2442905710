"""The agent's view of the API: register/heartbeat, desired state, events, port status reports."""

from __future__ import annotations

from typing import Any

import httpx

from cloudnet import __version__


class ApiClient:
    def __init__(self, server: str, host: str, token: str = "agent", timeout: float = 30.0) -> None:
        self.host = host
        self._http = httpx.Client(
            base_url=server.rstrip("/") + "/v2.0", headers={"X-Auth-Token": token}, timeout=timeout
        )

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

    def report_ports(self, ports: list[dict[str, Any]]) -> None:
        if ports:
            self._check(self._http.put(f"/hosts/{self.host}/ports", json={"ports": ports}))

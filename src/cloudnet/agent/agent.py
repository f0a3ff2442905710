"""The host agent: full sync, then follow the revision log and converge the dataplane on every change.

It only reads state and reports what it observed (heartbeats, port status) through the API. After a
lost connection it starts over with a full sync, so nothing depends on having seen every event.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

import httpx

from cloudnet.agent.client import ApiClient
from cloudnet.dataplane.base import Dataplane

log = logging.getLogger("cloudnet.agent")


class StateObserver(Protocol):
    """Host-side services that follow the desired state too (metadata proxy, mdata sockets)."""

    def update(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class Agent:
    def __init__(
        self,
        client: ApiClient,
        dataplane: Dataplane,
        *,
        report: dict[str, Any] | None = None,
        heartbeat_interval: float = 10.0,
        poll_timeout: float = 30.0,
        resync_interval: float = 300.0,
        observers: list[StateObserver] | None = None,
    ) -> None:
        self.client = client
        self.dataplane = dataplane
        self.report = report or {}
        self.heartbeat_interval = heartbeat_interval
        self.poll_timeout = poll_timeout
        self.resync_interval = resync_interval
        self.observers = list(observers or [])
        self.stop_event = threading.Event()
        self.synced = threading.Event()  # set after each successful reconcile (tests and `up` wait on it)
        self.revision = -1

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        beat = threading.Thread(target=self._heartbeats, name="cloudnet-heartbeat", daemon=True)
        beat.start()
        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                self._register()
                self._follow()
                backoff = 0.5
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                log.warning("lost the API (%s); full sync again in %.1f s", exc, backoff)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception:
                log.exception("reconcile failed; retrying with a full sync")
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 10.0)
        beat.join(timeout=5)
        for observer in self.observers:
            observer.close()

    def _register(self) -> None:
        self.client.heartbeat(self.report)

    def _heartbeats(self) -> None:
        while not self.stop_event.wait(self.heartbeat_interval):
            try:
                self.client.heartbeat(self.report)
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                log.warning("heartbeat failed: %s", exc)

    def _follow(self) -> None:
        self.reconcile()
        since_full = 0.0
        while not self.stop_event.is_set():
            events, latest = self.client.events(self.revision, self.poll_timeout)
            if events:
                self.reconcile()
            else:
                self.revision = max(self.revision, latest)
                since_full += self.poll_timeout
                if since_full >= self.resync_interval:  # catch changes made behind the API's back
                    self.reconcile()
                    since_full = 0.0

    def reconcile(self) -> None:
        """Fetch the desired state, converge the dataplane, report what changed."""
        state = self.client.desired_state()
        reports = self.dataplane.apply(state)
        for observer in self.observers:
            observer.update(state)
        changed = []
        for r in reports:
            known = state["ports"].get(r.port_id, {})
            body = r.as_api()
            # Compare with what the server holds, not with what we sent: someone else (the dead-host
            # sweep) may have changed it since.
            if any(known.get(k) != body[k] for k in ("status", "binding:vif_type", "binding:vif_details")):
                changed.append(body)
        self.client.report_ports(changed)
        self.revision = int(state["revision"])
        self.synced.set()
        log.debug("reconciled revision %d: %d ports, %d reported", self.revision, len(reports), len(changed))

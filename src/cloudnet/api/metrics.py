"""GET /metrics (admin token only) in Prometheus' text format, and the middleware that counts API requests.

A scrape answers this process's own families (cloudnet/metrics.py: SERVER), the samples every agent sent in its
heartbeat report (with a `host` label), and gauges read from the database (hosts, pool ports, quota usage): one
target for the whole cloud. Agents push rather than listen (`--metrics-listen`): hosts then need no port open to
the monitoring system, no second certificate, and nothing new to authenticate; the price is a heartbeat's delay
(10 s) on agent samples.

`cloudnet serve` is one process (one event loop; no worker processes), so its counters need no multiprocess mode.
Several servers on one database are several targets: their own families add up with sum(); the database's and the
agents' are the same on each (services/hosts/observed.py): take max() of those, or scrape one server for them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from fastapi import APIRouter
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cloudnet import metrics
from cloudnet.api.deps import call, context, state
from cloudnet.api.guard import ASGIApp, Message, Receive, Scope, Send
from cloudnet.errors import NotFound
from cloudnet.services.hosts import observed
from cloudnet.store.db import Store
from cloudnet.store.events import Event

router = APIRouter()
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "other"  # no route matched (404, or refused before routing: 401, 413): one series, whatever the path
DOCS = {m.name: m.documentation for m in metrics.AGENT.collect()}


class RequestMetrics:
    """Raw ASGI (no framework layer on the hot path): each answer counted by method, route template and status,
    its latency observed by method and route template. The template is the matched route's (scope["endpoint"],
    set by the router), so label values are bounded by the route table whatever paths clients send."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._templates: dict[Any, str] | None = None
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def _template(self, scope: Scope) -> str:
        if self._templates is None:
            routes = scope["app"].routes
            self._templates = {r.endpoint: r.path for r in reversed(routes) if isinstance(r, Route)}
        return self._templates.get(scope.get("endpoint"), UNMATCHED)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # (an exception that escapes: the server answers 500)

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            key = (method, self._template(scope), status)
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = (metrics.API_REQUESTS.labels(method, key[1], str(status)),
                                              metrics.API_DURATION.labels(method, key[1]))  # fmt: skip
            series[0].inc()
            series[1].observe(time.perf_counter() - started)


class Programming:
    """Network programming latency (kube-proxy's): from the commit of a port's last change in this process to the
    agent's report that made it ACTIVE. Commit times are this process's (a change committed by another server of
    the cloud is not timed here: no guess from the database's whole-second timestamps)."""

    LIMIT = 100_000  # ports whose commit time is kept (the oldest go first)

    def __init__(self, store: Store) -> None:
        self._at: dict[str, float] = {}
        self._lock = threading.Lock()
        store.changes.watch(self.changed)

    def changed(self, events: Sequence[Event] | None, tx: object) -> None:
        if tx is None or not events:  # (another process's: when it committed is not known here)
            return
        now = time.monotonic()
        with self._lock:
            for event in events:
                if event.resource == "port":
                    self._at.pop(event.resource_id, None)  # (re-inserted last: the dict stays in commit order)
                    self._at[event.resource_id] = now
            while len(self._at) > self.LIMIT:
                del self._at[next(iter(self._at))]

    def pending(self, body: Any) -> dict[str, float]:
        """Commit times of the ports a report says are ACTIVE (read before the report commits changes of its own)."""
        # (the body as sent, before the service validates it: anything but a list of objects counts nothing)
        items = body.get("ports") if isinstance(body, dict) else None
        if not isinstance(items, list):
            return {}
        ids = [p.get("id") for p in items if isinstance(p, dict) and p.get("status") == "ACTIVE"]
        with self._lock:
            return {i: at for i in ids if isinstance(i, str) and (at := self._at.get(i)) is not None}

    @staticmethod
    def realised(pending: dict[str, float], updated: Iterable[str]) -> None:
        now = time.monotonic()
        for port_id in updated:
            if port_id in pending:
                metrics.PROGRAMMING.observe(now - pending[port_id])


class _Snapshot:
    """A collector of what one scrape read from the database (services/hosts/observed.py)."""

    def __init__(self, seen: observed.Observed) -> None:
        self.seen = seen

    def collect(self) -> Iterator[Metric]:
        seen = self.seen
        hosts = GaugeMetricFamily("cloudnet_hosts", "Hosts known, by state", labels=["state"])
        for up in ("alive", "dead"):
            hosts.add_metric([up], sum(1 for alive in seen.hosts.values() if alive == (up == "alive")))
        yield hosts
        yield _gauge("cloudnet_pool_ports", "Ports held by port pools, by host and state (ready or claimed)",
                     ["host", "state"], seen.pool_ports)  # fmt: skip
        yield _gauge("cloudnet_quota_usage", "Resources a project uses, by quota resource", ["project", "resource"],
                     seen.quota_used)  # fmt: skip
        yield _gauge("cloudnet_quota_limit", "A project's quota limit (-1: unlimited)", ["project", "resource"],
                     seen.quota_limit)  # fmt: skip


def _gauge(name: str, doc: str, labels: list[str], values: dict[tuple[str, str], int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


def agent_text(by_family: dict[str, list[str]]) -> bytes:
    """The agents' families: each one's lines from every host (rendered as their heartbeats were stored), under
    one header, as the text format wants a family's lines together."""
    out = []
    for family, lines in by_family.items():
        kind = metrics.AGENT_FAMILIES[family][0]
        name = family + "_total" if kind == "counter" else family  # (as generate_latest names them in 0.0.4)
        out.append(f"# HELP {name} {DOCS.get(family, '')}\n# TYPE {name} {kind}\n{''.join(lines)}")
    return "".join(out).encode()


@router.get("/metrics")
async def scrape(request: Request) -> Response:
    st = state(request)
    if not st.config.metrics:
        raise NotFound("Metrics are off on this server (--no-metrics).")
    seen = await call(observed.observe, st.store, context(request), st.config.agent_down_time)
    cloud = generate_latest(_Snapshot(seen))  # type: ignore[arg-type]
    body = generate_latest(metrics.SERVER) + cloud + agent_text(seen.agent_text)
    return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)

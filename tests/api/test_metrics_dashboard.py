"""docs/grafana/cloudnet.json asks only for what a real scrape has: every metric name in its queries is a sample
name of a family the server exposes (agents' families included, as a heartbeat brings them), and every label it
groups or filters by is a label of one of the families its query names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import Histogram

from cloudnet import metrics
from tests.api.test_hosts import heartbeat
from tests.support.api import network_on_host
from tests.support.scrape import parse
from tests.support.server import RunningServer

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "cloudnet.json"
NAME = re.compile(r"\bcloudnet_[a-z0-9_]+\b")
GROUPING = re.compile(r"\bby \(([^)]*)\)")
MATCHER = re.compile(r"\{([^}]*)\}")
SUFFIXES = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}


def queries() -> list[str]:
    found: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            found.extend(t["expr"] for t in panel.get("targets", ()))
            walk(panel.get("panels", []))

    walk(json.loads(DASHBOARD.read_text())["panels"])
    return found


def test_every_query_names_families_that_exist(api: httpx.Client, server: RunningServer) -> None:
    # Every agent family with a series (a zero one where this process's agents did not count yet), as an agent
    # sends them: its real serialisation, in a real heartbeat.
    for family in metrics._AGENT_METRICS:
        labels = ["x"] * len(family._labelnames)
        child = family.labels(*labels) if labels else family
        if isinstance(child, Histogram):
            child.observe(0.0)
        else:
            child.inc(0)
    net = network_on_host(api, "dash-1", "dash", "10.97.0.0/24")  # (quota usage, and a pool's ports)
    r = api.post("/port-pools/claim", json={"claim": {"host": "dash-1", "network_id": net["id"], "device_id": "d"}})
    assert r.status_code == 201, r.text
    heartbeat(api, "dash-1", report={"metrics": metrics.samples()})
    text = httpx.get(server.url + "/metrics", headers={"X-Auth-Token": "admin"}, timeout=30).text
    seen = parse(text)
    # Sample name -> its labels: as scraped, and as declared (families not counted yet).
    labels: dict[str, set[str]] = {}
    for (name, ls), _value in seen.samples.items():
        labels.setdefault(name, set()).update(k for k, _v in ls)
    for collector, names in metrics.SERVER._collector_to_names.items():
        for name in names:
            labels.setdefault(name, set()).update(getattr(collector, "_labelnames", ()))
    exposed = {family + suffix: kind for family, kind in seen.families.items() for suffix in SUFFIXES[kind]}
    exprs = queries()
    assert len(exprs) >= 20
    used: set[str] = set()
    for expr in exprs:
        names = set(NAME.findall(expr))
        assert names, expr
        for name in names:
            assert name in exposed, f"{name} (in {expr}) is not in a scrape"
        used |= names
        known = set().union(*(labels.get(n, set()) for n in names)) | {"le"}
        asked = {x.strip() for group in GROUPING.findall(expr) for x in group.split(",") if x.strip()}
        asked |= {m.split("=")[0].strip().rstrip("!~") for group in MATCHER.findall(expr) for m in group.split(",")}
        assert asked <= known, f"{expr}: labels {asked - known} on none of {names}"
    # And every family a scrape has is on the dashboard.
    assert set(seen.families) <= {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used}

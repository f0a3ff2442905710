"""GET /metrics against a real server: what API requests, transactions, pool claims, quota use and agents' reports
do to the families, who may scrape, and what hostile requests and reports cannot do to it. The server runs in this
process and its counters outlive a test: every assertion on a counter is on its change."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from cloudnet.config import ServerConfig
from cloudnet.metrics import PASS_BUCKETS, samples
from cloudnet.services.hosts.agent_samples import MAX_SAMPLES
from tests.api.test_hosts import active, events_since, heartbeat, instance, network_with_subnet, port_ids, report
from tests.support.api import create, network_on_host, pool_config
from tests.support.scrape import parse, scrape
from tests.support.server import RunningServer

REQUESTS = "cloudnet_api_requests_total"
LATENCY = "cloudnet_api_request_duration_seconds_count"


def test_requests_are_counted_by_route_template_and_status(api: httpx.Client, server: RunningServer) -> None:
    before = scrape(server.url)
    net = create(api, "networks", "network", name="m1")
    for _ in range(2):
        assert api.get(f"/networks/{net['id']}").status_code == 200
    assert api.get(f"/networks/{uuid.uuid4()}").status_code == 404
    after = scrape(server.url)
    route = "/v2.0/networks/{item_id}"
    assert after.value(REQUESTS, method="GET", route=route, status="200") - before.value(
        REQUESTS, method="GET", route=route, status="200") == 2  # fmt: skip
    assert after.value(REQUESTS, method="GET", route=route, status="404") - before.value(
        REQUESTS, method="GET", route=route, status="404") == 1  # fmt: skip
    assert after.value(REQUESTS, method="POST", route="/v2.0/networks", status="201") - before.value(
        REQUESTS, method="POST", route="/v2.0/networks", status="201") == 1  # fmt: skip
    assert after.value(LATENCY, method="GET", route=route) - before.value(LATENCY, method="GET", route=route) == 3
    assert after.value("cloudnet_db_transaction_duration_seconds_count", kind="write") > before.value(
        "cloudnet_db_transaction_duration_seconds_count", kind="write")  # fmt: skip
    assert net["id"] not in str(after.samples)  # never an id in a label


def test_hostile_paths_and_methods_do_not_grow_the_series(api: httpx.Client, server: RunningServer) -> None:
    """Label values come from the route table, never from what a client sends: 50 made-up paths and methods are
    one series."""
    before = scrape(server.url)
    for i in range(50):
        api.request("GET", f"/no/such/{uuid.uuid4()}/{i}")
        api.request(f"X{i}", f"/networks/{i}")
        api.get(f"/networks/{i}%22%7D%20evil%201")
    after = scrape(server.url)
    grown = {k for k in after.samples if k[0] == REQUESTS} - {k for k in before.samples if k[0] == REQUESTS}
    assert len(grown) <= 4, grown
    assert after.label_values(REQUESTS, "method") <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS",
                                                      "other"}  # fmt: skip
    assert not any("evil" in v or "no/such" in v for v in after.label_values(REQUESTS, "route"))
    assert after.value(REQUESTS, method="GET", route="other", status="404") - before.value(
        REQUESTS, method="GET", route="other", status="404") == 50  # fmt: skip


def test_only_an_admin_token_scrapes(users: dict[str, httpx.Client], server: RunningServer) -> None:
    assert httpx.get(server.url + "/metrics").status_code == 401
    assert httpx.get(server.url + "/metrics", headers={"X-Auth-Token": "nobody"}).status_code == 401
    for member in ("alice", "bob"):
        r = httpx.get(server.url + "/metrics", headers={"X-Auth-Token": f"{member}-token"})
        assert r.status_code == 403, r.text
        assert "cloudnet_" not in r.text
    assert scrape(server.url, "admin-token").families["cloudnet_api_requests"] == "counter"


def test_quota_usage_per_project(users: dict[str, httpx.Client], server: RunningServer) -> None:
    create(users["alice"], "networks", "network", name="a1")
    create(users["alice"], "networks", "network", name="a2")
    create(users["bob"], "networks", "network", name="b1")
    seen = scrape(server.url, "admin-token")
    assert seen.value("cloudnet_quota_usage", project="alice", resource="network") == 2
    assert seen.value("cloudnet_quota_usage", project="bob", resource="network") == 1
    assert seen.value("cloudnet_quota_limit", project="alice", resource="network") == 100


def _agent_samples() -> list[list[Any]]:
    """What an agent sends: the real serialisation of a registry with families of the agent's shapes."""
    registry = CollectorRegistry()
    Counter("cloudnet_agent_passes", "", ["type", "result"], registry=registry).labels("full", "ok").inc()
    Histogram("cloudnet_agent_pass_duration_seconds", "", ["type"], buckets=PASS_BUCKETS,
              registry=registry).labels("full").observe(0.003)  # fmt: skip
    return samples(registry)


def test_agents_samples_are_served_with_their_host(api: httpx.Client, server: RunningServer) -> None:
    heartbeat(api, "mx-1", report={"metrics": _agent_samples()})
    host = api.get("/hosts/mx-1").json()["host"]
    assert "metrics" not in host["report"]  # for scrapes, not for `host show`
    seen = scrape(server.url)
    assert seen.families["cloudnet_agent_passes"] == "counter"
    assert seen.families["cloudnet_agent_pass_duration_seconds"] == "histogram"
    assert "mx-1" in seen.label_values("cloudnet_agent_passes_total", "host")
    assert seen.value("cloudnet_agent_pass_duration_seconds_bucket", host="mx-1", type="full", le="0.004") == 1
    assert seen.value("cloudnet_hosts", state="alive") >= 1
    # New samples alone are stored without an event (every agent follows the events).
    revision = events_since(api, 2**62)[1]
    registry = CollectorRegistry()
    Counter("cloudnet_agent_passes", "", ["type", "result"], registry=registry).labels("full", "ok").inc(7)
    heartbeat(api, "mx-1", report={"metrics": samples(registry)})
    assert events_since(api, 2**62)[1] == revision
    assert scrape(server.url).value("cloudnet_agent_passes_total", host="mx-1", type="full", result="ok") == 7


def test_a_hostile_report_cannot_forge_families_or_labels(api: httpx.Client, server: RunningServer) -> None:
    forged = [
        ["cloudnet_api_requests", "cloudnet_api_requests_total", {"method": "GET", "route": "/", "status": "200"}, 1e9],
        ["cloudnet_agent_passes", "cloudnet_agent_passes_total", {"type": 'x"} 1\nevil 2', "result": "ok"}, 1],
        ["cloudnet_agent_passes", "cloudnet_agent_passes_total", {"type": "full", "result": "ok", "host": "h"}, 1],
        ["cloudnet_agent_passes", "cloudnet_agent_passes_total", {"type": "full", "result": "ok"}, "NaN"],
        ["cloudnet_agent_passes", "cloudnet_agent_passes_bogus", {"type": "full", "result": "ok"}, 1],
        ["cloudnet_dnsmasq_restarts", "cloudnet_dnsmasq_restarts_total", {}, "inf"],
        ["cloudnet_dnsmasq_restarts", "cloudnet_dnsmasq_restarts_total", {}, True],
        "junk",
        [1, 2, 3, 4],
        None,
    ]
    many = [["cloudnet_agent_objects_applied", "cloudnet_agent_objects_applied_total", {"kind": f"k{i}"}, i]
            for i in range(5000)]  # fmt: skip
    r = api.put("/hosts/mx-hostile", json={"host": {"agent_version": "1", "report": {"metrics": forged + many}}})
    assert r.status_code == 200, r.text
    text = httpx.get(server.url + "/metrics", headers={"X-Auth-Token": "admin"}).text
    seen = parse(text)  # (still parses: nothing the report held broke the format)
    assert "evil" not in text.replace("mx-hostile", "")
    assert seen.value(REQUESTS, method="GET", route="/", status="200") < 1e9
    assert not any(("host", "mx-hostile") in ls for (n, ls) in seen.samples if n.startswith("cloudnet_api_"))
    assert not any(n == "cloudnet_agent_passes_total" and ("host", "mx-hostile") in ls for (n, ls) in seen.samples)
    applied = {
        ls for (n, ls) in seen.samples if n == "cloudnet_agent_objects_applied_total" and ("host", "mx-hostile") in ls
    }
    assert 0 < len(applied) <= MAX_SAMPLES


def test_a_realised_port_is_timed_from_commit_to_report(api: httpx.Client, server: RunningServer) -> None:
    heartbeat(api, "mx-2")
    net, _ = network_with_subnet(api, "10.94.0.0/24")
    port = port_ids(instance(api, "mx-i", "mx-2", net["id"]))[0]
    before = scrape(server.url).value("cloudnet_network_programming_duration_seconds_count")
    assert report(api, "mx-2", active(port)).status_code == 200
    assert report(api, "mx-2", active(port)).status_code == 200  # (unchanged: realised already, not timed again)
    after = scrape(server.url)
    assert after.value("cloudnet_network_programming_duration_seconds_count") - before == 1
    assert after.value("cloudnet_network_programming_duration_seconds_bucket", le="+Inf") >= 1


@pytest.fixture
def pool_server_config(tmp_path: Path) -> ServerConfig:
    return pool_config(tmp_path)


def test_pool_claims_misses_and_refills(pool_server_config: ServerConfig, store: Any) -> None:
    srv = RunningServer.start(pool_server_config, store)
    try:
        with httpx.Client(base_url=srv.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as api:
            net = network_on_host(api, "mx-pool", "pooled", "10.95.0.0/24")
            before = scrape(srv.url)
            for i in range(2):
                r = api.post("/port-pools/claim", json={"claim": {"host": "mx-pool", "network_id": net["id"],
                                                                  "device_id": f"d{i}"}})  # fmt: skip
                assert r.status_code == 201, r.text
            after = scrape(srv.url)
    finally:
        srv.stop()

    def grew(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert grew("cloudnet_pool_claims_total", result="miss") == 1  # the first: an empty pool, filled as it claimed
    assert grew("cloudnet_pool_claims_total", result="hit") == 1
    assert grew("cloudnet_pool_refills_total", trigger="claim") == 1
    assert grew("cloudnet_pool_refill_ports_total") >= 1
    assert after.value("cloudnet_pool_ports", host="mx-pool", state="claimed") == 2
    # (what the refills made, less the two claimed: pool_config's maintenance does not run meanwhile)
    made = grew("cloudnet_pool_refill_ports_total")
    assert after.value("cloudnet_pool_ports", host="mx-pool", state="ready") == made - 2


def test_metrics_off(server_config: ServerConfig, store: Any) -> None:
    server_config.metrics = False
    srv = RunningServer.start(server_config, store)
    try:
        r = httpx.get(srv.url + "/metrics", headers={"X-Auth-Token": "admin"})
        assert r.status_code == 404, r.text
    finally:
        srv.stop()


def test_prometheus_bearer_token_on_metrics_only(users: dict[str, httpx.Client], server: RunningServer) -> None:
    """Prometheus sends `Authorization: Bearer`: taken on /metrics (as strictly as X-Auth-Token), nowhere else."""

    def get(path: str, value: str) -> httpx.Response:
        return httpx.get(server.url + path, headers={"Authorization": value}, timeout=30)

    assert get("/metrics", "Bearer admin-token").status_code == 200
    assert get("/metrics", "bearer admin-token").status_code == 200
    assert get("/metrics", "Bearer alice-token").status_code == 403
    assert get("/metrics", "Basic YWRtaW4tdG9rZW4=").status_code == 401
    assert get("/metrics", "admin-token").status_code == 401
    assert get("/v2.0/networks", "Bearer admin-token").status_code == 401

"""Metrics of several `cloudnet serve` processes on one database (both backends): each counts its own requests, so
sum() across them is the cloud's; what they read from the database (quota use, the agents' samples) is the same on
each. And `--no-metrics` turns the endpoint off. (`cloudnet serve` has no worker processes: a process is a server.)"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.process import serve
from tests.support.scrape import scrape

ROUTE = {"method": "POST", "route": "/v2.0/networks", "status": "201"}


def test_two_servers_add_up(tmp_path: Path, db_url: str) -> None:
    with (
        serve(tmp_path / "a", "--db", db_url, "--metadata-listen", "off") as (_a, a),
        serve(tmp_path / "b", "--db", db_url, "--metadata-listen", "off") as (_b, b),
    ):
        for url, n in ((a, 3), (b, 2)):
            for i in range(n):
                r = httpx.post(
                    url + "/v2.0/networks", json={"network": {"name": f"n{i}"}}, headers={"X-Auth-Token": "x"}
                )
                assert r.status_code == 201, r.text
        samples = [["cloudnet_dnsmasq_restarts", "cloudnet_dnsmasq_restarts_total", {}, 4]]
        r = httpx.put(a + "/v2.0/hosts/srv-h", json={"host": {"report": {"metrics": samples}}},
                      headers={"X-Auth-Token": "x"})  # fmt: skip
        assert r.status_code == 200, r.text
        seen_a, seen_b = scrape(a), scrape(b)
    # Each process counted what it answered: the sum is every request.
    assert (
        seen_a.value("cloudnet_api_requests_total", **ROUTE),
        seen_b.value("cloudnet_api_requests_total", **ROUTE),
    ) == (3, 2)
    # Read from the database: the same on both (max() across servers, never sum()).
    usage = {k: v for k, v in seen_a.samples.items() if k[0] == "cloudnet_quota_usage"}
    assert usage == {k: v for k, v in seen_b.samples.items() if k[0] == "cloudnet_quota_usage"}
    assert sum(v for (_n, ls), v in usage.items() if ("resource", "network") in ls) == 5
    for seen in (seen_a, seen_b):
        assert seen.value("cloudnet_dnsmasq_restarts_total", host="srv-h") == 4


def test_no_metrics_turns_the_endpoint_off(tmp_path: Path) -> None:
    with serve(tmp_path, "--metadata-listen", "off", "--no-metrics") as (_proc, url):
        assert httpx.get(url + "/metrics", headers={"X-Auth-Token": "x"}).status_code == 404
        assert httpx.get(url + "/v2.0/networks", headers={"X-Auth-Token": "x"}).status_code == 200

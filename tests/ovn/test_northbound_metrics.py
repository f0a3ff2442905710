"""The northbound writer's passes and the rows they write, in /metrics, against a real OVN sandbox."""

from __future__ import annotations

import httpx

from cloudnet.northbound.sync import NorthboundSync
from tests.ovn.test_northbound import topology
from tests.support.ovn import OvnSandbox
from tests.support.scrape import scrape
from tests.support.server import RunningServer

PASSES = "cloudnet_northbound_pass_duration_seconds_count"
ROWS = "cloudnet_northbound_rows_written_total"


def test_passes_and_rows_written_are_counted(
    api: httpx.Client, server: RunningServer, ovn: OvnSandbox, nb_sync: NorthboundSync
) -> None:
    assert nb_sync.wait_synced().ok
    before = scrape(server.url)
    topology(api)  # two switches, a router, their ports: rows NB did not have
    assert nb_sync.wait_synced().ok
    after = scrape(server.url)
    assert after.value(PASSES) > before.value(PASSES)
    assert after.value(ROWS) - before.value(ROWS) >= 5
    # A change NB has no row for (a network's description): a pass reads it, and writes nothing.
    (net, *_rest) = api.get("/networks").json()["networks"]
    r = api.put(f"/networks/{net['id']}", json={"network": {"description": "no row of NB's"}})
    assert r.status_code == 200, r.text
    assert nb_sync.wait_synced().ok
    again = scrape(server.url)
    assert again.value(PASSES) > after.value(PASSES)
    assert again.value(ROWS) == after.value(ROWS)

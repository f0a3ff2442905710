"""`cloudnet serve --pool-*` sets every port pool's defaults (each still overridable per pool)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx

from tests.support.process import CLOUDNET, free_port, serve


def test_serve_pool_options_are_the_defaults_of_new_pools(tmp_path: Path) -> None:
    extra = ("--metadata-listen", f"127.0.0.1:{free_port()}", "--pool-min", "2", "--pool-max", "7",
             "--pool-batch", "3", "--pool-ttl", "600", "--pool-update-interval", "5")  # fmt: skip
    with serve(tmp_path, *extra) as (_proc, url), httpx.Client(base_url=url + "/v2.0", timeout=30) as api:
        assert api.put("/hosts/opt-host", json={"host": {"agent_version": "t", "report": {}}}).status_code == 200
        net = api.post("/networks", json={"network": {"name": "opts"}}).json()["network"]
        assert api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.94.0.0/24"}}).is_success
        r = api.post("/port-pools/claim", json={"claim": {"host": "opt-host", "network_id": net["id"]}})
        assert r.is_success, r.text
        (pool,) = api.get("/port-pools").json()["port_pools"]
        sizing = {k: pool[k] for k in ("min", "max", "batch", "ttl", "update_interval")}
        assert sizing == {"min": 2, "max": 7, "batch": 3, "ttl": 600, "update_interval": 5}
        assert pool["ready"] + pool["in_use"] == 3  # the first fill was one batch of 3


def test_serve_rejects_a_bad_pool_option(tmp_path: Path) -> None:
    r = subprocess.run([CLOUDNET, "serve", "--state-dir", str(tmp_path), "--pool-batch", "0"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode != 0 and "--pool-batch" in r.stdout + r.stderr


def test_serve_instance_pools_makes_pools_on_first_demand(tmp_path: Path) -> None:
    extra = ("--metadata-listen", f"127.0.0.1:{free_port()}", "--instance-pools", "--pool-min", "2",
             "--pool-batch", "3")  # fmt: skip
    with serve(tmp_path, *extra) as (_proc, url), httpx.Client(base_url=url + "/v2.0", timeout=30) as api:
        assert api.put("/hosts/opt-host", json={"host": {"agent_version": "t", "report": {}}}).status_code == 200
        net = api.post("/networks", json={"network": {"name": "opts"}}).json()["network"]
        assert api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.95.0.0/24"}}).is_success
        body = {"name": "vm", "host": "opt-host", "netns": "vm", "nets": [{"network": net["id"]}]}
        r = api.post("/instances", json={"instance": body})
        assert r.status_code == 201, r.text
        (pool,) = api.get("/port-pools").json()["port_pools"]
        assert (pool["network_id"], pool["in_use"], pool["ready"]) == (net["id"], 1, 2)

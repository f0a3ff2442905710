"""The real `openstack` CLI (python-openstackclient) with availability zones: `availability zone list --network`,
`network create` and `router create` with `--availability-zone-hint`, and an unknown zone refused."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.api.test_openstack_cli import backend, openstack  # noqa: F401  (the fixtures: the CLI on clouds.yaml)


def test_zones_and_hints_through_the_openstack_cli(openstack: Any, api: httpx.Client) -> None:  # noqa: F811
    for host, zone in (("cli-1", "cli-az1"), ("cli-2", "cli-az2")):
        r = api.put(f"/hosts/{host}", json={"host": {"availability_zone": zone, "report": {}}})
        assert r.status_code == 200, r.text
    done = openstack("availability", "zone", "list", "--network", "--long", "-f", "json")
    assert done.returncode == 0, done.stderr
    listed = sorted((z["Zone Name"], z["Zone Status"], z["Zone Resource"]) for z in json.loads(done.stdout))
    assert listed == sorted((z, "available", res) for z in ("cli-az1", "cli-az2") for res in ("network", "router"))

    done = openstack("network", "create", "--availability-zone-hint", "cli-az1", "zoned", "-f", "json")
    assert done.returncode == 0, done.stderr
    net = json.loads(done.stdout)
    assert net["availability_zone_hints"] == ["cli-az1"]
    assert api.get(f"/networks/{net['id']}").json()["network"]["availability_zone_hints"] == ["cli-az1"]
    done = openstack("router", "create", "--availability-zone-hint", "cli-az2", "--availability-zone-hint",
                     "cli-az1", "zoned", "-f", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    router = json.loads(done.stdout)
    assert api.get(f"/routers/{router['id']}").json()["router"]["availability_zone_hints"] == ["cli-az2", "cli-az1"]

    # hostile: a zone no host is in fails the command with Neutron's words, and makes nothing
    done = openstack("router", "create", "--availability-zone-hint", "nowhere", "lost", "-f", "json")
    assert done.returncode != 0
    assert "AvailabilityZone nowhere could not be found" in done.stderr
    assert [r["name"] for r in api.get("/routers").json()["routers"]] == ["zoned"]

"""The real `openstack` CLI on subnet pools and address scopes: `address scope create`, `subnet pool create` in
it, `subnet create --subnet-pool`, `subnet pool set --pool-prefix`; a prefix overlapping the scope's refused."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.api.test_openstack_cli import backend, openstack  # noqa: F401  (the CLI's fixtures)


def shown(done: Any) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_scope_pool_and_subnet_from_the_cli(openstack: Any, api: httpx.Client) -> None:  # noqa: F811
    scope = shown(openstack("address", "scope", "create", "--ip-version", "4", "s1", "-f", "json"))
    assert (scope["ip_version"], scope["name"]) == (4, "s1")
    pool = shown(openstack("subnet", "pool", "create", "--pool-prefix", "10.200.0.0/16", "--default-prefix-length",
                           "26", "--address-scope", "s1", "p1", "-f", "json"))  # fmt: skip
    assert (pool["address_scope_id"], pool["prefixes"], pool["default_prefixlen"]) == (
        scope["id"], ["10.200.0.0/16"], 26)  # fmt: skip
    shown(openstack("network", "create", "n1", "-f", "json"))
    sub = shown(openstack("subnet", "create", "--network", "n1", "--subnet-pool", "p1", "--prefix-length", "24",
                          "s1sub", "-f", "json"))  # fmt: skip
    assert (sub["cidr"], sub["subnetpool_id"], sub["gateway_ip"]) == ("10.200.0.0/24", pool["id"], "10.200.0.1")
    other = shown(openstack("subnet", "create", "--network", "n1", "--subnet-pool", "p1", "s2", "-f", "json"))
    assert other["cidr"] == "10.200.1.0/26"
    done = openstack("subnet", "pool", "set", "--pool-prefix", "10.201.0.0/16", "p1")
    assert done.returncode == 0, done.stderr
    assert api.get(f"/subnetpools/{pool['id']}").json()["subnetpool"]["prefixes"] == ["10.200.0.0/15"]
    # hostile: a second pool in the scope overlapping the first is refused, and nothing is made
    bad = openstack("subnet", "pool", "create", "--pool-prefix", "10.200.128.0/24", "--address-scope", "s1", "p2")
    assert bad.returncode != 0 and "unique prefixes" in bad.stderr, bad.stderr
    assert [p["name"] for p in api.get("/subnetpools").json()["subnetpools"]] == ["p1"]

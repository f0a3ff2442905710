"""A claim that does not wait reads the caches before it syncs them (PostgreSQL: services/pools.py, `_deferred`):
what another server changed in between must still be honoured. Two `cloudnet serve` processes on one
database, both backends."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.api import create

Json = dict[str, Any]
HOST = "node-1"


def claim_r(client: httpx.Client, network_id: str) -> httpx.Response:
    return client.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": network_id}})


def test_a_network_unshared_by_another_server_is_no_longer_claimed_from(
    users: dict[str, httpx.Client], other: httpx.Client
) -> None:
    admin, alice = users["admin"], users["alice"]
    assert admin.put(f"/hosts/{HOST}", json={"host": {"agent_version": "test"}}).status_code == 200
    net = create(admin, "networks", "network", name="shared", shared=True)
    create(admin, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    for _ in range(2):  # the pool of alice's project fills; this server now caches the network as shared
        r = claim_r(alice, net["id"])
        assert r.status_code == 201, r.text
    r = other.put(f"/networks/{net['id']}", json={"network": {"shared": False}})
    assert r.status_code == 200, r.text
    r = claim_r(alice, net["id"])
    assert r.status_code == 404, r.text
    assert r.json()["NeutronError"]["type"] == "NetworkNotFound"

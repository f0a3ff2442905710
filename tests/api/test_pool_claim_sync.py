"""A claim that does not wait reads the caches before it syncs them (PostgreSQL: services/pools/pool_claims.py,
`_deferred`):
what another server changed in between must still be honoured. Two `cloudnet serve` processes on one
database, both backends."""

from __future__ import annotations

from typing import Any

import httpx

from cloudnet.store.db import Store
from tests.support.api import create, network_on_host

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
    # (as in Neutron a network stays shared while another project's ports are on it: alice's claimed ones go; her
    # pool's ready ones are nobody's in use, and go with the sharing)
    for port in admin.get("/ports", params={"network_id": net["id"], "project_id": "alice"}).json()["ports"]:
        if port["device_owner"] != "compute:cloudnet-pool":
            assert admin.delete(f"/ports/{port['id']}").status_code == 204
    r = other.put(f"/networks/{net['id']}", json={"network": {"shared": False}})
    assert r.status_code == 200, r.text
    r = claim_r(alice, net["id"])
    assert r.status_code == 404, r.text
    assert r.json()["NeutronError"]["type"] == "NetworkNotFound"


def test_a_claim_publishing_its_own_event_keeps_the_log_and_the_caches_exact(
    api: httpx.Client, other: httpx.Client, store: Store
) -> None:
    """On PostgreSQL a claim writes its event in its own statement; a claim that then syncs (another server
    wrote meanwhile) syncs only what was committed, never its own uncommitted revision; the log stays gap-free."""
    net = network_on_host(api, HOST, "logged", "10.0.0.0/24")
    for _ in range(2):  # pool made and filled, hints loaded
        assert claim_r(api, net["id"]).status_code == 201
    for i in range(3):
        create(other, "networks", "network", name=f"foreign-{i}")  # another server's writes meanwhile
        r = claim_r(api, net["id"])
        assert r.status_code == 201, r.text
        assert store.changes.seen is not None and store.changes.seen <= store.current_revision()
    events = api.get("/events", params={"since": 0, "limit": 1000}).json()["events"]
    revisions = [e["revision"] for e in events]
    assert revisions == list(range(revisions[0], revisions[0] + len(revisions)))  # no gap, no repeat
    claimed = [e for e in events if e["resource"] == "port" and e["resource_id"] == r.json()["port"]["id"]]
    assert claimed and claimed[-1]["operation"] == "update"
    # Nothing stale: a network another server makes now is claimed from at once.
    late = create(other, "networks", "network", name="late")
    create(other, "subnets", "subnet", network_id=late["id"], cidr="10.1.0.0/24")
    assert claim_r(api, late["id"]).status_code == 201

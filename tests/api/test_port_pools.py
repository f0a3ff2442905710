"""/v2.0/port-pools: bulk refill, claim order and security-group buckets, recycle and reset, the max cap,
TTL eviction, recovery after a restart, no double hand-out under parallel claims, 503 when a pool cannot be
filled, network and security group deletion, and the `cloudnet pool` commands. Both backends."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, update

from cloudnet.config import ServerConfig
from cloudnet.services.context import Context
from cloudnet.services.hosts import hosts
from cloudnet.services.networks import networks, subnets
from cloudnet.services.pools import pool_claims
from cloudnet.services.ports import ports as port_service
from cloudnet.store import tables
from cloudnet.store.db import Store
from tests.support.api import create, error, network_on_host, pool_config
from tests.support.cli import Cli
from tests.support.server import RunningServer

Json = dict[str, Any]
HOST = "node-1"
FREE = "compute:cloudnet-pool"


@pytest.fixture
def server_config(tmp_path: Path) -> ServerConfig:
    return pool_config(tmp_path)


@pytest.fixture
def net(api: httpx.Client) -> Json:
    return network_on_host(api, HOST, "pooled", "10.0.0.0/22")


@pytest.fixture
def bulk_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every bulk create of pool ports (the server runs in this process); the network's metadata
    port, made with the first fill, is not one."""
    calls: list[int] = []
    real = port_service.create_in_tx

    def counting(tx: Any, ctx: Any, specs: list[Any], **kwargs: Any) -> list[str]:
        if specs and specs[0].device_owner == FREE:
            calls.append(len(specs))
        return real(tx, ctx, specs, **kwargs)

    monkeypatch.setattr(port_service, "create_in_tx", counting)
    return calls


def claim_r(api: httpx.Client, network_id: str, **body: Any) -> httpx.Response:
    return api.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": network_id, **body}})


def claim(api: httpx.Client, network_id: str, **body: Any) -> Json:
    r = claim_r(api, network_id, **body)
    assert r.status_code == 201, r.text
    return dict(r.json()["port"])


def release(api: httpx.Client, port_id: str) -> Json:
    r = api.post("/port-pools/release", json={"port_id": port_id})
    assert r.status_code == 200, r.text
    return dict(r.json()["release"])


def the_pool(api: httpx.Client) -> Json:
    r = api.get("/port-pools")
    assert r.status_code == 200, r.text
    (pool,) = r.json()["port_pools"]
    return dict(pool)


def set_pool(api: httpx.Client, pool_id: str, **values: Any) -> Json:
    r = api.put(f"/port-pools/{pool_id}", json={"port_pool": values})
    assert r.status_code == 200, r.text
    return dict(r.json()["port_pool"])


def wait_for(check: Callable[[], bool], timeout: float = 30.0) -> None:  # (a loaded machine: background refills)
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def sg(api: httpx.Client, name: str) -> str:
    return str(create(api, "security-groups", "security_group", name=name)["id"])


def ready_ports(api: httpx.Client, pool_id: str) -> list[Json]:
    r = api.get("/ports", params={"device_owner": FREE, "tags": f"cloudnet.pool={pool_id}"})
    assert r.status_code == 200, r.text
    return list(r.json()["ports"])


# -- refill ---------------------------------------------------------------------------------------


def test_first_claim_fills_in_one_bulk_and_refill_to_min_is_one_bulk(
    api: httpx.Client, net: Json, bulk_calls: list[int]
) -> None:
    port = claim(api, net["id"], name="c1", device_id="dev-1")
    assert port["device_owner"] == "compute:cloudnet" and port["device_id"] == "dev-1" and port["name"] == "c1"
    assert port["binding:host_id"] == HOST and port["network_id"] == net["id"]
    assert bulk_calls == [4]  # max(batch 4, min 2 - 0) ports in one bulk create
    pool = the_pool(api)
    assert (pool["ready"], pool["in_use"], pool["min"], pool["batch"], pool["max"]) == (3, 1, 2, 4, 0)
    assert pool["host"] == HOST and pool["network_id"] == net["id"] and pool["last_refill"]
    assert port["security_groups"] == pool["security_groups"]
    # Raise min above the ready count: the background refill adds max(batch, min - ready) in one bulk.
    pool = set_pool(api, pool["id"], min=9)
    wait_for(lambda: the_pool(api)["ready"] >= 9)
    assert bulk_calls == [4, 6]
    assert the_pool(api)["ready"] == 9
    for p in ready_ports(api, pool["id"]):
        assert p["device_id"] == "" and p["binding:host_id"] == HOST and f"cloudnet.pool={pool['id']}" in p["tags"]


def test_claims_below_min_refill_in_the_background(api: httpx.Client, net: Json, bulk_calls: list[int]) -> None:
    claim(api, net["id"])  # 4 created, 3 ready
    claim(api, net["id"])  # 2 ready: still at min
    assert bulk_calls == [4]
    claim(api, net["id"])  # 1 ready: below min, topped up without blocking the claim
    wait_for(lambda: the_pool(api)["ready"] == 5)
    assert bulk_calls == [4, 4]
    assert the_pool(api)["in_use"] == 3


# -- claim order, buckets, recycle ----------------------------------------------------------------


def test_claim_order_and_bucket_selection(api: httpx.Client, net: Json) -> None:
    a, b = sg(api, "a"), sg(api, "b")
    first = claim(api, net["id"], security_groups=[a])
    assert first["security_groups"] == [a]
    # A released port is the next one handed out from its bucket (most recently idle first).
    release(api, first["id"])
    again = claim(api, net["id"], security_groups=[a])
    assert again["id"] == first["id"]
    # No port in bucket [b]: one of bucket [a] is taken and its groups rewritten.
    other = claim(api, net["id"], security_groups=[b])
    assert other["security_groups"] == [b] and other["id"] != first["id"]
    release(api, other["id"])  # back in the pool with [b] (the pool's current bucket)
    pool = the_pool(api)
    assert pool["security_groups"] == [b]
    assert {tuple(x["security_groups"]) for x in pool["buckets"]} == {(a,), (b,)}
    # An exact bucket match wins over ports of other buckets.
    assert claim(api, net["id"], security_groups=[b])["id"] == other["id"]
    from_a = claim(api, net["id"], security_groups=[a])
    assert from_a["security_groups"] == [a] and from_a["id"] not in (first["id"], other["id"])


def test_release_resets_and_recycles(api: httpx.Client, net: Json) -> None:
    port = claim(api, net["id"], name="web", device_id="inst-1", device_owner="compute:nova")
    before = the_pool(api)
    assert release(api, port["id"]) == {"port_id": port["id"], "recycled": True, "deleted": False}
    p = api.get(f"/ports/{port['id']}").json()["port"]
    assert (p["name"], p["device_id"], p["device_owner"]) == ("", "", FREE)
    assert p["security_groups"] == before["security_groups"]
    after = the_pool(api)
    assert (after["ready"], after["in_use"]) == (before["ready"] + 1, before["in_use"] - 1)
    # Releasing twice is harmless; a port of no pool is refused.
    assert release(api, port["id"])["recycled"] is True
    plain = create(api, "ports", "port", network_id=net["id"])
    error(api.post("/port-pools/release", json={"port_id": plain["id"]}), 400)


def test_release_at_max_deletes(api: httpx.Client, net: Json) -> None:
    ports = [claim(api, net["id"]) for _ in range(2)]  # 4 created, 2 ready, 2 in use
    pool = set_pool(api, the_pool(api)["id"], max=3)
    assert release(api, ports[0]["id"])["recycled"] is True  # 3 ready now: at max
    assert release(api, ports[1]["id"]) == {"port_id": ports[1]["id"], "recycled": False, "deleted": True}
    assert api.get(f"/ports/{ports[1]['id']}").status_code == 404
    pool = the_pool(api)
    assert (pool["ready"], pool["in_use"], pool["max"]) == (3, 0, 3)
    # max also bounds refills: one claimed below min 3 is replaced by one port, not a batch of 10.
    set_pool(api, pool["id"], min=3, batch=10)
    claim(api, net["id"])
    wait_for(lambda: the_pool(api)["ready"] == 3)
    time.sleep(0.3)
    assert (the_pool(api)["ready"], the_pool(api)["in_use"]) == (3, 1)
    error(api.put(f"/port-pools/{pool['id']}", json={"port_pool": {"max": 1}}), 400)  # below min


def test_ttl_evicts_idle_ports_down_to_min(api: httpx.Client, net: Json) -> None:
    claim(api, net["id"])
    pool = set_pool(api, the_pool(api)["id"], batch=10, min=9)
    wait_for(lambda: the_pool(api)["ready"] == 13)  # 3 + max(10, 9 - 3)
    set_pool(api, pool["id"], min=4, ttl=1, update_interval=1)
    wait_for(lambda: the_pool(api)["ready"] == 4)
    time.sleep(2.5)  # more passes: never below min, claimed ports untouched
    pool = the_pool(api)
    assert (pool["ready"], pool["in_use"], pool["ttl"]) == (4, 1, 1)


# -- restart ----------------------------------------------------------------------------------------


def test_restart_rebuilds_pools_from_the_database(
    server: RunningServer, api: httpx.Client, net: Json, server_config: ServerConfig, db_url: str
) -> None:
    a = sg(api, "a")
    claimed = [claim(api, net["id"], security_groups=[a], device_id=f"d{i}") for i in range(3)]
    pool = set_pool(api, the_pool(api)["id"], min=3)
    wait_for(lambda: the_pool(api)["ready"] >= 3)
    release(api, claimed[0]["id"])
    before = the_pool(api)
    ready_before = {p["id"] for p in ready_ports(api, pool["id"])}
    all_ports = {p["id"] for p in api.get("/ports").json()["ports"]}
    server.stop()
    # What a crash between two writes of an older version could leave: a tagged ready port without its
    # membership row, and a ready port without idle_since. Recovery repairs both from the ports alone.
    lost, stale = sorted(ready_before)[:2]
    with server.store.write() as tx:
        tx.conn.execute(delete(tables.pool_ports).where(tables.pool_ports.c.port_id == lost))
        tx.conn.execute(update(tables.pool_ports).where(tables.pool_ports.c.port_id == stale).values(idle_since=None))

    store2 = Store(db_url)
    srv2 = RunningServer.start(server_config, store2)
    try:
        with httpx.Client(base_url=srv2.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as api2:
            after = the_pool(api2)
            for key in ("id", "ready", "in_use", "min", "security_groups", "buckets"):
                assert after[key] == before[key], key
            assert {p["id"] for p in api2.get("/ports").json()["ports"]} == all_ports  # nothing leaked
            in_use = {p["id"] for p in claimed[1:]}
            set_pool(api2, after["id"], min=0)  # no refill: the claims below drain exactly the old ready ports
            got = [claim(api2, net["id"], security_groups=[a])["id"] for _ in range(len(ready_before))]
            assert set(got) == ready_before and not set(got) & in_use  # nothing handed out twice
            assert the_pool(api2)["ready"] == 0
    finally:
        srv2.stop()
        store2.dispose()


# -- concurrency and exhaustion ---------------------------------------------------------------------


def _parallel_claims(server: RunningServer, network_id: str, n: int) -> list[httpx.Response]:
    def one(i: int) -> httpx.Response:
        with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60) as c:
            return claim_r(c, network_id, device_id=f"dev-{i}")

    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(one, range(n)))


def test_no_double_hand_out_under_50_parallel_claims(server: RunningServer, api: httpx.Client, net: Json) -> None:
    claim(api, net["id"])
    set_pool(api, the_pool(api)["id"], min=60, batch=60)
    wait_for(lambda: the_pool(api)["ready"] >= 60)
    responses = _parallel_claims(server, net["id"], 50)
    assert [r.status_code for r in responses] == [201] * 50, [r.text for r in responses if r.status_code != 201]
    ids = [r.json()["port"]["id"] for r in responses]
    assert len(set(ids)) == 50
    owners = {p["id"]: p["device_id"] for p in api.get("/ports", params={"device_owner": "compute:cloudnet"}).json()[
        "ports"]}  # fmt: skip
    assert sorted(owners[i] for i in ids) == sorted(f"dev-{i}" for i in range(50))


def test_parallel_claims_on_an_empty_pool_fill_it_once_each(
    server: RunningServer, api: httpx.Client, net: Json
) -> None:
    responses = _parallel_claims(server, net["id"], 50)
    ok = [r.json()["port"]["id"] for r in responses if r.status_code == 201]
    assert len(ok) == 50 and len(set(ok)) == 50, [r.text for r in responses if r.status_code != 201]
    pool = the_pool(api)
    assert pool["in_use"] == 50


def test_503_with_retry_after_when_the_pool_cannot_be_filled(api: httpx.Client) -> None:
    r = api.put(f"/hosts/{HOST}", json={"host": {"agent_version": "test"}})
    assert r.status_code == 200
    network = create(api, "networks", "network", name="tiny")
    create(api, "subnets", "subnet", network_id=network["id"], cidr="10.9.0.0/30")  # one free address
    first = claim(api, network["id"])  # the batch does not fit: the fill falls back to one port
    assert first["fixed_ips"][0]["ip_address"] == "10.9.0.2"
    r = claim_r(api, network["id"])
    error(r, 503, "PortPoolExhausted")
    assert r.headers["Retry-After"] == "1"
    release(api, first["id"])
    assert claim(api, network["id"])["id"] == first["id"]


def test_claim_validation(api: httpx.Client, net: Json) -> None:
    error(api.post("/port-pools/claim", json={"claim": {"network_id": net["id"]}}), 400)
    error(claim_r(api, net["id"], host="nowhere"), 400)
    error(claim_r(api, "5f0e3f2c-0d7e-4c39-9a3e-2b8f8a0c9d11"), 404)
    error(claim_r(api, net["id"], device_owner=FREE), 400)
    error(api.get("/port-pools/5f0e3f2c-0d7e-4c39-9a3e-2b8f8a0c9d11"), 404)


# -- deletion of networks and security groups -----------------------------------------------------


def test_network_deletion_takes_ready_pool_ports_with_it(api: httpx.Client, net: Json) -> None:
    port = claim(api, net["id"])
    error(api.delete(f"/networks/{net['id']}"), 409, "NetworkInUse")  # the claimed port blocks it
    release(api, port["id"])
    r = api.delete(f"/networks/{net['id']}")
    assert r.status_code == 204, r.text
    assert api.get("/port-pools").json()["port_pools"] == []
    assert api.get("/ports", params={"device_owner": FREE}).json()["ports"] == []


def test_security_group_deletion_updates_pools(api: httpx.Client, net: Json) -> None:
    a = sg(api, "a")
    port = claim(api, net["id"], security_groups=[a])
    error(api.delete(f"/security-groups/{a}"), 409)  # the claimed port uses it
    release(api, port["id"])
    r = api.delete(f"/security-groups/{a}")
    assert r.status_code == 204, r.text
    pool = the_pool(api)
    assert pool["security_groups"] == [] and pool["buckets"] == [{"security_groups": [], "ready": 4}]
    assert claim(api, net["id"], security_groups=[])["security_groups"] == []


# -- CLI --------------------------------------------------------------------------------------------


@pytest.fixture
def cli(server: RunningServer) -> Cli:
    return Cli(server.url)


def test_cli_pool_list_show_set(api: httpx.Client, net: Json, cli: Cli) -> None:
    claim(api, net["id"])
    (listed,) = cli.json("pool", "list")
    assert listed["ready"] == 3 and listed["host"] == HOST
    shown = cli.json("pool", "show", listed["id"])
    assert shown["in_use"] == 1 and shown["network_id"] == net["id"]
    changed = cli.json("pool", "set", listed["id"], "--max", "7", "--ttl", "30")
    assert (changed["max"], changed["ttl"], changed["min"]) == (7, 30, 2)


# -- the in-transaction functions instance create and delete call ----------------------------------


def test_claim_in_tx_and_release_in_tx(store: Store) -> None:
    ctx = Context.admin("admin")
    hosts.heartbeat(store, ctx, HOST, {"agent_version": "test"}, 30.0)
    (network,) = networks.create_networks(store, ctx, [{"name": "n"}], 1500)
    subnets.create_subnets(store, ctx, [{"network_id": network["id"], "cidr": "10.1.0.0/24"}])
    args = (ctx, HOST, "admin", network["id"], None, "vm-eth0", "inst-1", "compute:cloudnet")
    with store.write() as tx:
        assert pool_claims.claim_in_tx(tx, *args, create=False) is None  # no pool yet, and none made
    with store.write() as tx:
        claimed = pool_claims.claim_in_tx(tx, *args)  # empty pool: filled within the transaction
        assert claimed is not None
        port_id = claimed["id"]
        row = tx.conn.execute(tables.ports.select().where(tables.ports.c.id == port_id)).one()
        assert (row.device_id, row.device_owner, row.name, row.host_id) == ("inst-1", "compute:cloudnet",
                                                                            "vm-eth0", HOST)  # fmt: skip
    with store.write() as tx:
        row = tx.conn.execute(tables.ports.select().where(tables.ports.c.id == port_id)).one()
        assert pool_claims.release_in_tx(tx, row) is True
    with store.read() as conn:
        row = conn.execute(tables.ports.select().where(tables.ports.c.id == port_id)).one()
        assert (row.device_id, row.device_owner, row.name) == ("", FREE, "")
    with store.write() as tx:
        again = pool_claims.claim_in_tx(tx, *args)
        assert again is not None and again["id"] == port_id  # the recycled port comes back first
    (plain_port,) = port_service.create_ports(store, ctx, [{"network_id": network["id"]}])
    with store.write() as tx:
        row = tx.conn.execute(tables.ports.select().where(tables.ports.c.id == plain_port["id"])).one()
        assert pool_claims.release_in_tx(tx, row) is False  # not a pool port: the caller deletes it as before


def test_instances_take_ports_from_the_hosts_pool_and_give_them_back(api: httpx.Client, net: Json) -> None:
    claim(api, net["id"])  # the pool of (HOST, project, network) exists from now on
    pool = the_pool(api)
    wait_for(lambda: len(ready_ports(api, pool["id"])) >= 1)
    ready_before = {p["id"] for p in ready_ports(api, pool["id"])}
    body = {"name": "vm", "host": HOST, "netns": "vm", "nets": [{"network": net["id"]}]}
    r = api.post("/instances", json={"instance": body})
    assert r.status_code == 201, r.text
    inst = r.json()["instance"]
    port_id = inst["nets"][0]["port_id"]
    assert port_id in ready_before  # a pooled port, not a new one
    port = api.get(f"/ports/{port_id}").json()["port"]
    assert port["device_id"] == inst["id"] and port["device_owner"] == "compute:cloudnet"
    assert port["binding:host_id"] == HOST
    assert api.delete(f"/instances/{inst['id']}").status_code == 204
    back = api.get(f"/ports/{port_id}").json()["port"]  # recycled into the pool, not deleted
    assert back["device_owner"] == FREE and back["device_id"] == ""
    # A fixed address cannot come from a pool: that instance gets a port of its own.
    fixed = {"name": "vm2", "host": HOST, "netns": "vm2", "nets": [{"network": net["id"], "v4-fixed-ip": "10.0.3.200"}]}
    r = api.post("/instances", json={"instance": fixed})
    assert r.status_code == 201, r.text
    assert r.json()["instance"]["nets"][0]["port_id"] not in ready_before

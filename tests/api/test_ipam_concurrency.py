"""IPAM under parallel load through the HTTP API: no address is ever handed out twice.

Many clients create ports on a small pool at the same moment (a barrier releases them together). Every
success must hold a distinct address, every failure must be Neutron's "pool exhausted" conflict, and
the pool must end up exactly full. On PostgreSQL the same holds with two API servers, each with its own
engine and connection pool, writing to one database; the database's own uniqueness guarantee is checked
with a raw duplicate INSERT.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from cloudnet.config import ServerConfig
from cloudnet.store import tables as t
from cloudnet.store.db import Store
from tests.support.server import RunningServer

Json = dict[str, Any]
CIDR = "10.20.0.0/28"
POOL = [f"10.20.0.{h}" for h in range(2, 15)]  # .1 is the gateway, .15 the broadcast address
THREADS = 48


@pytest.fixture
def net(api: httpx.Client) -> Json:
    resp = api.post("/networks", json={"network": {"name": "busy"}})
    assert resp.status_code == 201, resp.text
    network = resp.json()["network"]
    resp = api.post("/subnets", json={"subnet": {"network_id": network["id"], "cidr": CIDR}})
    assert resp.status_code == 201, resp.text
    network["subnet"] = resp.json()["subnet"]
    assert network["subnet"]["allocation_pools"] == [{"start": POOL[0], "end": POOL[-1]}]
    # Listing groups creates the project's default group now, so that the races below are about IPAM
    # only (the race for the default group itself is test_first_ports_of_a_project_share_one_default_group).
    default = api.get("/security-groups", params={"name": "default"}).json()["security_groups"]
    assert len(default) == 1
    network["default_sg"] = default[0]["id"]
    return network


def hammer(base_urls: list[str], bodies: list[Json]) -> list[httpx.Response]:
    """POST each body to /ports from its own thread and client, all released at the same moment.

    Body i goes to server i % len(base_urls).
    """
    barrier = threading.Barrier(len(bodies))

    def one(i: int) -> httpx.Response:
        url = base_urls[i % len(base_urls)]
        with httpx.Client(base_url=url, headers={"X-Auth-Token": "admin"}, timeout=60) as client:
            client.get("/networks", params={"limit": 1}).raise_for_status()  # connect before the race
            barrier.wait(timeout=60)
            return client.post("/ports", json=bodies[i])

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(one, range(len(bodies))))


def error_types(responses: list[httpx.Response]) -> Counter[tuple[int, str]]:
    return Counter((r.status_code, r.json()["NeutronError"]["type"]) for r in responses if r.status_code != 201)


def check_pool_filled_once(api: httpx.Client, net: Json, responses: list[httpx.Response]) -> list[Json]:
    """Exactly one port per pool address, each failure a generation failure; returns the created ports."""
    ok = [r.json()["port"] for r in responses if r.status_code == 201]
    assert error_types(responses) == Counter({(409, "IpAddressGenerationFailure"): len(responses) - len(POOL)})
    assert len(ok) == len(POOL)
    addresses = [f["ip_address"] for p in ok for f in p["fixed_ips"]]
    assert sorted(addresses, key=lambda a: int(a.rsplit(".", 1)[1])) == POOL
    assert all(p["fixed_ips"][0]["subnet_id"] == net["subnet"]["id"] for p in ok)
    assert len({p["mac_address"] for p in ok}) == len(ok)
    # What the database holds agrees with what the clients were told.
    stored = api.get("/ports", params={"network_id": net["id"]}).json()["ports"]
    assert {p["id"]: p["fixed_ips"] for p in stored} == {p["id"]: p["fixed_ips"] for p in ok}
    assert {sg for p in ok for sg in p["security_groups"]} == {net["default_sg"]}
    return ok


def check_database_rejects_duplicate(store: Store, port: Json, other_port: Json) -> None:
    """The (subnet_id, ip_address) key itself refuses a second row for an address, whoever writes it."""
    taken = port["fixed_ips"][0]
    row = {
        "subnet_id": taken["subnet_id"],
        "ip_address": taken["ip_address"],
        "network_id": port["network_id"],
        "port_id": other_port["id"],
    }
    with pytest.raises(IntegrityError) as excinfo, store.engine.begin() as conn:
        conn.execute(insert(t.ip_allocations).values(**row))
    # The primary key refused it (not, say, a foreign key).
    message = str(excinfo.value.orig)
    assert "pk_ip_allocations" in message or "UNIQUE constraint failed: ip_allocations" in message, message
    with store.engine.connect() as conn:
        holders = conn.execute(
            select(t.ip_allocations.c.port_id).where(
                t.ip_allocations.c.subnet_id == taken["subnet_id"],
                t.ip_allocations.c.ip_address == taken["ip_address"],
            )
        ).all()
    assert [h[0] for h in holders] == [port["id"]]


def test_parallel_creates_fill_the_pool_exactly_once(
    api: httpx.Client, server: RunningServer, store: Store, net: Json
) -> None:
    bodies = [{"port": {"network_id": net["id"], "name": f"p{i}"}} for i in range(THREADS)]
    responses = hammer([server.url + "/v2.0"], bodies)
    ok = check_pool_filled_once(api, net, responses)
    check_database_rejects_duplicate(store, ok[0], ok[1])


def test_parallel_requests_for_one_address_have_one_winner(api: httpx.Client, server: RunningServer, net: Json) -> None:
    wanted, contenders = POOL[3], 24
    bodies = [{"port": {"network_id": net["id"], "fixed_ips": [{"ip_address": wanted}]}} for _ in range(contenders)]
    responses = hammer([server.url + "/v2.0"], bodies)
    winners = [r.json()["port"] for r in responses if r.status_code == 201]
    assert len(winners) == 1
    assert winners[0]["fixed_ips"] == [{"subnet_id": net["subnet"]["id"], "ip_address": wanted}]
    assert error_types(responses) == Counter({(409, "IpAddressAlreadyAllocated"): contenders - 1})
    stored = api.get("/ports", params={"fixed_ips": f"ip_address={wanted}"}).json()["ports"]
    assert [p["id"] for p in stored] == [winners[0]["id"]]
    assert len(api.get("/ports").json()["ports"]) == 1


def test_parallel_bulk_creates_are_all_or_nothing(api: httpx.Client, server: RunningServer, net: Json) -> None:
    size = 3
    bodies = [{"ports": [{"network_id": net["id"], "name": f"b{i}-{j}"} for j in range(size)]} for i in range(20)]
    responses = hammer([server.url + "/v2.0"], bodies)
    batches = [r.json()["ports"] for r in responses if r.status_code == 201]
    assert len(batches) == len(POOL) // size
    assert error_types(responses) == Counter({(409, "IpAddressGenerationFailure"): len(bodies) - len(batches)})
    for batch in batches:
        prefix = batch[0]["name"].split("-")[0]
        assert [p["name"] for p in batch] == [f"{prefix}-{j}" for j in range(size)]
    addresses = [p["fixed_ips"][0]["ip_address"] for batch in batches for p in batch]
    assert len(set(addresses)) == len(addresses) == size * len(batches)
    assert set(addresses) <= set(POOL)
    stored = api.get("/ports", params={"network_id": net["id"]}).json()["ports"]
    assert sorted(p["id"] for p in stored) == sorted(p["id"] for batch in batches for p in batch)


@pytest.fixture
def second_server(server_config: ServerConfig, db_url: str, server: RunningServer) -> Iterator[RunningServer]:
    """Another API server on the same database, with its own engine and connection pool."""
    store = Store(db_url)
    other = RunningServer.start(server_config, store)
    yield other
    other.stop()
    store.dispose()


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_two_servers_on_one_database_never_share_an_address(
    api: httpx.Client, server: RunningServer, second_server: RunningServer, store: Store, net: Json
) -> None:
    assert second_server.store is not server.store
    assert second_server.store.engine is not server.store.engine
    bodies = [{"port": {"network_id": net["id"], "name": f"p{i}"}} for i in range(THREADS)]
    responses = hammer([server.url + "/v2.0", second_server.url + "/v2.0"], bodies)
    ok = check_pool_filled_once(api, net, responses)
    # Each server reads the other's writes.
    with httpx.Client(base_url=second_server.url + "/v2.0", headers={"X-Auth-Token": "admin"}) as other:
        seen = other.get("/ports", params={"network_id": net["id"]}).json()["ports"]
    assert sorted(p["id"] for p in seen) == sorted(p["id"] for p in ok)
    check_database_rejects_duplicate(store, ok[0], ok[1])


def test_first_ports_of_a_project_share_one_default_group(api: httpx.Client, server: RunningServer) -> None:
    """The project's first ports race to create its default group: one group, no failures."""
    network = api.post("/networks", json={"network": {"name": "roomy"}}).json()["network"]
    assert api.post("/subnets", json={"subnet": {"network_id": network["id"], "cidr": "10.30.0.0/24"}}).is_success
    responses = hammer([server.url + "/v2.0"], [{"port": {"network_id": network["id"]}} for _ in range(THREADS)])
    assert [r.status_code for r in responses] == [201] * THREADS, error_types(responses)
    groups = api.get("/security-groups", params={"name": "default", "project_id": "admin"}).json()["security_groups"]
    assert len(groups) == 1
    assert {sg for r in responses for sg in r.json()["port"]["security_groups"]} == {groups[0]["id"]}
    assert len({ip for r in responses for ip in (f["ip_address"] for f in r.json()["port"]["fixed_ips"])}) == THREADS


def test_as_many_parallel_creates_as_addresses_all_succeed(api: httpx.Client, server: RunningServer) -> None:
    """Losing a race for an address means taking the next one, not failing while addresses are free."""
    network = api.post("/networks", json={"network": {"name": "exact"}}).json()["network"]
    resp = api.post("/subnets", json={"subnet": {"network_id": network["id"], "cidr": "10.40.0.0/27"}})
    assert resp.status_code == 201, resp.text
    pool = [f"10.40.0.{h}" for h in range(2, 31)]
    assert api.get("/security-groups").status_code == 200  # the default group exists before the race
    responses = hammer([server.url + "/v2.0"], [{"port": {"network_id": network["id"]}} for _ in pool])
    assert error_types(responses) == Counter()
    got = sorted(
        (f["ip_address"] for r in responses for f in r.json()["port"]["fixed_ips"]),
        key=lambda a: int(a.rsplit(".", 1)[1]),
    )
    assert got == pool


@pytest.fixture
def server_process(db_url: str, tmp_path: Path, server: RunningServer) -> Iterator[str]:
    """`cloudnet serve` as a separate OS process on the same database; yields its /v2.0 URL.

    Unlike a second in-process server it shares nothing with the first one (IPAM cursors, locks).
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cloudnet = str(Path(sys.executable).parent / "cloudnet")
    state = tmp_path / "other-process"
    cmd = [cloudnet, "serve", "--state-dir", str(state), "--port", str(port), "--db", db_url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/v2.0"
    try:
        ready = threading.Event()
        for _ in range(600):  # readiness: poll until the API answers (at most ~30 s)
            try:
                if httpx.get(url + "/networks", params={"limit": 1}, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                if proc.poll() is not None:
                    pytest.fail(f"cloudnet serve exited: {proc.communicate()[0]}")
                ready.wait(0.05)
        else:
            pytest.fail("cloudnet serve did not answer within 30 s")
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=15)


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_two_server_processes_never_share_an_address(
    api: httpx.Client, server: RunningServer, server_process: str, store: Store, net: Json
) -> None:
    bodies = [{"port": {"network_id": net["id"], "name": f"p{i}"}} for i in range(THREADS)]
    responses = hammer([server.url + "/v2.0", server_process], bodies)
    ok = check_pool_filled_once(api, net, responses)
    check_database_rejects_duplicate(store, ok[0], ok[1])
    # Exactly as many requests as addresses, split over the two processes: all of them succeed.
    exact = api.post("/networks", json={"network": {"name": "exact"}}).json()["network"]
    resp = api.post("/subnets", json={"subnet": {"network_id": exact["id"], "cidr": "10.40.0.0/27"}})
    assert resp.status_code == 201, resp.text
    pool = {f"10.40.0.{h}" for h in range(2, 31)}
    responses = hammer([server.url + "/v2.0", server_process], [{"port": {"network_id": exact["id"]}} for _ in pool])
    assert error_types(responses) == Counter()
    assert {f["ip_address"] for r in responses for f in r.json()["port"]["fixed_ips"]} == pool

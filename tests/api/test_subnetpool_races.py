"""Subnets taken from one pool and given back at once, through two server processes on one database (each with its
own cache of the pool's free space), on both backends: no two subnets ever share a prefix, creates, subnet deletes
and network deletes, which lock the same network and pool rows, never deadlock (a 500; PostgreSQL: the lock order
tested step by step), a refused delete gives nothing back, and concurrent creates never pass the subnet quota."""

from __future__ import annotations

import ipaddress
import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest

from tests.conftest import TEST_DB
from tests.support.api import create, create_network
from tests.support.mdata_raw import wait_for
from tests.support.postgres import PostgresServer
from tests.support.server import RunningServer

ROUNDS = 24


def test_two_servers_take_and_give_back_without_overlap_or_deadlock(api: httpx.Client, other: httpx.Client) -> None:
    pool = create(api, "subnetpools", "subnetpool", prefixes=["10.150.0.0/24"], default_prefixlen=28)
    clients = itertools.cycle((api, other))
    nets = [create_network(api, name=f"race{i}")["id"] for i in range(4)]

    def subnet(client: httpx.Client, network: str) -> httpx.Response:
        body = {"network_id": network, "subnetpool_id": pool["id"], "ip_version": 4}
        return client.post("/subnets", json={"subnet": body})

    def churn(i: int, client: httpx.Client) -> list[int]:
        """A subnet on a shared network and one deleted again, and every fourth round a network with its subnets
        deleted while others take from the pool."""
        statuses = []
        made = subnet(client, nets[i % 4])
        statuses.append(made.status_code)
        gone = subnet(client, nets[(i + 1) % 4])
        statuses.append(gone.status_code)
        if gone.status_code == 201:
            statuses.append(client.delete(f"/subnets/{gone.json()['subnet']['id']}").status_code)
        if i % 4 == 0:  # a network deleted while a subnet is being added to it (the create may come too late: 404)
            own = create_network(client, name=f"own{i}")["id"]
            statuses.append(subnet(client, own).status_code)
            with ThreadPoolExecutor(2) as both:
                late = both.submit(subnet, client, own)
                statuses.append(both.submit(client.delete, f"/networks/{own}").result().status_code)
                statuses.append(late.result().status_code)
        return statuses

    with ThreadPoolExecutor(8) as workers:
        results = list(workers.map(churn, range(ROUNDS), [next(clients) for _ in range(ROUNDS)]))
    statuses = [s for r in results for s in r]
    # 201/204, 409 once the /24 (sixteen /28s) is used up, 404 for a subnet on a network deleted first: never a
    # 5xx (a deadlock).
    assert set(statuses) <= {201, 204, 404, 409}, statuses
    assert statuses.count(201) >= 16
    held = [s["cidr"] for s in api.get("/subnets", params={"subnetpool_id": pool["id"]}).json()["subnets"]]
    nets_ = [ipaddress.ip_network(c) for c in held]
    assert len(held) == len(set(held)) and not any(a.overlaps(b) for a, b in itertools.combinations(nets_, 2))
    # What was given back is taken again, by either server (neither trusts a stale cache of the free space).
    free = 16 - len(held)
    for client in itertools.islice(itertools.cycle((other, api)), free):
        assert subnet(client, nets[0]).status_code == 201
    assert subnet(api, nets[1]).status_code == 409
    again = [s["cidr"] for s in api.get("/subnets", params={"subnetpool_id": pool["id"]}).json()["subnets"]]
    assert sorted(map(ipaddress.ip_network, again)) == list(ipaddress.ip_network("10.150.0.0/24").subnets(4))


def test_a_refused_delete_gives_nothing_back(api: httpx.Client) -> None:
    """A subnet delete refused (a port holds an address of it) leaves its prefix taken: the server's cached free
    space of the pool is not given the prefix of a delete that did not happen."""
    pool = create(api, "subnetpools", "subnetpool", prefixes=["10.152.0.0/27"], default_prefixlen=28)
    net = create_network(api)["id"]
    body = {"subnet": {"network_id": net, "subnetpool_id": pool["id"], "ip_version": 4}}
    held = api.post("/subnets", json=body).json()["subnet"]
    create(api, "ports", "port", network_id=net)
    assert api.delete(f"/subnets/{held['id']}").status_code == 409
    other = api.post("/subnets", json={"subnet": {**body["subnet"], "network_id": create_network(api)["id"]}})
    assert other.status_code == 201 and other.json()["subnet"]["cidr"] == "10.152.0.16/28", other.text
    assert api.post("/subnets", json=body).status_code == 409


def test_concurrent_creates_never_pass_the_subnet_quota(users: dict[str, httpx.Client], server: RunningServer) -> None:
    """Subnets from a pool and plain ones, each on a network of its own (no network lock makes them take turns):
    the project's subnet quota still counts them one after another."""
    admin, alice = users["admin"], users["alice"]
    assert admin.put("/quotas/alice", json={"quota": {"subnet": 5}}).status_code == 200
    pool = create(alice, "subnetpools", "subnetpool", prefixes=["10.153.0.0/24"], default_prefixlen=28)
    nets = [create_network(alice, name=f"q{i}")["id"] for i in range(16)]

    def attempt(i: int) -> int:
        body = {"subnetpool_id": pool["id"], "ip_version": 4} if i % 2 else {"cidr": f"10.154.{i}.0/24"}
        with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "alice-token"}, timeout=60) as c:
            return c.post("/subnets", json={"subnet": {"network_id": nets[i], **body}}).status_code

    with ThreadPoolExecutor(16) as workers:
        statuses = list(workers.map(attempt, range(16)))
    assert sorted(statuses) == [201] * 5 + [409] * 11, statuses
    assert len(alice.get("/subnets").json()["subnets"]) == 5


def _waiting(admin: psycopg.Connection[Any], statement: str) -> int:
    """Backends of the test database waiting for a row lock in a statement starting so."""
    row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock' "
                        "AND query LIKE %s", (TEST_DB, statement + "%")).fetchone()  # fmt: skip
    return int(row[0]) if row else 0


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
@pytest.mark.parametrize("deleted", ["network", "subnet"])
def test_deletes_and_subnet_creates_lock_in_one_order(
    api: httpx.Client, postgres: PostgresServer, _pg_admin: psycopg.Connection[Any], deleted: str
) -> None:
    """A network's (or a subnet's) delete queued for its pool's row, then a subnet create on that network: the
    create waits for the network, which the delete took first, not for the pool while holding the network (a
    deadlock: one of them a 500)."""
    pool = create(api, "subnetpools", "subnetpool", prefixes=["10.151.0.0/24"], default_prefixlen=28)
    net = create_network(api, name="doomed")["id"]
    body = {"subnet": {"network_id": net, "subnetpool_id": pool["id"], "ip_version": 4}}
    first = api.post("/subnets", json=body)
    assert first.status_code == 201, first.text
    path = f"/networks/{net}" if deleted == "network" else f"/subnets/{first.json()['subnet']['id']}"
    with (psycopg.connect(host=str(postgres.socket_dir), user=postgres.user, dbname=TEST_DB) as holder,
          ThreadPoolExecutor(2) as workers):  # fmt: skip
        holder.execute("SELECT id FROM subnetpools WHERE id = %s FOR UPDATE", (pool["id"],))
        deleting = workers.submit(api.delete, path)
        wait_for(lambda: _waiting(_pg_admin, "UPDATE subnetpools") == 1, what="the delete to wait for the pool")
        creating = workers.submit(api.post, "/subnets", json=body)
        wait_for(lambda: _waiting(_pg_admin, "SELECT") == 1, what="the create to wait for a lock")
        holder.rollback()
        done, created = deleting.result(), creating.result()
    assert done.status_code == 204, done.text
    # After the delete: on no network (404), or on the network, with the prefix given back (201).
    if deleted == "network":
        assert created.status_code == 404, created.text
    else:
        assert created.status_code == 201, created.text
        assert created.json()["subnet"]["cidr"] == first.json()["subnet"]["cidr"]

"""Two `cloudnet serve` processes on one database (both backends): what one server keeps in memory (networks,
subnets, default security groups, pool hints: services/cache.py, services/pools/pool_model.py) follows the writes of the
other, through the revision log; and claims spread over both never hand out a port twice."""

from __future__ import annotations

import ipaddress
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.api import create, network_on_host

Json = dict[str, Any]
HOST = "node-1"


def addresses(port: Json) -> list[str]:
    return [f["ip_address"] for f in port["fixed_ips"]]


def test_a_subnet_added_by_another_server_is_used_by_the_next_port(api: httpx.Client, other: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    assert len(addresses(create(api, "ports", "port", network_id=net["id"]))) == 1  # the subnets are cached now
    create(other, "subnets", "subnet", network_id=net["id"], cidr="fd00:1::/64")
    versions = {ipaddress.ip_address(a).version for a in addresses(create(api, "ports", "port", network_id=net["id"]))}
    assert versions == {4, 6}


def test_allocation_pools_changed_by_another_server_are_honoured(api: httpx.Client, other: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    subnet = create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    assert addresses(create(api, "ports", "port", network_id=net["id"])) == ["10.0.0.2"]
    pools = [{"start": "10.0.0.200", "end": "10.0.0.210"}]
    r = other.put(f"/subnets/{subnet['id']}", json={"subnet": {"allocation_pools": pools}})
    assert r.status_code == 200, r.text
    (ip,) = addresses(create(api, "ports", "port", network_id=net["id"]))
    assert ipaddress.ip_address("10.0.0.200") <= ipaddress.ip_address(ip) <= ipaddress.ip_address("10.0.0.210")


def test_a_network_deleted_by_another_server_is_gone(api: httpx.Client, other: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    port = create(api, "ports", "port", network_id=net["id"])
    assert api.delete(f"/ports/{port['id']}").status_code == 204
    assert other.delete(f"/networks/{net['id']}").status_code == 204
    r = api.post("/ports", json={"port": {"network_id": net["id"]}})
    assert r.status_code == 404, r.text
    assert r.json()["NeutronError"]["type"] == "NetworkNotFound"


def test_a_default_group_deleted_by_another_server_is_made_again(api: httpx.Client, other: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    made = [create(api, "ports", "port", network_id=net["id"]) for _ in range(2)]  # the second finds it cached
    (old_default,) = made[1]["security_groups"]
    for port in made:
        assert api.delete(f"/ports/{port['id']}").status_code == 204
    assert other.delete(f"/security-groups/{old_default}").status_code == 204
    port = create(api, "ports", "port", network_id=net["id"])  # not the deleted group (cached by this server)
    (new_default,) = port["security_groups"]
    assert new_default != old_default
    assert api.get(f"/security-groups/{new_default}").json()["security_group"]["name"] == "default"


# -- port pools -------------------------------------------------------------------------------------


@pytest.fixture
def pooled(api: httpx.Client) -> Json:
    return network_on_host(api, HOST, "pooled", "10.0.0.0/22")


def claim(client: httpx.Client, network_id: str, **body: Any) -> Json:
    r = client.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": network_id, **body}})
    assert r.status_code == 201, r.text
    return dict(r.json()["port"])


def fill(api: httpx.Client, ready: int) -> str:
    """Make the pool hold at least `ready` ports, then stop refills (min 0); its id."""
    (pool,) = api.get("/port-pools").json()["port_pools"]
    r = api.put(f"/port-pools/{pool['id']}", json={"port_pool": {"min": ready, "batch": ready}})
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 30
    while api.get(f"/port-pools/{pool['id']}").json()["port_pool"]["ready"] < ready:  # the background refill
        assert time.monotonic() < deadline, "the pool did not fill"
        time.sleep(0.05)
    assert api.put(f"/port-pools/{pool['id']}", json={"port_pool": {"min": 0}}).status_code == 200
    return str(pool["id"])


def test_a_port_released_by_another_server_is_the_next_one_claimed(
    api: httpx.Client, other: httpx.Client, pooled: Json
) -> None:
    first = claim(api, pooled["id"], device_id="a")  # this server now holds hints of the pool's ready ports
    fill(api, 6)
    claim(api, pooled["id"], device_id="b")
    r = other.post("/port-pools/release", json={"port_id": first["id"]})
    assert r.status_code == 200 and r.json()["release"]["recycled"] is True, r.text
    # Most recently idle first: the port the other server just released, which this server's hints lacked.
    assert claim(api, pooled["id"], device_id="c")["id"] == first["id"]


def test_claims_spread_over_two_servers_never_share_a_port(
    api: httpx.Client, other: httpx.Client, pooled: Json
) -> None:
    claim(api, pooled["id"])
    claim(other, pooled["id"])  # both servers hold hints of the same ready ports
    fill(api, 60)
    servers = [api, other]

    def one(i: int) -> httpx.Response:
        base = servers[i % 2].base_url
        with httpx.Client(base_url=base, headers={"X-Auth-Token": "admin"}, timeout=60) as c:
            return c.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": pooled["id"],
                                                               "device_id": f"dev-{i}"}})  # fmt: skip

    with ThreadPoolExecutor(50) as ex:
        responses = list(ex.map(one, range(50)))
    assert [r.status_code for r in responses] == [201] * 50, [r.text for r in responses if r.status_code != 201]
    ids = [r.json()["port"]["id"] for r in responses]
    assert len(set(ids)) == 50
    owners = {p["id"]: p["device_id"] for p in api.get("/ports", params={"device_owner": "compute:cloudnet"}).json()[
        "ports"]}  # fmt: skip
    assert sorted(owners[i] for i in ids) == sorted(f"dev-{i}" for i in range(50))

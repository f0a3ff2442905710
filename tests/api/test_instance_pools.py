"""`ServerConfig.instance_pools` (`--instance-pools`): instance creates make the port pool of their (host,
project, network) on first demand and claim from it; a pool that cannot serve falls back to an ordinary
port. Off (the default), instance creates only use pools that exist. Both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.config import ServerConfig
from cloudnet.errors import Conflict
from cloudnet.services.pools import pool_recovery
from cloudnet.services.ports import ports
from cloudnet.store.db import Store
from tests.support.api import network_on_host, pool_config
from tests.support.server import RunningServer

Json = dict[str, Any]
HOST = "node-1"
FREE = "compute:cloudnet-pool"
OWNER = "compute:cloudnet"


@pytest.fixture
def server_config(tmp_path: Path) -> ServerConfig:
    return pool_config(tmp_path, instance_pools=True)


@pytest.fixture
def net(api: httpx.Client) -> Json:
    return make_net(api)


def make_net(api: httpx.Client) -> Json:
    return network_on_host(api, HOST, "inst-pooled", "10.0.0.0/24")


def new_instance(api: httpx.Client, name: str, network_id: str) -> Json:
    body = {"name": name, "host": HOST, "netns": f"ns-{name}", "nets": [{"network": network_id}]}
    r = api.post("/instances", json={"instance": body})
    assert r.status_code == 201, r.text
    return dict(r.json()["instance"])


def the_pools(api: httpx.Client) -> list[Json]:
    r = api.get("/port-pools")
    assert r.status_code == 200, r.text
    return list(r.json()["port_pools"])


def port(api: httpx.Client, port_id: str) -> Json:
    r = api.get(f"/ports/{port_id}")
    assert r.status_code == 200, r.text
    return dict(r.json()["port"])


def ready_ids(api: httpx.Client, pool_id: str) -> set[str]:
    r = api.get("/ports", params={"device_owner": FREE, "tags": f"cloudnet.pool={pool_id}"})
    assert r.status_code == 200, r.text
    return {p["id"] for p in r.json()["ports"]}


def test_first_instance_creates_the_pool_and_claims_from_it(api: httpx.Client, net: Json) -> None:
    assert the_pools(api) == []
    first = new_instance(api, "vm1", net["id"])
    assert api.get(f"/instances/{first['id']}").json()["instance"] == first  # (its port's shape from the claim)
    (pool,) = the_pools(api)
    assert (pool["host"], pool["network_id"], pool["project_id"]) == (HOST, net["id"], first["project_id"])
    # Filled synchronously with one batch of 4; the instance holds one of them.
    assert (pool["in_use"], pool["ready"]) == (1, 3)
    p1 = port(api, first["nets"][0]["port_id"])
    assert f"cloudnet.pool={pool['id']}" in p1["tags"]
    assert (p1["device_id"], p1["device_owner"], p1["name"], p1["binding:host_id"]) == (first["id"], OWNER,
                                                                                        "vm1-eth0", HOST)  # fmt: skip
    # The next instance takes a ready port: no new port is made for it.
    ready = ready_ids(api, pool["id"])
    second = new_instance(api, "vm2", net["id"])
    assert second["nets"][0]["port_id"] in ready
    # Deleting the instance gives the port back to the pool.
    assert api.delete(f"/instances/{first['id']}").status_code == 204
    back = port(api, p1["id"])
    assert (back["device_owner"], back["device_id"]) == (FREE, "")


def test_a_pool_that_cannot_serve_falls_back_to_an_ordinary_port(
    api: httpx.Client, net: Json, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pool ports cannot be made (as when another server's claims took the last addresses between the fill
    # and the claim); ordinary ports still can.
    real = ports.create_in_tx

    def no_pool_ports(tx: Any, ctx: Any, specs: list[Any], **kwargs: Any) -> list[str]:
        if specs and specs[0].device_owner == FREE:
            raise Conflict("No more IP addresses available", type="IpAddressGenerationFailure")
        return real(tx, ctx, specs, **kwargs)

    monkeypatch.setattr(ports, "create_in_tx", no_pool_ports)
    inst = new_instance(api, "vm", net["id"])
    p = port(api, inst["nets"][0]["port_id"])
    assert not any(tag.startswith("cloudnet.pool=") for tag in p["tags"])
    assert (p["device_id"], p["device_owner"]) == (inst["id"], OWNER)
    (pool,) = the_pools(api)  # made on first demand, still empty
    assert (pool["in_use"], pool["ready"]) == (0, 0)


def test_off_instances_make_no_pool(store: Store, tmp_path: Path) -> None:
    server = RunningServer.start(pool_config(tmp_path, instance_pools=False), store)
    try:
        with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as api:
            check_no_pool(api)
    finally:
        server.stop()


def check_no_pool(api: httpx.Client) -> None:
    net = make_net(api)
    inst = new_instance(api, "vm", net["id"])
    assert the_pools(api) == []
    p = port(api, inst["nets"][0]["port_id"])
    assert p["fixed_ips"][0]["ip_address"] == "10.0.0.2"  # the ordinary next free address
    assert not any(tag.startswith("cloudnet.pool=") for tag in p["tags"])


def test_a_fill_makes_the_networks_metadata_port(api: httpx.Client, net: Json) -> None:
    def metadata_ports() -> list[Json]:
        params = {"network_id": net["id"], "device_owner": "network:distributed"}
        return list(api.get("/ports", params=params).json()["ports"])

    assert metadata_ports() == []
    r = api.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": net["id"]}})
    assert r.status_code == 201, r.text
    (md,) = metadata_ports()  # there before any instance, made by the pool's first fill
    assert md["device_id"] == f"ovnmeta-{net['id']}" and md["fixed_ips"]
    # The pool's ports got the first addresses; the metadata port the next one.
    (pool,) = the_pools(api)
    assert md["fixed_ips"][0]["ip_address"] == "10.0.0.6" and pool["ready"] + pool["in_use"] == 4
    new_instance(api, "vm", net["id"])
    assert [p["id"] for p in metadata_ports()] == [md["id"]]  # the instance found it


def test_a_gone_hosts_pools_and_ready_ports_are_removed(api: httpx.Client, net: Json, store: Store) -> None:
    inst = new_instance(api, "vm", net["id"])  # the pool of HOST: one port in use, three ready
    (pool,) = the_pools(api)
    ready = ready_ids(api, pool["id"])
    assert len(ready) == 3
    with store.write() as tx:
        assert pool_recovery.drop_host(tx, HOST) == 3
    assert the_pools(api) == []
    for port_id in ready:
        assert api.get(f"/ports/{port_id}").status_code == 404
    in_use = inst["nets"][0]["port_id"]
    assert port(api, in_use)["device_id"] == inst["id"]  # the instance keeps its port
    # No longer in a pool: deleting the instance deletes the port instead of recycling it.
    assert api.delete(f"/instances/{inst['id']}").status_code == 204
    assert api.get(f"/ports/{in_use}").status_code == 404
    # This server's cached pool row went with it: the next instance makes a new pool.
    new_instance(api, "vm2", net["id"])
    (again,) = the_pools(api)
    assert again["id"] != pool["id"]

"""Namespaces cloudnet provides (control plane side, both backends): an instance created without `netns` gets
the namespace its claimed pool port's device is parked in, as the host's agent reported it
(binding:vif_details.prepared_netns, --park-pool-devices), or else a new name the agent will make. A parked
namespace is offered only while its port is ready; a claim that does not take it over leaves the port DOWN
until its device is plugged; a release withdraws it. The kernel side is tests/integration/test_pool_devices.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.config import ServerConfig
from cloudnet.dataplane.linux import names
from tests.support.api import check_error, network_on_host, pool_config

Json = dict[str, Any]
HOST = "node-1"
FREE = "compute:cloudnet-pool"


@pytest.fixture
def server_config(tmp_path: Path) -> ServerConfig:
    return pool_config(tmp_path, pool_batch=3)


@pytest.fixture
def net(api: httpx.Client) -> Json:
    return network_on_host(api, HOST, "parked", "10.0.0.0/24")


def ready(api: httpx.Client, network_id: str) -> list[Json]:
    r = api.get("/ports", params={"network_id": network_id, "device_owner": FREE})
    assert r.status_code == 200, r.text
    return list(r.json()["ports"])


def park_all(api: httpx.Client, network_id: str) -> dict[str, str]:
    """Make the host's pool and report every ready port parked, as its agent would: port id -> namespace."""
    r = api.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": network_id}})
    assert r.status_code == 201, r.text
    assert api.post("/port-pools/release", json={"port_id": r.json()["port"]["id"]}).is_success
    (pool,) = api.get("/port-pools").json()["port_pools"]
    # No refill during the test: every ready port is one reported parked.
    assert api.put(f"/port-pools/{pool['id']}", json={"port_pool": {"min": 0}}).is_success
    parked = {p["id"]: names.new_managed_ns(HOST) for p in ready(api, network_id)}
    assert parked
    report(api, {pid: {"prepared_netns": ns, "ifname": "eth0"} for pid, ns in parked.items()})
    return parked


def report(api: httpx.Client, details: dict[str, Json], status: str = "ACTIVE") -> Json:
    body = {"ports": [{"id": pid, "status": status, "binding:vif_type": "bridge", "binding:vif_details": d}
                      for pid, d in details.items()]}  # fmt: skip
    r = api.put(f"/hosts/{HOST}/ports", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def new_instance(api: httpx.Client, name: str, network_id: str, **extra: Any) -> Json:
    body = {"name": name, "host": HOST, "nets": [{"network": network_id}], **extra}
    r = api.post("/instances", json={"instance": body})
    assert r.status_code == 201, r.text
    return dict(r.json()["instance"])


def port(api: httpx.Client, port_id: str) -> Json:
    return dict(api.get(f"/ports/{port_id}").json()["port"])


def test_an_instance_without_a_namespace_takes_over_a_parked_one(api: httpx.Client, net: Json) -> None:
    parked = park_all(api, net["id"])
    inst = new_instance(api, "vm", net["id"])
    pid = inst["nets"][0]["port_id"]
    assert inst["netns"] == parked[pid]
    # Ready to use as the API answers: the port stays as the agent reported it.
    assert inst["status"] == "ACTIVE" and inst["nets"][0]["status"] == "ACTIVE"
    assert api.get(f"/instances/{inst['id']}").json()["instance"]["netns"] == parked[pid]
    # A parked namespace is never offered twice: the next instance gets another one.
    other = new_instance(api, "vm2", net["id"])
    assert other["netns"] == parked[other["nets"][0]["port_id"]] != inst["netns"]


def test_without_a_parked_namespace_the_agent_makes_one(api: httpx.Client, net: Json) -> None:
    inst = new_instance(api, "vm", net["id"])  # no pool at all
    assert names.is_managed_ns(HOST, inst["netns"]) and inst["status"] == "BUILD"
    park_all(api, net["id"])
    pooled = new_instance(api, "vm2", net["id"], nets=[{"network": net["id"], "v4-fixed-ip": "10.0.0.200"}])
    assert names.is_managed_ns(HOST, pooled["netns"])  # a fixed IP: not from the pool, a new name
    assert pooled["netns"] != inst["netns"]


def test_an_instance_with_its_own_namespace_leaves_the_parked_one(api: httpx.Client, net: Json) -> None:
    park_all(api, net["id"])
    inst = new_instance(api, "vm", net["id"], netns="/proc/1/ns/net")
    assert inst["netns"] == "/proc/1/ns/net"
    p = port(api, inst["nets"][0]["port_id"])
    # Not ACTIVE until the agent has moved the device into the instance; the parked namespace is off offer.
    assert p["status"] == "DOWN" and p["binding:vif_details"] == {} and inst["status"] == "BUILD"


def test_a_claim_through_the_api_withdraws_the_parked_namespace(api: httpx.Client, net: Json) -> None:
    park_all(api, net["id"])
    r = api.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": net["id"]}})
    assert r.status_code == 201, r.text
    claimed = r.json()["port"]
    assert claimed["status"] == "DOWN" and claimed["binding:vif_details"] == {}
    assert port(api, claimed["id"])["binding:vif_details"] == {}


def test_only_a_ready_port_offers_a_parked_namespace(api: httpx.Client, net: Json) -> None:
    parked = park_all(api, net["id"])
    inst = new_instance(api, "vm", net["id"], netns="ns-own")
    pid = inst["nets"][0]["port_id"]
    # A report read before the claim arrives after it: the port in use offers nothing.
    report(api, {pid: {"prepared_netns": parked[pid], "ifname": "eth0"}})
    assert "prepared_netns" not in port(api, pid)["binding:vif_details"]
    # Released, the port offers nothing until the agent has parked it anew.
    assert api.delete(f"/instances/{inst['id']}").status_code == 204
    back = port(api, pid)
    assert (back["device_owner"], back["status"], back["binding:vif_details"]) == (FREE, "DOWN", {})


def test_reserved_namespace_names_are_refused(api: httpx.Client, net: Json) -> None:
    # however they are spelt: as a name, or as a path under /run/netns or /var/run/netns
    for name in ("cloudnet-ns-abc", "cloudnet-host-x", "/run/netns/cloudnet-router-x", "/var/run/netns/cloudnet-x"):
        r = api.post("/instances", json={"instance": {"name": "vm", "host": HOST, "netns": name}})
        check_error(r, 400, "HTTPBadRequest", "reserved")
    for bad in ("relative/path", "/run/netns/../netns/x", "/run//netns/x", "/run/netns/", ".", "a b", "/x/./y"):
        r = api.post("/instances", json={"instance": {"name": "vm", "host": HOST, "netns": bad}})
        check_error(r, 400, "HTTPBadRequest", "netns")
    assert new_instance(api, "vm", net["id"], netns="/proc/4242/ns/net")["netns"] == "/proc/4242/ns/net"

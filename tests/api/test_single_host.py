"""The Linux dataplane is single-host: a port that would put a network on a second host fails to bind, naming OVN;
with the OVN dataplane two hosts share a network."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.test_instances import get, network_with_subnet, new_instance, register

Json = dict[str, Any]


def two_hosts_one_network(api: httpx.Client) -> tuple[Json, Json, Json]:
    register(api, "host-a")
    register(api, "host-b")
    net, _sub = network_with_subnet(api, "10.7.0.0/24")
    first = new_instance(api, "a1", host="host-a", nets=[{"network": net["id"]}])
    second = new_instance(api, "b1", host="host-b", nets=[{"network": net["id"]}])
    return net, first, second


def test_linux_dataplane_refuses_a_second_host(api: httpx.Client) -> None:
    net, first, second = two_hosts_one_network(api)
    assert first["status"] == "BUILD" and first["nets"][0]["binding_failure"] is None
    expected = (f"network {net['id']} is realised on host host-a; the Linux dataplane is single-host: "
                "use --dataplane ovn for more hosts")  # fmt: skip
    assert second["status"] == "ERROR"
    assert second["status_reason"] == f"port {second['nets'][0]['port_id']}: {expected}"
    port = get(api, "ports", "port", second["nets"][0]["port_id"])
    assert port["binding:vif_type"] == "binding_failed" and port["binding:vif_details"]["reason"] == expected
    assert get(api, "instances", "instance", second["id"])["status"] == "ERROR"
    # host-b's agent is never asked to plug it; host-a still gets its own
    state_b = api.get("/hosts/host-b/state").json()
    assert second["nets"][0]["port_id"] not in state_b["ports"] and net["id"] not in state_b["networks"]
    assert first["nets"][0]["port_id"] in api.get("/hosts/host-a/state").json()["ports"]
    # another instance on host-a is fine
    third = new_instance(api, "a2", host="host-a", nets=[{"network": net["id"]}])
    assert third["status"] == "BUILD" and third["status_reason"] is None


@pytest.mark.ovn_dataplane
def test_ovn_dataplane_binds_many_hosts(api: httpx.Client) -> None:
    _net, first, second = two_hosts_one_network(api)
    assert first["status_reason"] is None and second["status_reason"] is None
    assert second["status"] == "BUILD"
    assert get(api, "ports", "port", second["nets"][0]["port_id"])["binding:vif_type"] != "binding_failed"
    assert second["nets"][0]["port_id"] in api.get("/hosts/host-b/state").json()["ports"]


def _join(api: httpx.Client, router: Json, subnet_id: str) -> httpx.Response:
    return api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet_id})


def test_a_router_lives_on_one_host(api: httpx.Client) -> None:
    """Networks joined by a router live on one host (the router is realised there): a leg that would join two
    hosts' networks is refused, and so is a port of a third network behind that router bound to another host."""
    register(api, "host-a")
    register(api, "host-b")
    net_a, sub_a = network_with_subnet(api, "10.7.1.0/24")
    net_b, sub_b = network_with_subnet(api, "10.7.2.0/24")
    net_c, sub_c = network_with_subnet(api, "10.7.3.0/24")
    new_instance(api, "a1", host="host-a", nets=[{"network": net_a["id"]}])
    new_instance(api, "b1", host="host-b", nets=[{"network": net_b["id"]}])
    router = api.post("/routers", json={"router": {"name": "r"}}).json()["router"]
    assert _join(api, router, sub_a["id"]).status_code == 200
    r = _join(api, router, sub_b["id"])
    assert r.status_code == 409, r.text
    assert r.json()["NeutronError"]["type"] == "RouterSpansHosts"
    message = r.json()["NeutronError"]["message"]
    assert "host-a" in message and "host-b" in message and "--dataplane ovn" in message
    assert _join(api, router, sub_c["id"]).status_code == 200  # (no port anywhere yet: joins host-a's group)
    behind = new_instance(api, "b2", host="host-b", nets=[{"network": net_c["id"]}])
    assert behind["status"] == "ERROR" and f"network {net_c['id']} is realised on host host-a" in (
        behind["status_reason"] or "")  # fmt: skip
    assert net_c["id"] not in api.get("/hosts/host-b/state").json()["networks"]
    ok = new_instance(api, "a2", host="host-a", nets=[{"network": net_c["id"]}])
    assert ok["status"] == "BUILD" and ok["status_reason"] is None


def test_pools_and_bound_ports_follow_the_network(api: httpx.Client) -> None:
    net, _first, _second = two_hosts_one_network(api)
    # A pool on the other host would plumb the network there: refused.
    r = api.post("/port-pools/claim", json={"claim": {"host": "host-b", "network_id": net["id"]}})
    assert r.status_code == 409, r.text
    assert r.json()["NeutronError"]["type"] == "NetworkOnAnotherHost"
    # A port bound to the other host through binding:host_id fails to bind, and binds again once moved back.
    r = api.post("/ports", json={"port": {"network_id": net["id"], "binding:host_id": "host-b"}})
    assert r.status_code == 201, r.text
    port = r.json()["port"]
    assert port["binding:vif_type"] == "binding_failed" and "host-a" in port["binding:vif_details"]["reason"]
    r = api.put(f"/ports/{port['id']}", json={"port": {"binding:host_id": "host-a"}})
    assert r.status_code == 200, r.text
    assert r.json()["port"]["binding:vif_type"] == "unbound" and r.json()["port"]["status"] == "DOWN"
    r = api.put(f"/ports/{port['id']}", json={"port": {"binding:host_id": "host-b"}})
    assert r.json()["port"]["binding:vif_type"] == "binding_failed"


@pytest.mark.ovn_dataplane
def test_ovn_dataplane_lets_routers_and_pools_span_hosts(api: httpx.Client) -> None:
    net, _first, _second = two_hosts_one_network(api)
    other, sub = network_with_subnet(api, "10.7.4.0/24")
    new_instance(api, "c1", host="host-a", nets=[{"network": other["id"]}])
    router = api.post("/routers", json={"router": {"name": "r"}}).json()["router"]
    assert _join(api, router, sub["id"]).status_code == 200
    subnet_id = api.get("/subnets", params={"network_id": net["id"]}).json()["subnets"][0]["id"]
    assert _join(api, router, subnet_id).status_code == 200
    r = api.post("/port-pools/claim", json={"claim": {"host": "host-b", "network_id": other["id"]}})
    assert r.status_code in (201, 503), r.text

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

"""RBAC policies on the real agent and the Linux dataplane: alice shares her network and a security group with bob
by policies; bob's instance on her network, in her group, reaches hers with real traffic, both ways (the group lets
in its members only: bob's port counts as one); while his port is there neither policy can go, and once they are
gone bob's new ports and instances on the network are refused (root)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.api import check_error
from tests.support.cloud import Cloud, ping
from tests.support.rbac import made as _made
from tests.support.rbac import members, peers_group, share_with_bob, tokens  # noqa: F401 -- fixtures


def _instance(client: httpx.Client, cloud: Cloud, name: str, net: dict[str, str]) -> httpx.Response:
    body = {"name": f"{name}-{cloud.suffix}", "host": cloud.host, "nets": [net]}
    return client.post("/instances", json={"instance": body})


def _port(client: httpx.Client, net_id: str, group_id: str) -> httpx.Response:
    return client.post("/ports", json={"port": {"network_id": net_id, "security_groups": [group_id]}})


def _ip(inst: dict[str, Any]) -> str:
    return str(inst["nets"][0]["fixed_ips"][0]["ip_address"])


def test_a_network_shared_by_policy_carries_traffic_and_its_removal_refuses_new_ports(
    cloud: Cloud,
    members: dict[str, httpx.Client],  # noqa: F811 (the fixture imported above)
) -> None:
    alice, bob = members["alice"], members["bob"]
    cloud.start_agent()
    net = _made(alice.post("/networks", json={"network": {"name": f"shared-{cloud.suffix}"}}), "network")
    _made(alice.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.96.0.0/24"}}), "subnet")
    peers = peers_group(alice)
    a_port = _made(_port(alice, net["id"], peers["id"]), "port")
    a = cloud.wait_active(_made(_instance(alice, cloud, "a", {"port": a_port["id"]}), "instance")["id"])
    # not yet his: neither the network nor the group
    check_error(_instance(bob, cloud, "b0", {"network": net["id"]}), 404, "NetworkNotFound")
    net_policy = share_with_bob(alice, "network", net["id"])
    check_error(_port(bob, net["id"], peers["id"]), 404, "SecurityGroupNotFound")
    group_policy = share_with_bob(alice, "security_group", peers["id"])

    b_port = _made(_port(bob, net["id"], peers["id"]), "port")
    b = cloud.wait_active(_made(_instance(bob, cloud, "b", {"port": b_port["id"]}), "instance")["id"])
    assert b["project_id"] == "bob" and b["nets"][0]["network_id"] == net["id"]
    cloud.wait_for(lambda: ping(b["netns"], _ip(a)), what="bob's instance -> alice's")
    assert ping(a["netns"], _ip(b))

    # in use: bob's port is on the network, in the group, through the policies
    for policy in (net_policy, group_policy):
        check_error(alice.delete(f"/rbac-policies/{policy['id']}"), 409, "RbacPolicyInUse")
    assert bob.delete(f"/instances/{b['id']}").status_code == 204
    assert bob.delete(f"/ports/{b_port['id']}").status_code == 204
    for policy in (net_policy, group_policy):
        assert alice.delete(f"/rbac-policies/{policy['id']}").status_code == 204
    check_error(_instance(bob, cloud, "b2", {"network": net["id"]}), 404, "NetworkNotFound")
    check_error(bob.post("/ports", json={"port": {"network_id": net["id"]}}), 404, "NetworkNotFound")
    assert alice.delete(f"/instances/{a['id']}").status_code == 204

"""RBAC policies on the OVN dataplane (a chassis' agent against a real OVN sandbox): bob's instance on alice's
network, in her security group, both shared with him by policies, reaches hers through OVN (the group's Port_Group
holds both projects' ports); once the policies go, his new ports on the network are refused."""

from __future__ import annotations

from typing import Any

import httpx

from tests.ovn.test_chassis import Chassis, chassis, ovn  # noqa: F401 -- the chassis' fixtures
from tests.support.api import check_error
from tests.support.cloud import ping
from tests.support.rbac import made as _made
from tests.support.rbac import members, peers_group, share_with_bob, tokens  # noqa: F401 -- fixtures


def test_a_network_and_group_shared_by_policy_carry_traffic_through_ovn(
    members: dict[str, httpx.Client],  # noqa: F811 (the fixtures imported above)
    chassis: Chassis,  # noqa: F811
) -> None:
    alice, bob, cloud = members["alice"], members["bob"], chassis.cloud
    net = _made(alice.post("/networks", json={"network": {"name": f"rbac-{cloud.suffix}"}}), "network")
    _made(alice.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.62.0.0/24"}}), "subnet")
    peers = peers_group(alice)
    policies = [share_with_bob(alice, "network", net["id"]), share_with_bob(alice, "security_group", peers["id"])]

    def instance(client: httpx.Client, name: str) -> dict[str, Any]:
        port = _made(client.post("/ports", json={"port": {"network_id": net["id"], "security_groups": [peers["id"]]}}),
                     "port")  # fmt: skip
        body = {"name": f"{name}-{cloud.suffix}", "host": cloud.host, "nets": [{"port": port["id"]}]}
        return cloud.wait_active(_made(client.post("/instances", json={"instance": body}), "instance")["id"])

    a, b = instance(alice, "a"), instance(bob, "b")
    a_ip, b_ip = (str(i["nets"][0]["fixed_ips"][0]["ip_address"]) for i in (a, b))
    cloud.wait_for(lambda: ping(b["netns"], a_ip, count=1, wait=1), timeout=30, what="bob's instance -> alice's")
    assert ping(a["netns"], b_ip, count=2, wait=2)

    assert bob.delete(f"/instances/{b['id']}").status_code == 204
    assert bob.delete(f"/ports/{b['nets'][0]['port_id']}").status_code == 204
    for policy in policies:
        assert alice.delete(f"/rbac-policies/{policy['id']}").status_code == 204
    check_error(bob.post("/ports", json={"port": {"network_id": net["id"]}}), 404, "NetworkNotFound")

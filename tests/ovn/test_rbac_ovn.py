"""RBAC policies on the OVN dataplane (a chassis' agent against a real OVN sandbox): bob's instance on alice's
network, in her security group, both shared with him by policies, reaches hers through OVN (the group's Port_Group
holds both projects' ports); once the policies go, his new ports on the network are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cloudnet.config import ServerConfig
from tests.ovn.test_chassis import Chassis, chassis, ovn  # noqa: F401 -- the chassis' fixtures
from tests.support.api import check_error
from tests.support.cloud import ping
from tests.support.server import RunningServer

TOKENS = {
    "admin": {"project_id": "ops", "role": "admin"},  # (the agent's and the `api` fixture's token)
    "alice-token": {"project_id": "alice", "role": "member"},
    "bob-token": {"project_id": "bob", "role": "member"},
}


@pytest.fixture
def tokens(server_config: ServerConfig) -> dict[str, Any]:
    server_config.tokens_file.write_text(json.dumps({"tokens": TOKENS}))
    return TOKENS


@pytest.fixture
def members(server: RunningServer, tokens: dict[str, Any]) -> Iterator[dict[str, httpx.Client]]:
    made = {who: httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": f"{who}-token"}, timeout=30)
            for who in ("alice", "bob")}  # fmt: skip
    yield made
    for client in made.values():
        client.close()


def _made(r: httpx.Response, member: str) -> dict[str, Any]:
    assert r.status_code == 201, r.text
    return dict(r.json()[member])


def test_a_network_and_group_shared_by_policy_carry_traffic_through_ovn(
    members: dict[str, httpx.Client],
    chassis: Chassis,  # noqa: F811 (the fixture imported above)
) -> None:
    alice, bob, cloud = members["alice"], members["bob"], chassis.cloud
    net = _made(alice.post("/networks", json={"network": {"name": f"rbac-{cloud.suffix}"}}), "network")
    _made(alice.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.62.0.0/24"}}), "subnet")
    peers = _made(alice.post("/security-groups", json={"security_group": {"name": "peers"}}), "security_group")
    rule = {"security_group_id": peers["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": "icmp",
            "remote_group_id": peers["id"]}  # fmt: skip
    _made(alice.post("/security-group-rules", json={"security_group_rule": rule}), "security_group_rule")
    policies = []
    for object_type, object_id in (("network", net["id"]), ("security_group", peers["id"])):
        body = {"object_type": object_type, "object_id": object_id, "action": "access_as_shared",
                "target_tenant": "bob"}  # fmt: skip
        policies.append(_made(alice.post("/rbac-policies", json={"rbac_policy": body}), "rbac_policy"))

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

"""Quotas as Neutron has them: the API, enforcement in the create's transaction, races, and the `openstack` CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.api import check_error, create
from tests.support.server import RunningServer

Json = dict[str, Any]
DEFAULTS = {"network": 100, "subnet": 100, "port": 500, "router": 10, "security_group": 10,
            "security_group_rule": 100, "floatingip": 50, "forward": 50, "rbac_policy": 100}  # fmt: skip


def set_quota(admin: httpx.Client, project: str, **limits: int) -> Json:
    r = admin.put(f"/quotas/{project}", json={"quota": limits})
    assert r.status_code == 200, r.text
    return dict(r.json()["quota"])


def test_defaults_show_and_reset(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    assert alice.get("/quotas/alice").json() == {"quota": DEFAULTS}
    assert alice.get("/quotas/alice/default").json() == {"quota": DEFAULTS}
    assert set_quota(admin, "alice", port=7, network=-1) == {**DEFAULTS, "port": 7, "network": -1}
    assert alice.get("/quotas/alice").json()["quota"]["port"] == 7
    assert alice.get("/quotas/alice/default").json()["quota"]["port"] == 500
    listed = admin.get("/quotas").json()["quotas"]
    assert listed == [{**DEFAULTS, "port": 7, "network": -1, "project_id": "alice", "tenant_id": "alice"}]
    assert admin.delete("/quotas/alice").status_code == 204
    assert alice.get("/quotas/alice").json() == {"quota": DEFAULTS}
    assert admin.get("/quotas").json() == {"quotas": []}


def test_details_count_what_the_project_holds(users: dict[str, httpx.Client]) -> None:
    alice = users["alice"]
    net = create(alice, "networks", "network", name="n")
    create(alice, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    for _ in range(3):
        create(alice, "ports", "port", network_id=net["id"])
    details = alice.get("/quotas/alice/details").json()["quota"]
    assert details["port"] == {"limit": 500, "used": 3, "reserved": 0}
    assert details["network"]["used"] == 1 and details["subnet"]["used"] == 1
    # the project's default group (made with its first port) and its four rules count too
    assert details["security_group"]["used"] == 1 and details["security_group_rule"]["used"] == 4


def test_who_may_read_and_change_quotas(users: dict[str, httpx.Client]) -> None:
    alice, bob = users["alice"], users["bob"]
    check_error(bob.get("/quotas/alice"), 403, "PolicyNotAuthorized")
    check_error(bob.get("/quotas/alice/details"), 403, "PolicyNotAuthorized")
    check_error(bob.get("/quotas"), 403, "PolicyNotAuthorized")
    check_error(bob.put("/quotas/bob", json={"quota": {"port": 5000}}), 403, "PolicyNotAuthorized")
    check_error(bob.delete("/quotas/alice"), 403, "PolicyNotAuthorized")
    assert alice.get("/quotas/alice").json()["quota"]["port"] == 500


@pytest.mark.parametrize(
    "body",
    [{"quota": {"ports": 5}}, {"quota": {"port": "x"}}, {"quota": {"port": 1.5}}, {"quota": {"port": -2}},
     {"quota": {"port": 2**40}}, {"quota": {"port": True}}, {"quota": {"port": None}}, {"quota": []}, {"port": 5},
     {"quota": {"port": 5, "check_limit": "yes"}}, {"quota": {"port": 5, "project_id": "bob"}}],
)  # fmt: skip
def test_bad_quota_bodies_are_400(users: dict[str, httpx.Client], body: Any) -> None:
    check_error(users["admin"].put("/quotas/alice", json=body), 400, "HTTPBadRequest")
    assert users["admin"].get("/quotas/alice").json() == {"quota": DEFAULTS}


def test_check_limit_refuses_a_limit_under_the_usage(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    create(alice, "networks", "network", name="a")
    create(alice, "networks", "network", name="b")
    r = admin.put("/quotas/alice", json={"quota": {"network": 1, "check_limit": True}})
    check_error(r, 400, "InvalidQuotaValue", "already used")
    assert set_quota(admin, "alice", network=1)["network"] == 1  # without check_limit: allowed, as in Neutron


def test_every_resource_stops_at_its_limit(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    ext = create(admin, "networks", "network", name="pub", **{"router:external": True})
    create(admin, "subnets", "subnet", network_id=ext["id"], cidr="192.0.2.0/24")
    set_quota(admin, "alice", network=1, subnet=1, port=2, router=1, security_group=2, security_group_rule=6,
              forward=1, rbac_policy=1)  # fmt: skip
    net = create(alice, "networks", "network", name="n")
    check_error(alice.post("/networks", json={"network": {"name": "m"}}), 409, "OverQuota", "['network']")
    sub = create(alice, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    r = alice.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.1.0.0/24"}})
    check_error(r, 409, "OverQuota", "['subnet']")
    create(alice, "ports", "port", network_id=net["id"])  # makes the default group (1 group, 4 rules)
    create(alice, "ports", "port", network_id=net["id"])
    r = alice.post("/ports", json={"port": {"network_id": net["id"]}})
    body = check_error(r, 409, "OverQuota")
    assert body["message"] == "Quota exceeded for resources: ['port']."
    router = create(alice, "routers", "router", name="r", external_gateway_info={"network_id": ext["id"]})
    check_error(alice.post("/routers", json={"router": {"name": "s"}}), 409, "OverQuota", "['router']")
    # A router's interface and gateway ports are cloudnet's own doing: not refused over the port quota.
    assert alice.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).status_code == 200
    group = create(alice, "security-groups", "security_group", name="g")  # + 2 egress rules: 6 of 6
    check_error(alice.post("/security-groups", json={"security_group": {"name": "h"}}), 409, "OverQuota",
                "['security_group']")  # fmt: skip
    rule = {"security_group_id": group["id"], "direction": "ingress", "protocol": "tcp", "port_range_min": 22,
            "port_range_max": 22}  # fmt: skip
    check_error(alice.post("/security-group-rules", json={"security_group_rule": rule}), 409, "OverQuota",
                "['security_group_rule']")  # fmt: skip
    r = alice.post(f"/networks/{net['id']}/forwards", json={"listen_address": "192.0.2.50"})
    assert r.status_code == 201, r.text
    r = alice.post(f"/networks/{net['id']}/forwards", json={"listen_address": "192.0.2.51"})
    check_error(r, 409, "OverQuota", "['forward']")
    for target, status in (("bob", 201), ("carol", 409)):
        share = {"object_type": "network", "object_id": net["id"], "action": "access_as_shared",
                 "target_tenant": target}  # fmt: skip
        assert alice.post("/rbac-policies", json={"rbac_policy": share}).status_code == status
    details = alice.get("/quotas/alice/details").json()["quota"]
    assert {k: v["used"] for k, v in details.items()} == {
        "network": 1,
        "subnet": 1,
        "port": 3,
        "router": 1,
        "security_group": 2,
        "security_group_rule": 6,
        "floatingip": 1,  # a forward is a floating IP (services/forwards/floating_common.py): both count it
        "forward": 1,
        "rbac_policy": 1,
    }  # fmt: skip  (ports: two of alice's and the router's interface; the gateway port counts for nobody)


def test_a_bulk_create_over_the_limit_creates_nothing(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    set_quota(admin, "alice", port=5)
    net = create(alice, "networks", "network", name="n")
    create(alice, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    check_error(alice.post("/ports", json={"ports": [{"network_id": net["id"]}] * 6}), 409, "OverQuota")
    assert alice.get("/ports").json()["ports"] == []
    assert len(alice.post("/ports", json={"ports": [{"network_id": net["id"]}] * 5}).json()["ports"]) == 5
    set_quota(admin, "alice", port=-1)
    assert len(alice.post("/ports", json={"ports": [{"network_id": net["id"]}] * 20}).json()["ports"]) == 20
    set_quota(admin, "alice", port=0, network=0)
    check_error(alice.post("/networks", json={"network": {"name": "m"}}), 409, "OverQuota")


def test_instances_and_pools_stop_at_the_port_quota(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    host = "quota-host"
    assert admin.put(f"/hosts/{host}", json={"host": {"agent_version": "t"}}).status_code == 200
    net = create(alice, "networks", "network", name="n")
    create(alice, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    set_quota(admin, "alice", port=1)
    create(alice, "instances", "instance", name="vm1", host=host, nets=[{"network": net["id"]}])
    r = alice.post("/instances", json={"instance": {"name": "vm2", "host": host, "nets": [{"network": net["id"]}]}})
    check_error(r, 409, "OverQuota", "['port']")
    assert [i["name"] for i in alice.get("/instances").json()["instances"]] == ["vm1"]
    r = alice.post("/port-pools/claim", json={"claim": {"host": host, "network_id": net["id"]}})
    check_error(r, 409, "OverQuota", "['port']")


@pytest.mark.parametrize("bulk", [5, 7])
def test_concurrent_bulk_creates_never_pass_the_limit(users: dict[str, httpx.Client], server: RunningServer,
                                                      bulk: int) -> None:  # fmt: skip
    admin, alice = users["admin"], users["alice"]
    net = create(alice, "networks", "network", name="n")
    create(alice, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/22")
    set_quota(admin, "alice", port=50)

    def attempt(_: int) -> int:
        with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "alice-token"}, timeout=60) as c:
            return c.post("/ports", json={"ports": [{"network_id": net["id"]}] * bulk}).status_code

    with ThreadPoolExecutor(20) as pool:
        statuses = list(pool.map(attempt, range(20)))
    assert set(statuses) <= {201, 409}
    ports = alice.get("/ports", params={"network_id": net["id"]}).json()["ports"]
    assert len(ports) == statuses.count(201) * bulk
    assert len(ports) == 50 // bulk * bulk  # every create that fitted got in, none more


# -- the `openstack` CLI (python-openstackclient), as a user runs it ------------------------------------------------


def _openstack(clouds: Path, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_CLIENT_CONFIG_FILE=str(clouds), OS_CLOUD="cloudnet", OS_TOKEN=token)
    exe = Path(sys.executable).parent / "openstack"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=120)


def test_openstack_quota_show_and_set(users: dict[str, httpx.Client], server: RunningServer,
                                      tmp_path: Path) -> None:  # fmt: skip
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(yaml.safe_dump({"clouds": {"cloudnet": {
        "auth_type": "admin_token", "auth": {"endpoint": server.url + "/v2.0"},
        "network_endpoint_override": server.url + "/v2.0", "identity_endpoint_override": server.url + "/v3",
    }}}))  # fmt: skip
    done = _openstack(clouds, "admin-token", "quota", "set", "--ports", "42", "alice")
    assert done.returncode == 0, done.stderr
    assert users["alice"].get("/quotas/alice").json()["quota"]["port"] == 42
    done = _openstack(clouds, "alice-token", "quota", "show", "--network", "alice", "-f", "yaml")
    assert done.returncode == 0, done.stderr
    shown = {row["Resource"]: row["Limit"] for row in yaml.safe_load(done.stdout)}
    assert shown["ports"] == 42 and shown["networks"] == 100 and shown["security_groups"] == 10
    done = _openstack(clouds, "bob-token", "quota", "set", "--ports", "1000", "bob")
    assert done.returncode != 0 and "403" in done.stderr + done.stdout
    assert users["bob"].get("/quotas/bob").json()["quota"]["port"] == 500

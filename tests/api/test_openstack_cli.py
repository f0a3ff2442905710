"""The real `openstack` CLI (python-openstackclient) against the live API: router routes, a gateway on an external
network without a subnet, tags at creation (clouds.yaml with no Keystone: auth_type none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.api import create
from tests.support.server import RunningServer


@pytest.fixture
def backend() -> str:
    """The CLI is what is tested here, not the database (its start-up costs seconds a command): SQLite only."""
    return "sqlite"


@pytest.fixture
def openstack(server: RunningServer, tmp_path: Path) -> Any:
    clouds = tmp_path / "clouds.yaml"
    endpoint = server.url + "/v2.0"
    clouds.write_text(yaml.safe_dump({"clouds": {"cloudnet": {
        "auth_type": "none", "auth": {"endpoint": endpoint}, "network_endpoint_override": endpoint,
        # (project look-ups, as `--target-project`'s: cloudnet's sliver of Keystone, api/identity.py)
        "identity_endpoint_override": server.url + "/v3"}}}))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_CLIENT_CONFIG_FILE=str(clouds), OS_CLOUD="cloudnet")
    exe = Path(sys.executable).parent / "openstack"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=120)

    return run


def test_network_create_with_tags(openstack: Any, api: httpx.Client) -> None:
    done = openstack("network", "create", "--tag", "x", "--tag", "y", "tagged", "-f", "json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert sorted(shown["tags"]) == ["x", "y"]
    net = api.get(f"/networks/{shown['id']}").json()["network"]
    assert sorted(net["tags"]) == ["x", "y"]
    # hostile: a tag Neutron refuses (a comma) fails the command and tags nothing
    bad = openstack("network", "create", "--tag", "a,b", "bad", "-f", "json")
    assert bad.returncode != 0
    assert all("a,b" not in n["tags"] for n in api.get("/networks").json()["networks"])


def test_router_routes_and_gateway_without_subnet(openstack: Any, api: httpx.Client) -> None:
    ext = create(api, "networks", "network", name="public", **{"router:external": True})
    net = create(api, "networks", "network", name="inside")
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    # (each command costs the CLI's start-up, ~2 s: what the CLI does not add is made through the API)
    rid = create(api, "routers", "router", name="r1")["id"]
    done = openstack("router", "set", "--external-gateway", ext["id"], "r1")
    assert done.returncode == 0, done.stderr
    assert api.get(f"/routers/{rid}").json()["router"]["external_gateway_info"]["network_id"] == ext["id"]
    assert api.put(f"/routers/{rid}/add_router_interface", json={"subnet_id": sub["id"]}).status_code == 200

    done = openstack("router", "add", "route", "r1", "--route", "destination=192.168.5.0/24,gateway=10.0.0.9",
                     "--route", "destination=192.168.6.0/24,gateway=10.0.0.9")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert api.get(f"/routers/{rid}").json()["router"]["routes"] == [
        {"destination": "192.168.5.0/24", "nexthop": "10.0.0.9"},
        {"destination": "192.168.6.0/24", "nexthop": "10.0.0.9"},
    ]
    done = openstack("router", "remove", "route", "r1", "--route", "destination=192.168.5.0/24,gateway=10.0.0.9")
    assert done.returncode == 0, done.stderr
    assert api.get(f"/routers/{rid}").json()["router"]["routes"] == [
        {"destination": "192.168.6.0/24", "nexthop": "10.0.0.9"}
    ]
    # hostile: a nexthop the router is not connected to is refused with Neutron's words
    done = openstack("router", "add", "route", "r1", "--route", "destination=192.168.7.0/24,gateway=172.16.0.1")
    assert done.returncode != 0
    assert "not connected with router" in done.stderr + done.stdout
    assert len(api.get(f"/routers/{rid}").json()["router"]["routes"]) == 1
    # `router set --route` replaces them all, `--no-route` clears them
    done = openstack("router", "set", "r1", "--no-route")
    assert done.returncode == 0, done.stderr
    assert api.get(f"/routers/{rid}").json()["router"]["routes"] == []


def test_qos_policy_rule_and_port_through_the_cli(openstack: Any, api: httpx.Client) -> None:
    done = openstack("network", "qos", "policy", "create", "--description", "ten megabits", "gold", "-f", "json")
    assert done.returncode == 0, done.stderr
    policy = json.loads(done.stdout)
    done = openstack("network", "qos", "rule", "create", "--type", "bandwidth-limit", "--max-kbps", "10000",
                     "--max-burst-kbits", "800", "--egress", "gold", "-f", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = openstack("network", "qos", "rule", "create", "--type", "dscp-marking", "--dscp-mark", "46", "gold")
    assert done.returncode == 0, done.stderr
    net = create(api, "networks", "network", name="qos-cli")
    port = create(api, "ports", "port", network_id=net["id"], name="p1")
    done = openstack("port", "set", "--qos-policy", "gold", "p1")
    assert done.returncode == 0, done.stderr
    assert api.get(f"/ports/{port['id']}").json()["port"]["qos_policy_id"] == policy["id"]
    rules = api.get(f"/qos/policies/{policy['id']}").json()["policy"]["rules"]
    assert sorted((r["type"], r.get("max_kbps"), r.get("max_burst_kbps"), r.get("dscp_mark")) for r in rules) == [
        ("bandwidth_limit", 10000, 800, None), ("dscp_marking", None, None, 46)]  # fmt: skip
    # hostile: a DSCP value Neutron refuses fails the command and adds nothing; the policy in use is not deleted
    bad = openstack("network", "qos", "rule", "create", "--type", "dscp-marking", "--dscp-mark", "47", "gold")
    assert bad.returncode != 0 and "is not in" in bad.stderr
    assert len(api.get(f"/qos/policies/{policy['id']}").json()["policy"]["rules"]) == 2
    busy = openstack("network", "qos", "policy", "delete", "gold")
    assert busy.returncode != 0
    done = openstack("port", "unset", "--qos-policy", "p1")
    assert done.returncode == 0, done.stderr
    assert openstack("network", "qos", "policy", "delete", "gold").returncode == 0
    assert api.get(f"/qos/policies/{policy['id']}").status_code == 404


def test_network_rbac(openstack: Any, api: httpx.Client) -> None:
    """`openstack network rbac create/list/show/set/delete`, and the CLI showing a refusal in Neutron's words."""
    net = create(api, "networks", "network", name="to-share")
    done = openstack("network", "rbac", "create", "--type", "network", "--action", "access_as_shared",
                     "--target-project", "bob", net["id"], "-f", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert (made["object_id"], made["target_project_id"], made["action"]) == (net["id"], "bob", "access_as_shared")
    listed = openstack("network", "rbac", "list", "--type", "network", "--long", "-f", "json")
    assert listed.returncode == 0, listed.stderr
    assert [(p["ID"], p["Object ID"], p["Action"]) for p in json.loads(listed.stdout)] == [
        (made["id"], net["id"], "access_as_shared")
    ]
    done = openstack("network", "rbac", "set", "--target-project", "carol", made["id"])
    assert done.returncode == 0, done.stderr
    shown = openstack("network", "rbac", "show", made["id"], "-f", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["target_project_id"] == "carol"
    # hostile: an action groups do not have (the server's refusal); then a wildcard (an admin may), and removal
    group = create(api, "security-groups", "security_group", name="g")
    bad = openstack("network", "rbac", "create", "--type", "security_group", "--action", "access_as_external",
                    "--target-all-projects", group["id"])  # fmt: skip
    assert bad.returncode != 0 and "Invalid action" in bad.stderr + bad.stdout
    done = openstack("network", "rbac", "create", "--type", "network", "--action", "access_as_shared",
                     "--target-all-projects", net["id"], "-f", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert api.get(f"/networks/{net['id']}").json()["network"]["shared"] is True
    done = openstack("network", "rbac", "delete", made["id"], json.loads(done.stdout)["id"])
    assert done.returncode == 0, done.stderr
    assert api.get("/rbac-policies").json()["rbac_policies"] == []
    assert api.get(f"/networks/{net['id']}").json()["network"]["shared"] is False


def test_rbac_on_pools_scopes_and_qos_policies(openstack: Any, api: httpx.Client) -> None:
    """`openstack network rbac create --type subnetpool|address_scope|qos_policy`, the object named as the CLI
    finds it (by name), listed by type and removed; and the CLI shows the server's refusal of an action it lacks."""
    made = {
        "subnetpool": create(api, "subnetpools", "subnetpool", name="cli-pool", prefixes=["10.160.0.0/16"]),
        "address_scope": create(api, "address-scopes", "address_scope", name="cli-scope", ip_version=4),
        "qos_policy": api.post("/qos/policies", json={"policy": {"name": "cli-qos"}}).json()["policy"],
    }
    for object_type, obj in made.items():
        done = openstack("network", "rbac", "create", "--type", object_type, "--action", "access_as_shared",
                         "--target-project", "bob", obj["name"], "-f", "json")  # fmt: skip
        assert done.returncode == 0, done.stderr
        pol = json.loads(done.stdout)
        assert (pol["object_type"], pol["object_id"], pol["target_project_id"]) == (object_type, obj["id"], "bob")
        listed = openstack("network", "rbac", "list", "--type", object_type, "-f", "json")
        assert listed.returncode == 0, listed.stderr
        assert [p["ID"] for p in json.loads(listed.stdout)] == [pol["id"]]
        bad = openstack("network", "rbac", "create", "--type", object_type, "--action", "access_as_external",
                        "--target-project", "carol", obj["id"])  # fmt: skip
        assert bad.returncode != 0 and "Invalid action" in bad.stderr + bad.stdout
        done = openstack("network", "rbac", "delete", pol["id"])
        assert done.returncode == 0, done.stderr
    assert api.get("/rbac-policies").json()["rbac_policies"] == []

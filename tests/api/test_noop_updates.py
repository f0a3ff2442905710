"""A PUT that changes nothing bumps nothing (revision_number, updated_at, the revision log), on every resource, as
in Neutron; one that changes something bumps the revision by one."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.api import create


def revision(api: httpx.Client) -> int:
    return int(api.get("/events", params={"since": 0, "limit": 1}).json()["revision"])


@pytest.fixture
def world(api: httpx.Client) -> dict[str, Any]:
    net = create(api, "networks", "network", name="n", tags=["a"])
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr="10.1.0.0/24", name="s",
                 host_routes=[{"destination": "10.9.0.0/16", "nexthop": "10.1.0.9"}])  # fmt: skip
    sg = create(api, "security-groups", "security_group", name="g")
    port = create(api, "ports", "port", network_id=net["id"], name="p", security_groups=[sg["id"]],
                  allowed_address_pairs=[{"ip_address": "10.1.0.200"}])  # fmt: skip
    router = create(api, "routers", "router", name="r")
    assert api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).status_code == 200
    router = api.get(f"/routers/{router['id']}").json()["router"]
    assert api.put("/hosts/h1", json={"host": {"agent_version": "test"}}).status_code in (200, 201)
    inst = create(api, "instances", "instance", name="i", host="h1", metadata={"k": "v"})
    return {"networks": net, "subnets": sub, "security-groups": sg, "ports": port, "routers": router,
            "instances": inst}  # fmt: skip


SAME = {
    "networks": lambda x: {"network": {"name": x["name"], "admin_state_up": True, "mtu": x["mtu"], "shared": False}},
    "subnets": lambda x: {"subnet": {"name": x["name"], "host_routes": x["host_routes"],
                                     "allocation_pools": x["allocation_pools"], "gateway_ip": x["gateway_ip"]}},
    "security-groups": lambda x: {"security_group": {"name": x["name"], "description": x["description"]}},
    "ports": lambda x: {"port": {"name": x["name"], "fixed_ips": x["fixed_ips"], "security_groups":
                                 x["security_groups"], "allowed_address_pairs": x["allowed_address_pairs"],
                                 "admin_state_up": True}},
    "routers": lambda x: {"router": {"name": x["name"], "admin_state_up": True, "routes": [],
                                     "external_gateway_info": None}},
    "instances": lambda x: {"instance": {"name": x["name"], "metadata": x["metadata"]}},
}  # fmt: skip


@pytest.mark.parametrize("collection", list(SAME))
def test_a_no_op_update_bumps_nothing(api: httpx.Client, world: dict[str, Any], collection: str) -> None:
    item = world[collection]
    member = next(iter(SAME[collection](item)))
    current = api.get(f"/{collection}/{item['id']}").json()[member]
    start = revision(api)
    r = api.put(f"/{collection}/{item['id']}", json=SAME[collection](current))
    assert r.status_code == 200, r.text
    after = r.json()[member]
    assert after["revision_number"] == current["revision_number"]
    assert after["updated_at"] == current["updated_at"]
    assert revision(api) == start  # no event: the agents have nothing to do
    # a real change is one revision
    r = api.put(f"/{collection}/{item['id']}", json={member: {"name": "renamed"}})
    assert r.json()[member]["revision_number"] == current["revision_number"] + 1
    assert revision(api) == start + 1


def test_same_tags_bump_nothing(api: httpx.Client, world: dict[str, Any]) -> None:
    net = api.get(f"/networks/{world['networks']['id']}").json()["network"]
    start = revision(api)
    assert api.put(f"/networks/{net['id']}/tags", json={"tags": ["a"]}).status_code == 200
    assert api.put(f"/networks/{net['id']}/tags/a").status_code == 201
    router = world["routers"]
    assert api.delete(f"/routers/{router['id']}/tags").status_code == 204  # (it had none)
    assert revision(api) == start
    assert api.get(f"/networks/{net['id']}").json()["network"]["revision_number"] == net["revision_number"]
    assert api.put(f"/networks/{net['id']}/tags", json={"tags": ["b"]}).json() == {"tags": ["b"]}
    assert api.get(f"/networks/{net['id']}").json()["network"]["revision_number"] == net["revision_number"] + 1

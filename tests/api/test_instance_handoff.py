"""`handoff` on an instance: the runtime (Docker's Join) takes the plugged device out of the namespace cloudnet
provided. Only the service role or an admin may ask for it, only with a namespace cloudnet provides; the host's
desired state carries it to the agent."""

from __future__ import annotations

import httpx

from tests.support.api import create, error


def test_handoff_reaches_the_desired_state(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    assert admin.put("/hosts/node-h", json={"host": {"agent_version": "test"}}).status_code == 200
    net = create(alice, "networks", "network", name="h")
    create(alice, "subnets", "subnet", network_id=net["id"], cidr="10.7.0.0/24")
    body = {"name": "d", "project_id": "alice", "nets": [{"network": net["id"]}], "handoff": True}
    r = admin.post("/instances", json={"instance": body})
    assert r.status_code == 201, r.text
    inst = r.json()["instance"]
    assert inst["handoff"] is True
    plain = create(alice, "instances", "instance", name="p", nets=[{"network": net["id"]}])
    assert plain["handoff"] is False
    state = admin.get("/hosts/node-h/state").json()
    assert {i["id"]: i["handoff"] for i in state["instances"]} == {inst["id"]: True, plain["id"]: False}


def test_handoff_is_the_runtimes_only(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    assert admin.put("/hosts/node-h", json={"host": {"agent_version": "test"}}).status_code == 200
    net = create(alice, "networks", "network", name="h")
    # a member may not take a device out of a host's namespace
    error(alice.post("/instances", json={"instance": {"name": "x", "nets": [{"network": net["id"]}],
                                                     "handoff": True}}), 403)  # fmt: skip
    # a namespace the caller named is the caller's already: nothing for cloudnet to hand off
    error(admin.post("/instances", json={"instance": {"name": "x", "netns": "somewhere", "handoff": True}}), 400)
    error(admin.post("/instances", json={"instance": {"name": "x", "handoff": "yes please"}}), 400)
    assert alice.get("/instances").json()["instances"] == []

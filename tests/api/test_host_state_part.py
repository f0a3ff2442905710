"""The QoS part of a host's desired state (GET /v2.0/hosts/{name}/state?part=qos&port=ID...), what the agent's
QoS-only pass fetches: every port's QoS and the named ports' views exactly as the whole state has them, nothing of
another host's ports, and no more than it allows. And the whole state's `requests` (`since=N`): the request that last
changed each of the host's ports after N."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.test_instances import network_with_subnet, new_instance, register


def _part(api: httpx.Client, host: str, ports: list[str], part: str = "qos") -> httpx.Response:
    return api.get(f"/hosts/{host}/state", params={"part": part, "port": ports})


def _limited_port(api: httpx.Client, host: str, cidr: str) -> tuple[str, dict[str, Any]]:
    register(api, host)
    net, _sub = network_with_subnet(api, cidr)
    port_id = new_instance(api, f"i-{host}", host=host, nets=[{"network": net["id"]}])["nets"][0]["port_id"]
    pol = api.post("/qos/policies", json={"policy": {"name": f"p-{host}"}}).json()["policy"]
    rule = api.post(f"/qos/policies/{pol['id']}/bandwidth_limit_rules",
                    json={"bandwidth_limit_rule": {"max_kbps": 3000}}).json()["bandwidth_limit_rule"]  # fmt: skip
    assert api.put(f"/ports/{port_id}", json={"port": {"qos_policy_id": pol["id"]}}).status_code == 200
    return port_id, {"policy": pol, "rule": rule}


def test_the_qos_part_is_the_whole_states_qos_and_port_views(api: httpx.Client) -> None:
    port_id, made = _limited_port(api, "part-a", "10.61.0.0/24")
    whole = api.get("/hosts/part-a/state").json()
    r = _part(api, "part-a", [port_id])
    assert r.status_code == 200, r.text
    part = r.json()
    assert part["host"] == "part-a" and part["revision"] == whole["revision"]
    assert part["ports"] == {port_id: whole["ports"][port_id]}  # (the agent compares them key for key)
    assert part["qos"] == whole["qos"]
    assert part["qos"][port_id]["bandwidth_limit"]["egress"]["max_kbps"] == 3000
    # a rule's change shows at once
    api.put(f"/qos/policies/{made['policy']['id']}/bandwidth_limit_rules/{made['rule']['id']}",
            json={"bandwidth_limit_rule": {"max_kbps": 4000}})  # fmt: skip
    assert _part(api, "part-a", []).json()["qos"][port_id]["bandwidth_limit"]["egress"]["max_kbps"] == 4000


def test_the_part_names_nothing_of_another_hosts_ports_and_refuses_what_it_does_not_serve(
    users: dict[str, httpx.Client],
) -> None:
    api = users["admin"]
    mine, _ = _limited_port(api, "part-b", "10.62.0.0/24")
    theirs, _ = _limited_port(api, "part-c", "10.63.0.0/24")
    part = _part(api, "part-b", [mine, theirs, "no-such-port", "' OR 1=1 --"]).json()
    assert set(part["ports"]) == {mine} and set(part["qos"]) == {mine}  # (another host's port: not even its QoS)
    r = _part(api, "part-b", [mine], part="ports")
    assert r.status_code == 400 and "part" in r.json()["NeutronError"]["message"]
    r = _part(api, "part-b", [f"p{i}" for i in range(101)])
    assert r.status_code == 400 and "at most 100" in r.json()["NeutronError"]["message"]
    r = _part(users["alice"], "part-b", [mine])  # a member: no host's state
    assert r.status_code == 403, r.text
    assert _part(api, "no-such-host", [mine]).json()["ports"] == {}


def test_since_names_each_ports_last_request_after_it_and_only_the_hosts(api: httpx.Client) -> None:
    mine, _ = _limited_port(api, "part-d", "10.64.0.0/24")
    theirs, _ = _limited_port(api, "part-e", "10.65.0.0/24")
    before = api.get("/hosts/part-d/state").json()["revision"]
    assert "requests" not in api.get("/hosts/part-d/state").json()  # (not asked for)
    for port_id, rid in ((mine, "req-00000000-0000-4000-8000-000000000001"), (theirs, "req-other")):
        api.put(f"/ports/{port_id}", headers={"X-OpenStack-Request-ID": rid}, json={"port": {"name": "renamed"}})
    # an agent's report of the port is no request to name (it names the one it realised)
    report = {"ports": [{"id": mine, "status": "ACTIVE", "binding:vif_type": "bridge", "binding:vif_details": {}}]}
    assert api.put("/hosts/part-d/ports", headers={"X-OpenStack-Request-ID": "req-report"}, json=report).is_success
    state = api.get("/hosts/part-d/state", params={"since": before}).json()
    assert state["requests"] == {mine: "req-00000000-0000-4000-8000-000000000001"}
    assert api.get("/hosts/part-d/state", params={"since": state["revision"]}).json()["requests"] == {}
    for bad in ("-1", "1e3", "abc", "9" * 20, "", " "):
        r = api.get("/hosts/part-d/state", params={"since": bad})
        assert r.status_code == 400 and "since" in r.json()["NeutronError"]["message"], (bad, r.text)

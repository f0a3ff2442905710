"""QoS policies and rules through the API: Neutron's shapes, defaults, conflicts and errors; a policy on networks
and ports (a port's own wins) as the hosts' desired state carries it; and what other projects may not do."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.api import check_error, create

Json = dict[str, Any]
BW = "bandwidth_limit_rules"


def _policy(client: httpx.Client, **body: Any) -> Json:
    r = client.post("/qos/policies", json={"policy": {"name": "p", **body}})
    assert r.status_code == 201, r.text
    return dict(r.json()["policy"])


def _rule(client: httpx.Client, policy_id: str, collection: str, member: str, **body: Any) -> httpx.Response:
    return client.post(f"/qos/policies/{policy_id}/{collection}", json={member: body})


def test_policies_and_rules_have_neutrons_shapes(api: httpx.Client) -> None:
    pol = _policy(api, description="d", tags=["gold"])
    assert {k: pol[k] for k in ("name", "description", "shared", "is_default", "rules", "tags")} == {
        "name": "p", "description": "d", "shared": False, "is_default": False, "rules": [], "tags": ["gold"],
    }  # fmt: skip
    assert pol["project_id"] == pol["tenant_id"] and pol["revision_number"] == 0
    bw = _rule(api, pol["id"], BW, "bandwidth_limit_rule", max_kbps=10000)
    assert bw.status_code == 201, bw.text
    rule = bw.json()["bandwidth_limit_rule"]
    assert rule == {"id": rule["id"], "max_kbps": 10000, "max_burst_kbps": 0, "direction": "egress"}
    dscp = _rule(api, pol["id"], "dscp_marking_rules", "dscp_marking_rule", dscp_mark=26).json()["dscp_marking_rule"]
    shown = api.get(f"/qos/policies/{pol['id']}").json()["policy"]
    assert shown["revision_number"] == 2  # (each rule moves its policy's revision)
    assert shown["rules"] == [
        {**rule, "type": "bandwidth_limit", "qos_policy_id": pol["id"]},
        {**dscp, "type": "dscp_marking", "qos_policy_id": pol["id"]},
    ]
    url = f"/qos/policies/{pol['id']}/{BW}/{rule['id']}"
    r = api.put(url, json={"bandwidth_limit_rule": {"max_kbps": 2000, "direction": "ingress"}})
    assert r.json()["bandwidth_limit_rule"] == {**rule, "max_kbps": 2000, "direction": "ingress"}
    assert [x["id"] for x in api.get(f"/qos/policies/{pol['id']}/{BW}").json()[BW]] == [rule["id"]]
    assert api.get(f"/qos/policies/{pol['id']}/{BW}", params={"direction": "egress"}).json()[BW] == []
    assert api.delete(url).status_code == 204
    check_error(api.get(url), 404, "QosRuleNotFound", f"QoS rule {rule['id']} for policy {pol['id']} could not")
    assert api.get("/qos/rule-types").json() == {"rule_types": [{"type": "bandwidth_limit"}, {"type": "dscp_marking"}]}
    details = api.get("/qos/rule-types/bandwidth_limit").json()["rule_type"]
    assert details["type"] == "bandwidth_limit" and details["drivers"][0]["name"] == "cloudnet"
    aliases = {e["alias"] for e in api.get("/extensions").json()["extensions"]}
    assert {"qos", "qos-bw-limit-direction", "qos-default", "qos-rule-type-details"} <= aliases
    assert api.put(f"/policies/{pol['id']}/tags", json={"tags": ["blue"]}).status_code == 200
    assert api.get(f"/qos/policies/{pol['id']}").json()["policy"]["tags"] == ["blue"]
    assert api.get("/qos/policies", params={"tags": "blue"}).json()["policies"][0]["id"] == pol["id"]
    assert api.delete(f"/qos/policies/{pol['id']}").status_code == 204
    check_error(api.get(f"/qos/policies/{pol['id']}"), 404, "QosPolicyNotFound", "QoS policy")


def test_values_and_conflicts_are_refused_as_neutron_refuses_them(api: httpx.Client) -> None:
    pol = _policy(api)
    cases = [
        ({"max_kbps": -1}, "Invalid input for max_kbps. Reason: '-1' is too small - must be at least '0'."),
        ({"max_kbps": 2**31}, f"'{2**31}' is too large - must be no larger than '{2**31 - 1}'"),
        ({"max_kbps": "fast"}, "'fast' is not an integer"),
        ({"max_kbps": 10, "direction": "up"}, "'up' is not in ['egress', 'ingress']"),
        ({"max_kbps": 10, "rate": 1}, "Unrecognized attribute(s) 'rate'"),
        ({}, "Required attribute 'max_kbps' not specified"),
    ]
    for body, words in cases:
        check_error(_rule(api, pol["id"], BW, "bandwidth_limit_rule", **body), 400, "HTTPBadRequest", words)
    check_error(_rule(api, pol["id"], "dscp_marking_rules", "dscp_marking_rule", dscp_mark=3), 400, "HTTPBadRequest",
                "'3' is not in [0, 8, 10")  # fmt: skip
    first = _rule(api, pol["id"], BW, "bandwidth_limit_rule", max_kbps=100).json()["bandwidth_limit_rule"]
    # too many rules: a second of a type and direction
    words = f"Rule bandwidth_limit conflicts with rule {first['id']} which already exists in QoS Policy {pol['id']}."
    check_error(_rule(api, pol["id"], BW, "bandwidth_limit_rule", max_kbps=5), 409, "QoSRulesConflict", words)
    assert _rule(api, pol["id"], BW, "bandwidth_limit_rule", max_kbps=5, direction="ingress").status_code == 201
    minimum = "minimum_bandwidth_rules", "minimum_bandwidth_rule"
    check_error(_rule(api, pol["id"], *minimum, min_kbps=200), 409, "QoSRuleParameterConflict",
                "restricts the bandwidth to 100")  # fmt: skip
    assert _rule(api, pol["id"], *minimum, min_kbps=50).status_code == 201
    # a policy holding a rule no dataplane enforces is refused where it would be enforced
    net = create(api, "networks", "network", name="n")
    check_error(api.put(f"/networks/{net['id']}", json={"network": {"qos_policy_id": pol["id"]}}), 409,
                "QosRuleNotSupported", "Rule minimum_bandwidth is not supported")  # fmt: skip
    # one default per project
    _policy(api, is_default=True)
    check_error(api.post("/qos/policies", json={"policy": {"is_default": True}}), 409,
                "QoSPolicyDefaultAlreadyExists", "A default QoS policy exists for project")  # fmt: skip


def test_networks_and_ports_carry_a_policy_and_a_ports_own_wins(api: httpx.Client) -> None:
    host = "qos-host"
    assert api.put(f"/hosts/{host}", json={"host": {"agent_version": "test"}}).status_code == 200
    slow, fast = _policy(api, name="slow"), _policy(api, name="fast")
    _rule(api, slow["id"], BW, "bandwidth_limit_rule", max_kbps=1000, max_burst_kbps=100)
    _rule(api, fast["id"], BW, "bandwidth_limit_rule", max_kbps=9000, direction="ingress")
    _rule(api, fast["id"], "dscp_marking_rules", "dscp_marking_rule", dscp_mark=46)
    net = create(api, "networks", "network", name="n", qos_policy_id=slow["id"])
    assert net["qos_policy_id"] == slow["id"]
    create(api, "subnets", "subnet", network_id=net["id"], cidr="10.9.0.0/24")
    inst = create(api, "instances", "instance", name="i", host=host, nets=[{"network": net["id"]}] * 2)
    first, second = (p["port_id"] for p in inst["nets"])
    assert api.get(f"/ports/{first}").json()["port"]["qos_policy_id"] is None
    r = api.put(f"/ports/{second}", json={"port": {"qos_policy_id": fast["id"]}})
    assert r.status_code == 200 and r.json()["port"]["qos_policy_id"] == fast["id"]
    qos = api.get(f"/hosts/{host}/state").json()["qos"]
    assert qos == {
        first: {"policy_id": slow["id"], "dscp_mark": None,
                "bandwidth_limit": {"egress": {"max_kbps": 1000, "max_burst_kbps": 100}}},
        second: {"policy_id": fast["id"], "dscp_mark": 46,
                 "bandwidth_limit": {"ingress": {"max_kbps": 9000, "max_burst_kbps": 0}}},
    }  # fmt: skip
    assert api.get("/ports", params={"qos_policy_id": fast["id"]}).json()["ports"][0]["id"] == second
    check_error(api.delete(f"/qos/policies/{fast['id']}"), 409, "QosPolicyInUse",
                f"QoS Policy {fast['id']} is used by port {second}.")  # fmt: skip
    check_error(api.delete(f"/qos/policies/{slow['id']}"), 409, "QosPolicyInUse", "is used by network")
    assert api.put(f"/ports/{second}", json={"port": {"qos_policy_id": None}}).status_code == 200
    assert api.delete(f"/qos/policies/{fast['id']}").status_code == 204
    assert api.get(f"/hosts/{host}/state").json()["qos"][second]["policy_id"] == slow["id"]  # its network's now


def test_the_projects_default_policy_goes_to_its_new_networks(api: httpx.Client) -> None:
    default = _policy(api, is_default=True, project_id="proj-d")
    net = create(api, "networks", "network", name="d", project_id="proj-d")
    assert net["qos_policy_id"] == default["id"]
    none = create(api, "networks", "network", name="e", project_id="proj-d", qos_policy_id=None)
    assert none["qos_policy_id"] is None
    assert create(api, "networks", "network", name="f", project_id="proj-other")["qos_policy_id"] is None


def test_other_projects_cannot_use_or_change_a_policy(users: dict[str, httpx.Client]) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    hers = _policy(admin, project_id="alice")
    everyone = _policy(admin, project_id="alice", shared=True)
    rule = _rule(admin, hers["id"], BW, "bandwidth_limit_rule", max_kbps=10).json()["bandwidth_limit_rule"]
    net = create(bob, "networks", "network", name="bobs")
    port = create(bob, "ports", "port", network_id=net["id"])
    missing = f"QoS policy {hers['id']} could not be found."
    # another project's policy on a port or a network: not found, as Neutron answers (it is not visible)
    check_error(bob.put(f"/ports/{port['id']}", json={"port": {"qos_policy_id": hers["id"]}}), 404,
                "QosPolicyNotFound", missing)  # fmt: skip
    check_error(bob.post("/ports", json={"port": {"network_id": net["id"], "qos_policy_id": hers["id"]}}), 404,
                "QosPolicyNotFound", missing)  # fmt: skip
    check_error(bob.put(f"/networks/{net['id']}", json={"network": {"qos_policy_id": hers["id"]}}), 404,
                "QosPolicyNotFound", missing)  # fmt: skip
    check_error(bob.post("/networks", json={"network": {"name": "x", "qos_policy_id": hers["id"]}}), 404,
                "QosPolicyNotFound", missing)  # fmt: skip
    check_error(bob.get(f"/qos/policies/{hers['id']}"), 404, "QosPolicyNotFound", missing)
    assert [p["id"] for p in bob.get("/qos/policies").json()["policies"]] == [everyone["id"]]
    # a rule on another project's policy: not found; on one he sees (shared), or on his own project's: admins only
    check_error(_rule(bob, hers["id"], BW, "bandwidth_limit_rule", max_kbps=1), 404, "QosPolicyNotFound", missing)
    check_error(bob.put(f"/qos/policies/{hers['id']}/{BW}/{rule['id']}", json={"bandwidth_limit_rule": {
        "max_kbps": 1}}), 404, "QosPolicyNotFound")  # fmt: skip
    check_error(bob.delete(f"/qos/policies/{hers['id']}/{BW}/{rule['id']}"), 404, "QosPolicyNotFound")
    check_error(_rule(bob, everyone["id"], BW, "bandwidth_limit_rule", max_kbps=1), 403, "PolicyNotAuthorized",
                "create_policy_bandwidth_limit_rule")  # fmt: skip
    check_error(_rule(alice, hers["id"], BW, "bandwidth_limit_rule", max_kbps=1), 403, "PolicyNotAuthorized")
    check_error(bob.delete(f"/qos/policies/{everyone['id']}"), 403, "PolicyNotAuthorized", "delete_policy")
    check_error(bob.post("/qos/policies", json={"policy": {"name": "mine"}}), 403, "PolicyNotAuthorized",
                "create_policy")  # fmt: skip
    check_error(bob.put(f"/policies/{hers['id']}/tags", json={"tags": ["x"]}), 404, "QosPolicyNotFound")
    # a shared one he may use
    r = bob.put(f"/ports/{port['id']}", json={"port": {"qos_policy_id": everyone["id"]}})
    assert r.status_code == 200, r.text
    assert admin.get(f"/qos/policies/{hers['id']}").json()["policy"]["rules"][0]["max_kbps"] == 10

"""The agent's QoS-only pass (agent.py `_qos_pass`, services/hosts/host_qos.py) with the Linux dataplane: a rule's
change, a port's first limit and its removal reach the kernel without a whole pass (no whole desired state fetched,
no job but QoS run); a port update that changes more than QoS in the same request is not taken for one (root)."""

from __future__ import annotations

import subprocess
from typing import Any

from pyroute2 import IPRoute

from cloudnet.agent.agent import Agent
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import names, qos_tc
from tests.support.cloud import Cloud


def _ifb_rate(cloud: Cloud, port_id: str) -> int | None:
    """The rate of the tbf on the port's ifb device (what its instance sends is shaped at), None without one."""
    with netns.entered(names.host_ns(cloud.host)):
        ipr = IPRoute()
    with ipr:
        found = ipr.link_lookup(ifname=names.ifb(port_id))
        for q in ipr.get_qdiscs(index=found[0]) if found else []:
            if q.get_attr("TCA_KIND") == "tbf":
                return int(q.get_nested("TCA_OPTIONS", "TCA_TBF_PARMS")["rate"])
        return None


def _passes(agent: Agent) -> list[str]:
    """The kinds of the passes the agent's dataplane runs from now on ("whole", "qos"), in order."""
    seen: list[str] = []
    dataplane: Any = agent.dataplane
    for attr, kind in (("apply", "whole"), ("apply_qos", "qos")):
        inner = getattr(dataplane, attr)

        def spy(*a: Any, _inner: Any = inner, _kind: str = kind, **kw: Any) -> Any:
            seen.append(_kind)
            return _inner(*a, **kw)

        setattr(dataplane, attr, spy)
    return seen


def _rate(kbps: int) -> int:
    return qos_tc.rate_and_burst({"max_kbps": kbps})[0]


def _policy(cloud: Cloud, kbps: int) -> tuple[dict[str, Any], str]:
    pol = cloud.create("qos/policies", "policy", {"name": f"p{kbps}"})
    rule_url = f"/qos/policies/{pol['id']}/bandwidth_limit_rules"
    rule = cloud.api.post(rule_url, json={"bandwidth_limit_rule": {"max_kbps": kbps}}).json()["bandwidth_limit_rule"]
    return pol, f"{rule_url}/{rule['id']}"


def _limitable_port(cloud: Cloud, prefix: str, kbps: int) -> tuple[Agent, str, dict[str, Any], str, list[str]]:
    """The agent, an instance's port, a policy limiting to `kbps` (not on the port yet) and its rule's URL, once the
    agent has caught up with all that; and the kinds of its passes from then on."""
    agent = cloud.start_agent()
    net, _sub = cloud.network(f"qos-{prefix}", f"{prefix}.0/24")
    port_id = cloud.instance(f"q{prefix.split('.')[1]}", [{"network": net["id"]}])["nets"][0]["port_id"]
    pol, rule = _policy(cloud, kbps)
    cloud.wait_for(lambda: agent.synced.is_set() and agent.revision >= _revision(cloud), what="the agent caught up")
    return agent, port_id, pol, rule, _passes(agent)


def test_limits_set_changed_and_taken_off_by_qos_only_passes(cloud: Cloud) -> None:
    agent, port_id, pol, rule, passes = _limitable_port(cloud, "10.96.0", 6000)
    assert cloud.api.put(f"/ports/{port_id}", json={"port": {"qos_policy_id": pol["id"]}}).status_code == 200
    cloud.wait_for(lambda: _ifb_rate(cloud, port_id) == _rate(6000), what="the port's first limit")
    assert cloud.api.put(rule, json={"bandwidth_limit_rule": {"max_kbps": 7000}}).status_code == 200
    cloud.wait_for(lambda: _ifb_rate(cloud, port_id) == _rate(7000), what="the changed limit")
    assert cloud.api.put(f"/ports/{port_id}", json={"port": {"qos_policy_id": None}}).status_code == 200
    cloud.wait_for(lambda: _ifb_rate(cloud, port_id) is None, what="the limit taken off")
    assert "whole" not in passes and passes.count("qos") >= 3, passes
    assert agent.dataplane.failures() == []


def test_a_port_update_that_changes_more_than_qos_gets_a_whole_pass(cloud: Cloud) -> None:
    _agent, port_id, pol, _rule, passes = _limitable_port(cloud, "10.97.0", 5000)
    # One request that sets the policy and lets the port send from one more address: a QoS-only pass would leave
    # its filter as it was.
    body = {"port": {"qos_policy_id": pol["id"], "allowed_address_pairs": [{"ip_address": "10.97.0.222"}]}}
    assert cloud.api.put(f"/ports/{port_id}", json=body).status_code == 200
    cloud.wait_for(lambda: _ifb_rate(cloud, port_id) == _rate(5000), what="the limit")
    cloud.wait_for(lambda: "10.97.0.222" in _ruleset(cloud), what="the pair's address in the port's filter")
    assert passes and passes[0] == "whole", passes


def _ruleset(cloud: Cloud) -> str:
    return subprocess.run(["ip", "netns", "exec", names.host_ns(cloud.host), "nft", "list", "ruleset"],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip


def _revision(cloud: Cloud) -> int:
    return int(cloud.api.get("/events", params={"since": 0, "limit": 1}).json()["revision"])

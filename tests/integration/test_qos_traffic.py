"""QoS end to end on the Linux dataplane: a policy made through the API limits real TCP traffic in each of Neutron's
directions on the port's host device (tc, pyroute2), marks what the instance sends with its DSCP (nftables), and
leaves nothing behind when it goes (root)."""

from __future__ import annotations

from typing import Any

from pyroute2 import IPRoute

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import names, qos_tc
from tests.support.cloud import Cloud
from tests.support.throughput import received_dscp, tcp_rate

LIMIT_KBPS = 10000  # 10 Mbit/s
TOLERANCE = 0.10


def _ip(inst: dict[str, Any]) -> str:
    return str(inst["nets"][0]["fixed_ips"][0]["ip_address"])


def _qdiscs(cloud: Cloud, device: str) -> set[str]:
    """The kinds of the qdiscs cloudnet may put on `device` in the host namespace (tbf, ingress), and "ifb" when
    the port's ifb device exists."""
    with netns.entered(names.host_ns(cloud.host)):
        ipr = IPRoute()
    with ipr:
        index = ipr.link_lookup(ifname=device)[0]
        kinds = {q.get_attr("TCA_KIND") for q in ipr.get_qdiscs(index=index)} & {"tbf", "ingress"}
        return kinds | ({"ifb"} if ipr.link_lookup(ifname=names.ifb(device[len(names.TAP) :])) else set())


def _within(measured: float, limit_mbit: float) -> bool:
    return abs(measured - limit_mbit) <= limit_mbit * TOLERANCE


def test_a_policy_limits_and_marks_real_traffic_and_goes_without_a_trace(cloud: Cloud) -> None:
    cloud.start_agent()
    api = cloud.api
    net, _sub = cloud.network("qos-net", "10.95.0.0/24")
    a = cloud.instance("qa", [{"network": net["id"]}])
    b = cloud.instance("qb", [{"network": net["id"]}])
    port_a = a["nets"][0]["port_id"]
    device = names.tap(port_a)
    unlimited = tcp_rate(a["netns"], b["netns"], _ip(b), 5201, seconds=2)
    assert unlimited > 5 * LIMIT_KBPS / 1000, unlimited  # (a limit below would prove nothing)

    pol = api.post("/qos/policies", json={"policy": {"name": "ten"}}).json()["policy"]
    rule_url = f"/qos/policies/{pol['id']}/bandwidth_limit_rules"
    rule = api.post(rule_url, json={"bandwidth_limit_rule": {"max_kbps": LIMIT_KBPS}}).json()["bandwidth_limit_rule"]
    api.post(f"/qos/policies/{pol['id']}/dscp_marking_rules", json={"dscp_marking_rule": {"dscp_mark": 46}})
    assert api.put(f"/ports/{port_a}", json={"port": {"qos_policy_id": pol["id"]}}).status_code == 200
    cloud.wait_for(lambda: _qdiscs(cloud, device) == {"ingress", "ifb"}, what="a's egress limit")
    # egress: what a sends
    sent = tcp_rate(a["netns"], b["netns"], _ip(b), 5202)
    print(f"egress limit {LIMIT_KBPS / 1000} Mbit/s: measured {sent:.2f} (unlimited {unlimited:.0f})")
    assert _within(sent, LIMIT_KBPS / 1000), f"egress {sent:.2f} Mbit/s for a limit of {LIMIT_KBPS / 1000}"
    assert tcp_rate(b["netns"], a["netns"], _ip(a), 5203, seconds=2) > 2 * LIMIT_KBPS / 1000  # (not what a gets)
    assert received_dscp(a["netns"], b["netns"], _ip(b), 5204) == 46
    assert received_dscp(b["netns"], a["netns"], _ip(a), 5205) == 0  # (only what the port's instance sends)

    # the same rule turned to ingress: what a receives
    r = api.put(f"{rule_url}/{rule['id']}", json={"bandwidth_limit_rule": {"direction": "ingress"}})
    assert r.status_code == 200, r.text
    cloud.wait_for(lambda: _qdiscs(cloud, device) == {"tbf"}, what="a's ingress limit")
    got = tcp_rate(b["netns"], a["netns"], _ip(a), 5206)
    print(f"ingress limit {LIMIT_KBPS / 1000} Mbit/s: measured {got:.2f}")
    assert _within(got, LIMIT_KBPS / 1000), f"ingress {got:.2f} Mbit/s for a limit of {LIMIT_KBPS / 1000}"
    assert tcp_rate(a["netns"], b["netns"], _ip(b), 5207, seconds=2) > 2 * LIMIT_KBPS / 1000

    # the policy leaves the port: nothing of it stays (no qdisc, no ifb, no mark)
    assert api.put(f"/ports/{port_a}", json={"port": {"qos_policy_id": None}}).status_code == 200
    cloud.wait_for(lambda: _qdiscs(cloud, device) == set(), what="a's limits gone")
    cloud.wait_for(lambda: received_dscp(a["netns"], b["netns"], _ip(b), 5208, timeout=0.5) == 0, what="no mark")
    assert api.delete(f"/qos/policies/{pol['id']}").status_code == 204


def test_a_networks_policy_reaches_its_ports_and_a_ports_own_wins(cloud: Cloud) -> None:
    cloud.start_agent()
    api = cloud.api
    net_pol = api.post("/qos/policies", json={"policy": {"name": "net"}}).json()["policy"]
    api.post(f"/qos/policies/{net_pol['id']}/dscp_marking_rules", json={"dscp_marking_rule": {"dscp_mark": 10}})
    own = api.post("/qos/policies", json={"policy": {"name": "own"}}).json()["policy"]
    api.post(f"/qos/policies/{own['id']}/dscp_marking_rules", json={"dscp_marking_rule": {"dscp_mark": 34}})
    net, _sub = cloud.network("qos-net2", "10.94.0.0/24", qos_policy_id=net_pol["id"])
    a = cloud.instance("qna", [{"network": net["id"]}])
    b = cloud.instance("qnb", [{"network": net["id"]}])
    cloud.wait_for(lambda: received_dscp(a["netns"], b["netns"], _ip(b), 5301, timeout=0.5) == 10, what="net's")
    assert api.put(f"/ports/{a['nets'][0]['port_id']}", json={"port": {"qos_policy_id": own["id"]}}).status_code == 200
    cloud.wait_for(lambda: received_dscp(a["netns"], b["netns"], _ip(b), 5302, timeout=0.5) == 34, what="port's own")
    assert received_dscp(b["netns"], a["netns"], _ip(a), 5303) == 10


def test_limits_taken_away_by_hand_come_back_with_a_check_and_applying_twice_changes_nothing(cloud: Cloud) -> None:
    cloud.start_agent()
    api = cloud.api
    net, _sub = cloud.network("qos-net3", "10.92.0.0/24")
    a = cloud.instance("qda", [{"network": net["id"]}])
    port_a = a["nets"][0]["port_id"]
    device = names.tap(port_a)
    pol = api.post("/qos/policies", json={"policy": {"name": "both"}}).json()["policy"]
    for direction in ("egress", "ingress"):
        api.post(f"/qos/policies/{pol['id']}/bandwidth_limit_rules",
                 json={"bandwidth_limit_rule": {"max_kbps": 5000, "direction": direction}})  # fmt: skip
    assert api.put(f"/ports/{port_a}", json={"port": {"qos_policy_id": pol["id"]}}).status_code == 200
    cloud.wait_for(lambda: _qdiscs(cloud, device) == {"tbf", "ingress", "ifb"}, what="both limits")
    with netns.entered(names.host_ns(cloud.host)):
        ipr = IPRoute()
    with ipr:
        index = ipr.link_lookup(ifname=device)[0]
        ifb_index = ipr.link_lookup(ifname=names.ifb(port_a))[0]
        limit = {"max_kbps": 5000, "max_burst_kbps": 0}
        # what the agent applied reads as applied: nothing to change
        assert not qos_tc.set_shaping(ipr, index, limit)
        assert not qos_tc.set_shaping(ipr, ifb_index, limit)
        assert not qos_tc.set_redirect(ipr, index, ifb_index)
        # taken away by hand (someone's tc): a check finds it and puts it back
        ipr.tc("del", index=index, handle=qos_tc.TBF_HANDLE, parent=qos_tc.ROOT)
        ipr.link("del", index=ifb_index)
    assert _qdiscs(cloud, device) == {"ingress"}
    assert api.post(f"/hosts/{cloud.host}/check").status_code == 202
    cloud.wait_for(lambda: _qdiscs(cloud, device) == {"tbf", "ingress", "ifb"} and _redirected(cloud, port_a),
                   what="the limits repaired, redirected to the new ifb")  # fmt: skip


def _redirected(cloud: Cloud, port_id: str) -> bool:
    """Whether the port's device redirects what it receives to the port's ifb device as it is now."""
    with netns.entered(names.host_ns(cloud.host)):
        ipr = IPRoute()
    with ipr:
        found = ipr.link_lookup(ifname=names.ifb(port_id))
        return bool(found) and qos_tc.redirect_target(ipr, ipr.link_lookup(ifname=names.tap(port_id))[0]) == found[0]

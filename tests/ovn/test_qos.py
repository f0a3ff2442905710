"""QoS on OVN: a policy made through the API becomes the QoS rows of the port's switch that Neutron's OVN driver
writes (from-lport / to-lport, bandwidth rate and burst, the DSCP action), real traffic between two instances on one
chassis (userspace datapath) is limited and marked by them, and the rows go with the policy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cloudnet.northbound.sync import NorthboundSync
from tests.support.cloud import Cloud
from tests.support.ovn import OvnSandbox
from tests.support.ovn_site import ovn_site
from tests.support.throughput import received_dscp, tcp_rate

LIMIT_KBPS = 10000
TOLERANCE = 0.10


@dataclass
class Rig:
    ovn: OvnSandbox
    cloud: Cloud
    sync: NorthboundSync
    a: dict[str, Any]
    b: dict[str, Any]

    def qos_rows(self) -> list[dict[str, Any]]:
        out = json.loads(self.ovn.nbctl("--format=json", "--columns=direction,match,bandwidth,action,priority",
                                        "list", "QoS"))  # fmt: skip
        rows = [dict(zip(out["headings"], row, strict=True)) for row in out["data"]]
        return [r for r in rows if "udp" not in r["match"]]  # (not the DHCP budgets)

    def settled(self) -> None:
        self.sync.wait_synced()
        self.ovn.nbctl("--wait=hv", "sync")
        self.ovn.flush_datapath_caches()


def _ip(inst: dict[str, Any]) -> str:
    return str(inst["nets"][0]["fixed_ips"][0]["ip_address"])


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Rig]:
    with ovn_site(tmp_path_factory.mktemp("ovn-qos") / "state", sqlite_template) as site, site.agent():
        net, _sub = site.cloud.network("qos", "10.93.0.0/24")
        a = site.cloud.instance("oqa", [{"network": net["id"]}])
        b = site.cloud.instance("oqb", [{"network": net["id"]}])
        yield Rig(site.sandbox, site.cloud, site.sync, a, b)


def _within(measured: float) -> bool:
    return abs(measured - LIMIT_KBPS / 1000) <= LIMIT_KBPS / 1000 * TOLERANCE


def test_a_policy_becomes_qos_rows_that_limit_and_mark_real_traffic(rig: Rig) -> None:
    api, port_a = rig.cloud.api, rig.a["nets"][0]["port_id"]
    pol = api.post("/qos/policies", json={"policy": {"name": "ten"}}).json()["policy"]
    rules = f"/qos/policies/{pol['id']}"
    body = {
        "bandwidth_limit_rule": {"max_kbps": LIMIT_KBPS}
    }  # (its burst: 80 % of a second's, as Neutron's agents default it)
    rule = api.post(f"{rules}/bandwidth_limit_rules", json=body).json()["bandwidth_limit_rule"]
    api.post(f"{rules}/dscp_marking_rules", json={"dscp_marking_rule": {"dscp_mark": 46}})
    assert api.put(f"/ports/{port_a}", json={"port": {"qos_policy_id": pol["id"]}}).status_code == 200
    rig.settled()
    bandwidth = ["map", [["burst", LIMIT_KBPS * 8 // 10], ["rate", LIMIT_KBPS]]]
    assert rig.qos_rows() == [{"direction": "from-lport", "match": f'inport == "{port_a}"', "priority": 2002,
                               "bandwidth": bandwidth, "action": ["map", [["dscp", 46]]]}]  # fmt: skip
    sent = tcp_rate(rig.a["netns"], rig.b["netns"], _ip(rig.b), 5401)
    print(f"OVN egress limit {LIMIT_KBPS / 1000} Mbit/s: measured {sent:.2f}")
    assert _within(sent), f"egress {sent:.2f} Mbit/s"
    assert received_dscp(rig.a["netns"], rig.b["netns"], _ip(rig.b), 5402) == 46
    assert received_dscp(rig.b["netns"], rig.a["netns"], _ip(rig.a), 5403) == 0

    r = api.put(f"{rules}/bandwidth_limit_rules/{rule['id']}", json={"bandwidth_limit_rule": {"direction": "ingress"}})
    assert r.status_code == 200, r.text
    rig.settled()
    assert sorted((r["direction"], r["match"]) for r in rig.qos_rows()) == [
        ("from-lport", f'inport == "{port_a}"'), ("to-lport", f'outport == "{port_a}"')]  # fmt: skip
    got = tcp_rate(rig.b["netns"], rig.a["netns"], _ip(rig.a), 5404)
    print(f"OVN ingress limit {LIMIT_KBPS / 1000} Mbit/s: measured {got:.2f}")
    assert _within(got), f"ingress {got:.2f} Mbit/s"

    assert api.put(f"/ports/{port_a}", json={"port": {"qos_policy_id": None}}).status_code == 200
    rig.settled()
    assert rig.qos_rows() == []
    assert received_dscp(rig.a["netns"], rig.b["netns"], _ip(rig.b), 5405) == 0
    assert api.delete(f"/qos/policies/{pol['id']}").status_code == 204

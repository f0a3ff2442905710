"""SR-IOV plug, release and restart reconciliation against the kernel, with stand-ins.

There is no SR-IOV hardware here: the sysfs tree is built in tmp, each VF netdev and the PF are veth
devices. Everything the agent does to the VF netdev (alias, move into the instance namespace, rename
to ethN, MAC, MTU, addresses, routes, move back) is real. The PF-side request (`ip link set <pf> vf <i>
mac .. vlan ..`, IFLA_VF_MAC/IFLA_VF_VLAN) NEEDS SR-IOV HARDWARE — a veth PF refuses it — so these tests
check the exact request built (and the netlink attributes pyroute2 makes of it) instead of sending it.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.dataplane.sriov import inventory as inv
from cloudnet.dataplane.sriov.driver import PfNetlink, SriovDataplane, vf_nla, vf_request
from cloudnet.services.hosts import host_state
from cloudnet.services.ports import sriov
from cloudnet.store.db import Store
from tests.support.api import create
from tests.support.cloud import ns_run, running_agent
from tests.support.sriov_cloud import ADMIN, bind, direct_port, register_host, release, vlan_network
from tests.support.sriov_tree import add_pf, set_netdev


class Rig:
    def __init__(self, tmp: Path) -> None:
        sfx = uuid.uuid4().hex[:6]
        self.host, self.pf = f"sr-{sfx}", f"cnpf{sfx}"
        self.vfs = [f"cnv{sfx}{i}" for i in range(3)]
        self.sysfs = tmp / "sys"
        self.slots = add_pf(self.sysfs, self.pf, list(self.vfs))
        self.links = [self.pf, *self.vfs]
        for name in self.links:
            subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"], check=True)
        self.ns = f"cntest-sriov-{sfx}"
        netns.ensure(self.ns)
        self.requests: list[dict[str, Any]] = []
        self.state_dir = tmp / "agent"

    def dataplane(self, report: dict[str, Any] | None = None) -> SriovDataplane:
        return SriovDataplane(self.host, self.state_dir, mappings={"physnet2": [self.pf]}, sysfs_root=self.sysfs,
                              set_vf=self.requests.append, report=report)  # fmt: skip

    def pf_index(self) -> int:
        out = subprocess.run(["cat", f"/sys/class/net/{self.pf}/ifindex"], capture_output=True, text=True, check=True)
        return int(out.stdout)

    def cleanup(self) -> None:
        netns.remove(self.ns)
        for name in self.links:
            subprocess.run(["ip", "link", "del", name], capture_output=True)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    try:
        yield r
    finally:
        r.cleanup()


def _state(store: Store, host: str) -> dict[str, Any]:
    state = host_state.desired_state(store, ADMIN, host)
    with store.read() as conn:
        state["sriov"] = sriov.desired(conn, host)  # what the lead adds to host_state.desired_state
    return state


def _in_root(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def test_vf_request_is_exact() -> None:
    """NEEDS HARDWARE to send: checked as built. `ip link set <pf> vf 2 mac fa:16:3e:00:00:01 vlan 100 spoofchk on`."""
    req = vf_request(7, 2, "fa:16:3e:00:00:01", 100, True)
    assert req == {"index": 7, "vf": {"vf": 2, "mac": "fa:16:3e:00:00:01", "vlan": 100, "spoofchk": 1}}
    vf_info = [("IFLA_VF_VLAN", {"vf": 2, "vlan": 100}), ("IFLA_VF_MAC", {"vf": 2, "mac": "fa:16:3e:00:00:01"}),
               ("IFLA_VF_SPOOFCHK", {"vf": 2, "spoofchk": 1})]  # fmt: skip
    assert vf_nla(req) == {"IFLA_VFINFO_LIST": {"attrs": [("IFLA_VF_INFO", {"attrs": vf_info})]}}
    assert vf_nla(vf_request(7, 2, "00:00:00:00:00:00", 0))["IFLA_VFINFO_LIST"]["attrs"][0][1]["attrs"] == [
        ("IFLA_VF_VLAN", {"vf": 2, "vlan": 0}), ("IFLA_VF_MAC", {"vf": 2, "mac": "00:00:00:00:00:00"})]  # fmt: skip


def test_plug_release_and_restart_reconcile(api: httpx.Client, store: Store, rig: Rig) -> None:
    register_host(api, rig.host, rig.sysfs, {"physnet2": [rig.pf]})
    net = vlan_network(api, vlan=100, cidr="10.9.0.0/24")
    port = direct_port(api, net, port_security_enabled=True, security_groups=[])  # spoof checked, no groups
    inst = api.post("/instances", json={"instance": {"name": "vm", "host": rig.host, "netns": rig.ns}}).json()
    iid = inst["instance"]["id"]
    bind(store, port["id"], rig.host, iid)
    report: dict[str, Any] = {}
    dp = rig.dataplane(report)
    (r,) = dp.apply(_state(store, rig.host))
    # Groups cannot be enforced on a VF: the port says so (as Neutron's SR-IOV ports do); its spoof check is on.
    assert (r.port_id, r.status, r.vif_type, r.vif_details) == (port["id"], "ACTIVE", "hw_veb",
                                                                {"vlan": "100", "port_filter": False})  # fmt: skip
    assert rig.requests == [vf_request(rig.pf_index(), 0, port["mac_address"], 100, True)]
    assert not _in_root(rig.vfs[0])
    link = ns_run(rig.ns, "ip", "-o", "link", "show", "eth0", check=True).stdout
    assert port["mac_address"] in link and "mtu 1500" in link and f"alias cloudnet-vf {rig.slots[0]}" in link
    addr = ns_run(rig.ns, "ip", "-o", "addr", "show", "eth0", check=True).stdout
    assert f"{port['fixed_ips'][0]['ip_address']}/24" in addr
    assert "default via 10.9.0.1 dev eth0" in ns_run(rig.ns, "ip", "route", check=True).stdout
    assert "sriov" in report  # the heartbeat report was refreshed
    # Applying the same state again changes nothing.
    dp.apply(_state(store, rig.host))
    assert len(rig.requests) == 1
    set_netdev(rig.sysfs, rig.slots[0], None)  # what sysfs shows once the netdev left the host namespace

    # The agent stops; the instance is deleted meanwhile (the reservation freed in the database).
    dp.close()
    assert release(store, port["id"]) is True
    assert api.delete(f"/instances/{iid}").status_code == 204
    restarted = rig.dataplane()
    assert restarted.apply(_state(store, rig.host)) == []
    assert rig.requests[-1] == vf_request(rig.pf_index(), 0, "00:00:00:00:00:00", 0)
    assert _in_root(rig.vfs[0]) and "eth0" not in ns_run(rig.ns, "ip", "-o", "link").stdout
    assert "alias" not in subprocess.run(["ip", "link", "show", rig.vfs[0]], capture_output=True, text=True).stdout
    assert restarted.records() == {}
    kept = api.get(f"/ports/{port['id']}").json()["port"]
    assert kept["binding:profile"] == {"physical_network": "physnet2"} and kept["device_id"] == ""


def test_missing_namespace_reports_binding_failed(api: httpx.Client, store: Store, rig: Rig) -> None:
    register_host(api, rig.host, rig.sysfs, {"physnet2": [rig.pf]})
    port = direct_port(api, vlan_network(api, vlan=0, cidr="10.7.0.0/24"))
    inst = api.post("/instances", json={"instance": {"name": "vm", "host": rig.host, "netns": "cntest-nope"}})
    bind(store, port["id"], rig.host, inst.json()["instance"]["id"])
    (r,) = rig.dataplane().apply(_state(store, rig.host))
    assert (r.status, r.vif_type) == ("DOWN", "binding_failed") and rig.requests == []
    assert _in_root(rig.vfs[0])


def test_instance_with_a_direct_port_through_the_api_and_the_agent(rig: Rig, server: Any, api: httpx.Client) -> None:
    """POST /v2.0/instances with a pre-created direct port, the real agent plugs the VF stand-in."""

    report: dict[str, Any] = {"uplinks": {}}
    report["sriov"] = inv.inventory_report(inv.read_inventory({"physnet2": [rig.pf]}, None, rig.sysfs))
    dataplane = LinuxDataplane(rig.host, binders=[rig.dataplane(report)])
    try:
        with running_agent(server.url, rig.host, dataplane, report):
            _direct_port_round_trip(rig, api)
    finally:
        LinuxDataplane(rig.host).teardown()


def _direct_port_round_trip(rig: Rig, api: httpx.Client) -> None:
    net = vlan_network(api)
    port = direct_port(api, net)
    body = {"name": "vf", "host": rig.host, "netns": rig.ns, "nets": [{"port": port["id"]}]}
    r = api.post("/instances", json={"instance": body})
    assert r.status_code == 201, r.text
    inst = r.json()["instance"]
    deadline = time.monotonic() + 15
    while api.get(f"/instances/{inst['id']}").json()["instance"]["status"] != "ACTIVE":  # readiness
        assert time.monotonic() < deadline, "instance never ACTIVE"
        time.sleep(0.05)
    bound = api.get(f"/ports/{port['id']}").json()["port"]
    assert bound["binding:vif_type"] == "hw_veb" and bound["binding:profile"]["pci_slot"] == rig.slots[0]
    assert port["mac_address"] in ns_run(rig.ns, "ip", "-o", "link", "show", "eth0").stdout
    assert not _in_root(rig.vfs[0])  # the VF netdev now lives in the instance
    assert rig.requests[-1]["vf"]["mac"] == port["mac_address"]  # PF request built (sending needs hardware)
    assert rig.requests[-1]["vf"]["spoofchk"] == 0  # port security off: no spoof check (as Neutron's agent)
    assert bound["binding:vif_details"]["port_filter"] is False
    assert api.delete(f"/instances/{inst['id']}").status_code == 204
    deadline = time.monotonic() + 15
    while not _in_root(rig.vfs[0]):  # readiness: the agent returned the VF to the host
        assert time.monotonic() < deadline, "VF never returned"
        time.sleep(0.05)
    kept = api.get(f"/ports/{port['id']}").json()["port"]
    assert kept["device_id"] == "" and "pci_slot" not in kept["binding:profile"]
    assert rig.requests[-1]["vf"] == {"vf": 0, "mac": "00:00:00:00:00:00", "vlan": 0}


def test_a_pf_that_refuses_vf_settings_fails_its_port_only(rig: Rig, server: Any, api: httpx.Client) -> None:
    """Issue 15, case 10. Some NICs refuse a VF's MAC/VLAN over netlink (EOPNOTSUPP): here the kernel itself
    refuses it, as a veth PF does. That port alone goes ERROR with the reason; a VF of a PF that takes the request
    and a veth instance on the same host go ACTIVE."""
    good_pf, good_vf = f"{rig.pf}g", f"{rig.pf}gv"
    for name in (good_pf, good_vf):
        subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"], check=True)
        rig.links.append(name)
    add_pf(rig.sysfs, good_pf, [good_vf], bus=0x0B)
    mappings = {"physnet2": [rig.pf], "physnet3": [good_pf]}
    refuser = rig.pf_index()
    recorded: list[dict[str, Any]] = []

    def set_vf(request: dict[str, Any]) -> None:  # the refusing PF gets the real netlink request
        PfNetlink()(request) if request["index"] == refuser else recorded.append(request)

    report = register_host(api, rig.host, rig.sysfs, mappings)
    sriov_dp = SriovDataplane(rig.host, rig.state_dir, mappings=mappings, sysfs_root=rig.sysfs, set_vf=set_vf,
                              report=report)  # fmt: skip
    other_ns, ok_ns = f"{rig.ns}-v", f"{rig.ns}-ok"
    for ns in (other_ns, ok_ns):  # (before their instances: a namespace appearing later is seen at a full pass)
        netns.ensure(ns)
    try:
        with running_agent(server.url, rig.host, LinuxDataplane(rig.host, binders=[sriov_dp]), report):
            _one_refusing_pf(rig, api, other_ns, ok_ns, recorded)
    finally:
        LinuxDataplane(rig.host).teardown()
        for ns in (other_ns, ok_ns):
            netns.remove(ns)


def _one_refusing_pf(rig: Rig, api: httpx.Client, other_ns: str, ok_ns: str, recorded: list[dict[str, Any]]) -> None:
    refused = direct_port(api, vlan_network(api, "physnet2", 100, "10.9.0.0/24"))
    taken = direct_port(api, vlan_network(api, "physnet3", 200, "10.8.0.0/24"))
    plain = create(api, "networks", "network", name="plain")
    create(api, "subnets", "subnet", network_id=plain["id"], cidr="10.6.0.0/24")

    def instance(name: str, ns: str, nets: list[dict[str, str]]) -> str:
        r = api.post("/instances", json={"instance": {"name": name, "host": rig.host, "netns": ns, "nets": nets}})
        assert r.status_code == 201, r.text
        return str(r.json()["instance"]["id"])

    bad = instance("refused", rig.ns, [{"port": refused["id"]}])
    ok = [instance("vf-ok", ok_ns, [{"port": taken["id"]}]), instance("veth", other_ns, [{"network": plain["id"]}])]
    deadline = time.monotonic() + 20
    shown = {}
    while time.monotonic() < deadline:  # readiness: every instance settled
        shown = {i: api.get(f"/instances/{i}").json()["instance"] for i in [bad, *ok]}
        if shown[bad]["status"] == "ERROR" and all(shown[i]["status"] == "ACTIVE" for i in ok):
            break
        time.sleep(0.05)
    assert shown[bad]["status"] == "ERROR", shown[bad]
    assert "refused the settings (MAC, VLAN, spoof check)" in shown[bad]["status_reason"], shown[bad]
    assert "Operation not supported (errno 95)" in shown[bad]["status_reason"], shown[bad]
    assert all(shown[i]["status"] == "ACTIVE" for i in ok), shown
    assert recorded[-1]["vf"]["mac"] == taken["mac_address"]
    assert _in_root(rig.vfs[0])  # the refused VF never left the host
    failures = api.get(f"/hosts/{rig.host}").json()["host"]["report"]["failures"]
    assert [f["object"] for f in failures] == [f"vf:{refused['id']}"]


def test_a_vf_released_from_a_running_instance_comes_home(api: httpx.Client, store: Store, rig: Rig) -> None:
    """The instance keeps its namespace (and the agent's claim on it); its deleted direct port's VF is still taken
    back out of it, reset, for the next port to get."""
    register_host(api, rig.host, rig.sysfs, {"physnet2": [rig.pf]})
    net = vlan_network(api, vlan=100, cidr="10.9.0.0/24")
    port = direct_port(api, net)
    inst = api.post("/instances", json={"instance": {"name": "vm", "host": rig.host, "netns": rig.ns}}).json()
    bind(store, port["id"], rig.host, inst["instance"]["id"])
    dp = rig.dataplane()
    dp.apply(_state(store, rig.host))
    assert not _in_root(rig.vfs[0])
    set_netdev(rig.sysfs, rig.slots[0], None)
    assert api.delete(f"/ports/{port['id']}").status_code == 204
    state = _state(store, rig.host)
    assert [i["id"] for i in state["instances"]] == [inst["instance"]["id"]]  # still there, in its namespace
    assert dp.apply(state) == []
    assert _in_root(rig.vfs[0]) and "eth0" not in ns_run(rig.ns, "ip", "-o", "link").stdout
    assert rig.requests[-1] == vf_request(rig.pf_index(), 0, "00:00:00:00:00:00", 0)

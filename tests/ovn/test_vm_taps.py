"""VM NICs on the OVN dataplane (issue 28; root): `cloudnet serve` and `cloudnet agent --dataplane ovn` as processes
on a sandbox chassis (userspace datapath, in a namespace of its own). A VM instance's NIC is a persistent tap named
as Nova names it on br-int with os-vif's external_ids; a frame written on it as its VMM would (from Python, through
/dev/net/tun) gets OVN's DHCP answer with the port's address and options, and an RA per the subnet's mode; what a
hostile guest sends (another MAC, another address) reaches no one; foreign taps are left alone; a name clash fails
that instance alone; deleting the instance takes its tap though a VMM holds it; kill -9 of the agent: the taps
survive and are adopted."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet.dataplane.kernel import netns, tuntap
from cloudnet.dataplane.ovn import guard, hybrid, names, tapdev
from cloudnet.ovn import daemons
from cloudnet.store.db import Store
from cloudnet.wire.guest_net import vm_device
from tests.ovn import tapio
from tests.ovn import vm_site as r
from tests.ovn.converged import chassis_differences, nb_differences
from tests.ovn.restart_rig import Rig
from tests.support import frames

BLOCKED = 1.0  # how long a frame that must not arrive is waited for (one that must is polled for)


def _interface(vm_rig: Rig, name: str) -> dict[str, Any] | None:
    ch = vm_rig.chassis
    out = daemons.run(ch.rundir, ["ovs-vsctl", f"--db={ch.ovs_url}", "--format=json", "--columns=name,external_ids,"
                                  "ofport,error,type", "find", "Interface", f"name={name}"])  # fmt: skip
    data = json.loads(out)["data"]
    if not data:
        return None
    row = dict(zip(json.loads(out)["headings"], data[0], strict=True))
    row["external_ids"] = dict(row["external_ids"][1])
    return row


def _on_br_int(vm_rig: Rig) -> set[str]:
    ch = vm_rig.chassis
    return set(daemons.run(ch.rundir, ["ovs-vsctl", f"--db={ch.ovs_url}", "list-ports", "br-int"]).split())


def _link(vm_rig: Rig, name: str) -> dict[str, Any] | None:
    assert vm_rig.chassis.netns is not None
    with netns.iproute(vm_rig.chassis.netns) as ipr:
        found = tapdev.find(ipr, name)
        try:
            link = ipr.get_links(found.index)[0] if found is not None else None
        except NetlinkError as exc:  # (gone between the two reads)
            if exc.code != tapdev.ENODEV:
                raise
            link = None
        if found is None or link is None:
            return None
        return {"tap": found, "mtu": link.get_attr("IFLA_MTU"), "mac": link.get_attr("IFLA_ADDRESS")}


# -- the tap ------------------------------------------------------------------------------------------------------


def test_a_vm_nic_is_a_persistent_tap_on_br_int_bound_and_active(
    vm_rig: Rig, vm_api: httpx.Client, vm_net: Any
) -> None:
    vm = r.launch(vm_api, vm_rig, "vm-plain", [{"network": vm_net["id"]}])
    nic = vm["nets"][0]
    tap = vm_device(nic["port_id"])
    assert vm["kind"] == "vm" and vm["netns"] is None and nic["device"] == tap and len(tap) == 14
    port = r.port_of(vm_api, nic["port_id"])
    assert port["status"] == "ACTIVE" and port["binding:vif_type"] == "ovs"
    assert port["binding:vif_details"] == {
        "port_filter": True, "ovs_hybrid_plug": True, "connectivity": "l2", "bridge_name": "br-int",
        "datapath_type": "netdev", "mtu": r.MTU, "device": tap, "netns": vm_rig.chassis.netns, "chassis": vm_rig.host,
    }  # fmt: skip
    mark = tuntap.mark(vm_rig.host, port["id"])
    link = _link(vm_rig, tap)
    assert link is not None and link["tap"].is_tap and link["mtu"] == r.MTU and link["tap"].alias == mark
    assert link["mac"] == "fe" + port["mac_address"][2:]  # (never the guest's own)
    # The hybrid plug, in Nova's names: the tap on a bridge of its own, a veth from it to br-int; all marked ours.
    devices = hybrid.nic(port["id"])
    assert [len(n) for n in devices.all()] == [14] * 4 and devices.bridge == "qbr" + port["id"][:11]
    assert vm_rig.chassis.netns is not None
    with netns.iproute(vm_rig.chassis.netns) as ipr:
        found = {name: ipr.get_links(ipr.link_lookup(ifname=name)[0])[0] for name in devices.all()}
    bridge = found[devices.bridge]["index"]
    assert found[devices.tap].get_attr("IFLA_MASTER") == bridge == found[devices.bridge_leg].get_attr("IFLA_MASTER")
    assert found[devices.tap].get_attr("IFLA_GROUP") == names.VM_TAP_GROUP  # (what the guard matches)
    assert all(f.get_attr("IFLA_IFALIAS") == mark and f.get_attr("IFLA_MTU") == r.MTU for f in found.values())
    assert guard.present(vm_rig.chassis.netns)
    assert tap not in _on_br_int(vm_rig) and devices.switch_leg in _on_br_int(vm_rig)
    iface = _interface(vm_rig, devices.switch_leg)
    assert iface is not None and iface["type"] == "" and iface["ofport"] > 0 and iface["error"] == ["set", []]
    ids = iface["external_ids"]
    assert ids[names.IFACE_ID] == port["id"] and ids["attached-mac"] == port["mac_address"]
    assert ids["iface-status"] == "active" and ids["vm-uuid"] == vm["id"] and ids[names.HOST_ID] == vm_rig.host


def test_a_vmm_on_the_tap_gets_ovn_dhcp_with_the_ports_address_and_options(
    vm_rig: Rig, vm_api: httpx.Client, vm_net: Any
) -> None:
    vm = r.launch(vm_api, vm_rig, "vm-dhcp", [{"network": vm_net["id"]}])
    port = r.port_of(vm_api, vm["nets"][0]["port_id"])
    assert vm_rig.chassis.netns is not None
    tap = tapio.TapEnd(vm_rig.chassis.netns, vm["nets"][0]["device"])
    try:
        ack = tapio.ask_dhcp(tap, port["mac_address"])
        assert ack is not None, f"no DHCP answer: {vm_rig.log('agent')}"
        gateway = vm_net["v4"]["gateway_ip"]
        assert ack.kind == tapio.ACK and ack.yiaddr == r.v4(port)
        assert ack.address(1) == "255.255.255.0" and ack.address(3) == gateway and ack.address(54) == gateway
        assert ack.addresses(6) == ["192.0.2.53"] and ack.number(26) == r.MTU and ack.number(51) == 43200
        assert ack.options[15] == b"openstacklocal"
        assert ack.classless_routes() == {("169.254.169.254/32", r.metadata_ip(vm_api, vm_net["id"])),
                                          ("10.99.0.0/16", "10.81.0.254"), ("0.0.0.0/0", gateway)}  # fmt: skip
        # A router solicitation: the router's RA for the SLAAC subnet (autonomous prefix, MTU, DNS).
        tap.send(tapio.router_solicitation(port["mac_address"]))
        frame = tap.wait_for(lambda f: tapio.router_advert(f) is not None, 5.0)
        assert frame is not None, "no router advertisement"
        ra = tapio.router_advert(frame)
        assert ra is not None and not ra.managed and not ra.other and ra.mtu == r.MTU
        assert ra.prefixes == [("fd00:81::/64", True)] and ra.rdnss == ["fd00:53::53"]
    finally:
        tap.close()


def test_what_a_vm_sends_as_another_mac_or_address_reaches_no_one(
    vm_rig: Rig, vm_api: httpx.Client, vm_net: Any
) -> None:
    a = r.launch(vm_api, vm_rig, "vm-a", [{"network": vm_net["id"]}])
    b = r.launch(vm_api, vm_rig, "vm-b", [{"network": vm_net["id"]}])
    pa, pb = r.port_of(vm_api, a["nets"][0]["port_id"]), r.port_of(vm_api, b["nets"][0]["port_id"])
    assert vm_rig.chassis.netns is not None
    ta, tb = tapio.TapEnd(vm_rig.chassis.netns, a["nets"][0]["device"]), tapio.TapEnd(vm_rig.chassis.netns,
                                                                                   b["nets"][0]["device"])  # fmt: skip
    try:

        def to_b(src_mac: str, src_ip: str, marker: bytes) -> bytes:
            udp = frames.ipv4_udp(src_ip, r.v4(pb), 4000, 4001, marker)
            return frames.ethernet(pb["mac_address"], src_mac, 0x0800, udp)

        def seen(marker: bytes, within: float) -> bool:
            return tb.wait_for(lambda f: marker in f, within) is not None

        # The honest frame arrives (polled: flows settle), so the ones that do not are dropped, not lost.
        r.until(lambda: (ta.send(to_b(pa["mac_address"], r.v4(pa), b"honest")), seen(b"honest", 0.5))[1], "a -> b")
        ta.send(to_b("fa:16:3e:66:66:66", r.v4(pa), b"other-mac"))
        ta.send(to_b(pa["mac_address"], "10.81.0.66", b"other-ip"))
        ta.send(to_b(pa["mac_address"], r.v4(pb), b"bs-ip"))
        assert not seen(b"other-", BLOCKED) and not seen(b"bs-ip", 0.1)
    finally:
        ta.close()
        tb.close()


# -- what is not the agent's, and what is in the way ---------------------------------------------------------------


def _foreign_tap(vm_rig: Rig, name: str) -> None:
    ns = vm_rig.chassis.netns
    subprocess.run(["ip", "-n", ns, "tuntap", "add", "dev", name, "mode", "tap"], check=True)


def test_foreign_taps_are_left_alone_and_a_name_clash_fails_that_vm_alone(
    vm_rig: Rig, vm_api: httpx.Client, vm_net: Any
) -> None:
    ch, suffix = vm_rig.chassis, uuid.uuid4().hex[:8]
    assert ch.netns is not None
    on_bridge, loose = f"tap{suffix}-f1", f"tap{suffix}-f2"
    for name in (on_bridge, loose):
        _foreign_tap(vm_rig, name)
    daemons.run(ch.rundir, ["ovs-vsctl", f"--db={ch.ovs_url}", "add-port", "br-int", on_bridge, "--", "set",
                            "Interface", on_bridge, "external_ids:iface-id=nothing"])  # fmt: skip
    # A port whose tap name someone else has taken already (not a tap at all: a veth).
    port = r.create(vm_api, "ports", "port", {"network_id": vm_net["id"]})
    clash = vm_device(port["id"])
    subprocess.run(["ip", "-n", ch.netns, "link", "add", clash, "type", "veth", "peer", "name", f"cx{suffix}"],
                   check=True)  # fmt: skip
    try:
        inst = r.create(vm_api, "instances", "instance", {"name": "vm-clash", "kind": "vm", "host": vm_rig.host,
                                                      "nets": [{"port": port["id"]}]})  # fmt: skip
        failed = r.until(lambda: (p := r.port_of(vm_api, port["id"]))["binding:vif_type"] == "binding_failed" and p,
                        "the clash reported")  # fmt: skip
        assert "that cloudnet did not make is in the way" in failed["binding:vif_details"]["reason"], failed
        # Others converge meanwhile; then the VM is deleted (collection runs): the foreign devices stay untouched.
        other = r.launch(vm_api, vm_rig, "vm-bystander", [{"network": vm_net["id"]}])
        for vm in (inst, other):
            assert vm_api.delete(f"/instances/{vm['id']}").status_code == 204
        r.until(lambda: _link(vm_rig, other["nets"][0]["device"]) is None, "the bystander's tap gone")
        for name in (on_bridge, loose):
            assert _link(vm_rig, name) is not None, f"{name} was taken"
        assert on_bridge in _on_br_int(vm_rig)
        assert (_interface(vm_rig, on_bridge) or {})["external_ids"] == {"iface-id": "nothing"}
        with netns.iproute(ch.netns) as ipr:
            assert ipr.link_lookup(ifname=clash), "the clashing device was taken"
    finally:
        daemons.run(ch.rundir, ["ovs-vsctl", f"--db={ch.ovs_url}", "--if-exists", "del-port", "br-int", on_bridge])
        for name in (on_bridge, loose, clash):
            subprocess.run(["ip", "-n", ch.netns, "link", "del", name], capture_output=True)


def test_the_clash_gone_the_vm_is_plugged(vm_rig: Rig, vm_api: httpx.Client, vm_net: Any) -> None:
    ch = vm_rig.chassis
    port = r.create(vm_api, "ports", "port", {"network_id": vm_net["id"]})
    clash = vm_device(port["id"])
    _foreign_tap(vm_rig, clash)  # (a tap this time, unmarked: not taken either)
    try:
        inst = r.create(vm_api, "instances", "instance", {"name": "vm-later", "kind": "vm", "host": vm_rig.host,
                                                      "nets": [{"port": port["id"]}]})  # fmt: skip
        r.until(lambda: r.port_of(vm_api, port["id"])["binding:vif_type"] == "binding_failed", "the clash reported")
        assert _link(vm_rig, clash)["tap"].alias == ""  # type: ignore[index]
    finally:
        subprocess.run(["ip", "-n", ch.netns, "link", "del", clash], check=True)
    r.until(lambda: r.active(vm_api, inst["id"]), "plugged once the name is free (the step's retry)")
    assert _link(vm_rig, clash)["tap"].alias == tuntap.mark(vm_rig.host, port["id"])  # type: ignore[index]


def test_a_bridge_named_like_a_vms_qbr_fails_that_vm_alone_and_is_left_alone(
    vm_rig: Rig, vm_api: httpx.Client, vm_net: Any
) -> None:
    ch = vm_rig.chassis
    port = r.create(vm_api, "ports", "port", {"network_id": vm_net["id"]})
    devices = hybrid.nic(port["id"])
    subprocess.run(["ip", "-n", ch.netns, "link", "add", devices.bridge, "type", "bridge"], check=True)
    try:
        r.create(vm_api, "instances", "instance", {"name": "vm-qbr-clash", "kind": "vm", "host": vm_rig.host,
                                                   "nets": [{"port": port["id"]}]})  # fmt: skip
        failed = r.until(lambda: (p := r.port_of(vm_api, port["id"]))["binding:vif_type"] == "binding_failed" and p,
                         "the clash reported")  # fmt: skip
        assert f"a bridge named {devices.bridge} that cloudnet did not make" in failed["binding:vif_details"]["reason"]
        r.launch(vm_api, vm_rig, "vm-qbr-bystander", [{"network": vm_net["id"]}])  # (the others converge)
        assert _link(vm_rig, devices.tap) is None, "a tap was made though its NIC was refused"
        assert _link(vm_rig, devices.bridge) is not None and (_link(vm_rig, devices.bridge) or {})["tap"].alias == ""
    finally:
        subprocess.run(["ip", "-n", ch.netns, "link", "del", devices.bridge], capture_output=True)


# -- deletion, a compute service's VM, kill -9 --------------------------------------------------------------------


def test_deleting_a_vm_takes_its_tap_though_a_vmm_holds_it(vm_rig: Rig, vm_api: httpx.Client, vm_net: Any) -> None:
    vm = r.launch(vm_api, vm_rig, "vm-held", [{"network": vm_net["id"]}])
    tap = vm["nets"][0]["device"]
    assert vm_rig.chassis.netns is not None
    held = tapio.TapEnd(vm_rig.chassis.netns, tap)
    try:
        assert vm_api.delete(f"/instances/{vm['id']}").status_code == 204
        devices = hybrid.nic(vm["nets"][0]["port_id"])
        r.until(lambda: all(_link(vm_rig, n) is None for n in devices.all()), "the held tap and its bridge gone")
        assert devices.switch_leg not in _on_br_int(vm_rig)
        with pytest.raises(OSError):
            held.send(b"\xff" * 60)  # (the VMM's descriptor is detached: EBADFD)
        # The agent is not held up: the next VM is plugged as usual.
        r.launch(vm_api, vm_rig, "vm-after", [{"network": vm_net["id"]}])
    finally:
        held.close()


def test_a_vm_a_compute_service_plugs_with_a_plain_port_gets_a_tap(
    vm_rig: Rig, vm_api: httpx.Client, vm_net: Any
) -> None:
    device = str(uuid.uuid4())
    port = r.create(vm_api, "ports", "port", {"network_id": vm_net["id"], "device_owner": "compute:nova",
                                          "device_id": device, "binding:host_id": vm_rig.host})  # fmt: skip
    got = r.until(lambda: (p := r.port_of(vm_api, port["id"]))["status"] == "ACTIVE" and p, "the compute port ACTIVE")
    tap = vm_device(port["id"])
    assert got["binding:vif_type"] == "ovs" and got["binding:vif_details"]["device"] == tap
    assert (_interface(vm_rig, hybrid.nic(port["id"]).switch_leg) or {})["external_ids"]["vm-uuid"] == device
    assert vm_rig.chassis.netns is not None
    end = tapio.TapEnd(vm_rig.chassis.netns, tap)
    try:
        ack = tapio.ask_dhcp(end, port["mac_address"])
        assert ack is not None and ack.yiaddr == r.v4(port)
    finally:
        end.close()
    assert vm_api.delete(f"/ports/{port['id']}").status_code == 204
    r.until(lambda: _link(vm_rig, tap) is None, "the compute port's tap gone with it")


def test_after_kill_9_of_the_agent_running_vms_keep_their_taps_and_are_adopted(
    vm_rig: Rig, vm_api: httpx.Client, vm_net: Any
) -> None:
    vm = r.launch(vm_api, vm_rig, "vm-survivor", [{"network": vm_net["id"]}])
    port = r.port_of(vm_api, vm["nets"][0]["port_id"])
    tap = vm["nets"][0]["device"]
    before = _indexes(vm_rig, port["id"])
    assert vm_rig.chassis.netns is not None
    vmm = tapio.TapEnd(vm_rig.chassis.netns, tap)
    try:
        vm_rig.kill("agent")
        assert (tapio.ask_dhcp(vmm, port["mac_address"]) or tapio.DhcpReply(0, "", {})).yiaddr == r.v4(port)  # (OVN's)
        gone = _vm_instance_while_away(vm_api, vm_rig, vm_net)
        vm_rig.restart("agent")
        r.until(lambda: set(_indexes(vm_rig, gone).values()) == {None},
                "the VM deleted while the agent was away: its tap, bridge and veth collected")  # fmt: skip
        assert _indexes(vm_rig, port["id"]) == before, "the tap, its bridge or its veth was made again"
        assert r.port_of(vm_api, port["id"])["status"] == "ACTIVE"
        ack = tapio.ask_dhcp(vmm, port["mac_address"])
        assert ack is not None and ack.yiaddr == r.v4(port), "the running VMM lost its network"
        store = Store(vm_rig.db_url)
        try:
            r.until(lambda: not _differences(vm_rig, vm_api, store), "converged", timeout=30)
        finally:
            store.dispose()
    finally:
        vmm.close()


def _indexes(vm_rig: Rig, port_id: str) -> dict[str, int | None]:
    """The ifindex of each device of the port's NIC (None: missing)."""
    assert vm_rig.chassis.netns is not None
    with netns.iproute(vm_rig.chassis.netns) as ipr:
        return {name: next(iter(ipr.link_lookup(ifname=name)), None) for name in hybrid.nic(port_id).all()}


def _vm_instance_while_away(vm_api: httpx.Client, vm_rig: Rig, vm_net: Any) -> str:
    """A VM whose NIC is made by hand as the killed agent would have left it (marked, not on br-int), then deleted
    through the API while the agent is away: the restarted agent must collect it. Its port id."""
    inst = r.create(vm_api, "instances", "instance", {"name": "vm-ghost", "kind": "vm", "host": vm_rig.host,
                                                  "nets": [{"network": vm_net["id"]}]})  # fmt: skip
    port = r.port_of(vm_api, inst["nets"][0]["port_id"])
    assert vm_rig.chassis.netns is not None
    hybrid.ensure(vm_rig.chassis.netns, vm_rig.host, port["id"], port["mac_address"], r.MTU, tapdev.Owner())
    assert vm_api.delete(f"/instances/{inst['id']}").status_code == 204
    return port["id"]


def _differences(vm_rig: Rig, vm_api: httpx.Client, store: Store) -> list[str]:
    state = vm_api.get(f"/hosts/{vm_rig.host}/state").json()
    return nb_differences(vm_rig.ovn, store, []) + chassis_differences(vm_rig.ovn, vm_rig.chassis, state)


# -- the owner --------------------------------------------------------------------------------------------------


def test_a_tap_owned_by_the_vm_user_opens_without_privileges(tmp_path: Path) -> None:
    """An unprivileged VMM (uid/gid nobody, no capabilities) attaches to a tap made for it, not to another's, nor
    to one made with no user configured (root's: a tap without an owner would be anyone's)."""
    ns = f"cntest-vmown-{uuid.uuid4().hex[:6]}"
    netns.ensure(ns)
    try:
        tapdev.ensure(ns, "tapmine", "h", "p1", "fa:16:3e:00:00:01", 1500, tapdev.Owner(65534, 65534))
        tapdev.ensure(ns, "taproot", "h", "p2", "fa:16:3e:00:00:02", 1500, tapdev.Owner())  # (none configured)
        tapdev.ensure(ns, "tapgroup", "h", "p3", "fa:16:3e:00:00:03", 1500, tapdev.Owner(65533, 65533))
        assert _open_as_nobody(ns, "tapmine") == 0
        assert _open_as_nobody(ns, "taproot") == 1  # EPERM
        assert _open_as_nobody(ns, "tapgroup") == 1
    finally:
        netns.remove(ns)


def _open_as_nobody(ns: str, name: str) -> int:
    pid = os.fork()
    if pid == 0:  # (the child: in the namespace, drop to nobody and all capabilities, attach as QEMU would)
        code = 2
        try:
            netns.enter_for_good(ns)
            fd = os.open(tuntap.TUN_DEVICE, os.O_RDWR)  # (opened first: /dev/net/tun is root's alone on some hosts)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                fcntl.ioctl(fd, tuntap.TUNSETIFF, tuntap.ifreq(name))  # (the owner check is here)
                code = 0
            except PermissionError:
                code = 1
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


# -- the order of the plug ----------------------------------------------------------------------------------------


def test_the_tap_is_made_last_once_its_bridge_and_veth_are_up_and_qvo_is_on_the_switch() -> None:
    """os-vif's order (the VMM's tap comes last): when the tap appears, only its enslave and its link up are left.
    The switch's plug runs between (`before_tap`); when it fails, no tap is made (a VMM finds no device yet)."""
    ns, port_id = f"cntest-vmord-{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    devices, mark = hybrid.nic(port_id), tuntap.mark("h", port_id)
    netns.ensure(ns)
    seen: dict[str, Any] = {}

    def links() -> dict[str, Any]:
        with netns.iproute(ns) as ipr:
            return {n: ipr.get_links(i[0])[0] for n in devices.all() if (i := ipr.link_lookup(ifname=n))}

    def refused() -> None:
        raise RuntimeError("the switch is away")

    try:
        with pytest.raises(RuntimeError):
            hybrid.ensure(ns, "h", port_id, "fa:16:3e:00:00:09", 1400, tapdev.Owner(), refused)
        assert devices.tap not in links(), "a tap was made though its qvo is not on the switch"
        hybrid.ensure(ns, "h", port_id, "fa:16:3e:00:00:09", 1400, tapdev.Owner(), lambda: seen.update(links()))
        assert set(seen) == {devices.bridge, devices.bridge_leg, devices.switch_leg}, "the tap came before its switch"
        bridge = seen[devices.bridge]["index"]
        assert seen[devices.bridge_leg].get_attr("IFLA_MASTER") == bridge
        assert all(s.get_attr("IFLA_IFALIAS") == mark and s["flags"] & hybrid.IFF_UP for s in seen.values())
        found = links()
        assert found[devices.tap].get_attr("IFLA_MASTER") == bridge and found[devices.tap]["flags"] & hybrid.IFF_UP
        assert found[devices.tap].get_attr("IFLA_IFALIAS") == mark and found[devices.tap].get_attr("IFLA_MTU") == 1400
    finally:
        netns.remove(ns)

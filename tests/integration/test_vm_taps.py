"""VM NICs on the Linux dataplane (issue 28): a persistent tap per NIC, named as Nova names it, that a VMM attaches
to (root). The VMM here is tests/support/tap_guest.py: it attaches to the tap as QEMU does and gives a guest
namespace a real NIC, so the guest's DHCP client, curl and ping run as a VM's would; hostile frames are written
onto the tap directly."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudnet.dataplane.kernel import netns, tuntap
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.wire.guest_net import vm_device
from tests.support import frames
from tests.support.cli import Cli
from tests.support.cloud import Cloud, ns_run, ping
from tests.support.forward_site import Site
from tests.support.guest_metadata import agent_with_proxy
from tests.support.netserve import Responder, tcp_ask
from tests.support.process import CLOUDNET
from tests.support.server import RunningServer
from tests.support.tap_guest import TapGuest, attach_in, link_of

NOBODY = (65534, 65534)
SCRIPT = '#!/bin/sh\n[ "$1" = bound ] && env | grep -E "^(ip|mask|router|staticroutes)="\nexit 0\n'


def vm(cloud: Cloud, name: str, nets: list[dict[str, Any]], wait: bool = True) -> dict[str, Any]:
    inst = cloud.create("instances", "instance", {"name": name, "host": cloud.host, "kind": "vm", "nets": nets})
    return cloud.wait_active(inst["id"]) if wait else inst


def port(cloud: Cloud, port_id: str) -> dict[str, Any]:
    return dict(cloud.api.get(f"/ports/{port_id}").json()["port"])


def host_link(cloud: Cloud, name: str) -> dict[str, Any] | None:
    with netns.iproute(names.host_ns(cloud.host)) as ipr:
        return link_of(ipr, name)


def bridge_index(cloud: Cloud, network_id: str) -> int:
    link = host_link(cloud, names.bridge(network_id))
    assert link is not None
    return int(link["index"])


def tun_info(cloud: Cloud, tap: str) -> dict[str, Any]:
    out = ns_run(names.host_ns(cloud.host), "ip", "-d", "-j", "link", "show", tap, check=True).stdout
    return dict(json.loads(out)[0]["linkinfo"]["info_data"])


def dhcp_configure(guest: str, tmp_path: Path) -> dict[str, str]:
    """udhcpc on the guest's eth0; its lease configured as a guest's DHCP client would (address, routes)."""
    script = tmp_path / "udhcpc.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    done = ns_run(guest, "busybox", "udhcpc", "-i", "eth0", "-f", "-n", "-q", "-t", "5", "-T", "1",
                  "-O", "staticroutes", "-s", str(script), timeout=30)  # fmt: skip
    assert done.returncode == 0, f"no lease: {done.stderr}"
    got = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    ns_run(guest, "ip", "addr", "add", f"{got['ip']}/{got['mask']}", "dev", "eth0", check=True)
    routes = got.get("staticroutes", "").split()
    for dst, via in zip(routes[::2], routes[1::2], strict=True):
        ns_run(guest, "ip", "route", "replace", "default" if dst == "0.0.0.0/0" else dst, "via", via, check=True)
    return got


def test_a_vm_gets_a_filtered_tap_its_lease_its_metadata_and_reaches_a_container(
    cloud: Cloud, server: RunningServer, tmp_path: Path
) -> None:
    dataplane = LinuxDataplane(cloud.host, cloud.uplinks, vm_owner=NOBODY)
    with agent_with_proxy(cloud, server, dataplane=dataplane):
        net, _sub = cloud.network("vmnet", "10.74.0.0/24", mtu=1400)
        box = cloud.instance("box", [{"network": net["id"]}])
        inst = vm(cloud, "vm1", [{"network": net["id"]}])
        assert inst["kind"] == "vm" and inst["netns"] is None
        nic = inst["nets"][0]
        tap = nic["device"]
        assert tap == vm_device(nic["port_id"]) and len(tap) == 14
        p = port(cloud, nic["port_id"])
        host_ns = names.host_ns(cloud.host)
        assert p["status"] == "ACTIVE" and p["binding:vif_type"] == "tap"
        assert p["binding:vif_details"] == {
            "port_filter": True, "bridge_name": names.bridge(net["id"]), "datapath_type": "system",
            "connectivity": "l2", "mtu": 1400, "mac_address": nic["mac_address"], "device": tap, "netns": host_ns,
        }  # fmt: skip
        link = host_link(cloud, tap)
        assert link is not None
        assert link["master"] == bridge_index(cloud, net["id"]) and link["mtu"] == 1400 and link["up"]
        assert link["alias"] == tuntap.mark(cloud.host, nic["port_id"]) and link["group"] == names.VM_TAP_GROUP
        info = tun_info(cloud, tap)
        assert info["type"] == "tap" and info["persist"] and info["user"] == "nobody" and info["group"] == "nogroup"
        guest = cloud.namespace("vm1g")
        with TapGuest(host_ns, tap, guest, nic["mac_address"], 1400):
            got = dhcp_configure(guest, tmp_path)
            assert got["ip"] == nic["fixed_ips"][0]["ip_address"]
            assert ping(guest, box["nets"][0]["fixed_ips"][0]["ip_address"], count=2)
            url = "http://169.254.169.254/openstack/latest/meta_data.json"
            answer = ns_run(guest, "curl", "-sf", "-m", "10", url)
            assert answer.returncode == 0, answer.stderr
            assert json.loads(answer.stdout)["uuid"] == inst["id"]
        # Admin state down: the tap goes down, the port DOWN.
        assert cloud.api.put(f"/ports/{p['id']}", json={"port": {"admin_state_up": False}}).status_code == 200
        cloud.wait_for(lambda: port(cloud, p["id"])["status"] == "DOWN", what="the port DOWN")
        assert not (host_link(cloud, tap) or {}).get("up", True)
        assert cloud.api.delete(f"/instances/{inst['id']}").status_code == 204
        cloud.wait_for(lambda: host_link(cloud, tap) is None, what="the tap removed with its instance")


@pytest.fixture
def vm_and_box(cloud: Cloud) -> Iterator[tuple[dict[str, Any], dict[str, Any], int]]:
    """A VM's NIC with an fd attached to its tap (the VMM's), and a container on the same network; the agent
    running."""
    cloud.start_agent()
    net, _sub = cloud.network("vmhostile", "10.75.0.0/24")
    box = cloud.instance("box", [{"network": net["id"]}])
    inst = vm(cloud, "vmh", [{"network": net["id"]}])
    fd = attach_in(names.host_ns(cloud.host), inst["nets"][0]["device"])
    try:
        yield inst["nets"][0], box, fd
    finally:
        os.close(fd)


def marker() -> bytes:
    return b"cloudnet-vm-" + uuid.uuid4().hex.encode()


def test_a_vm_that_spoofs_or_serves_dhcp_or_ras_reaches_no_neighbour(
    cloud: Cloud, vm_and_box: tuple[dict[str, Any], dict[str, Any], int]
) -> None:
    nic, box, fd = vm_and_box
    target = box["nets"][0]
    mac, ip = nic["mac_address"], nic["fixed_ips"][0]["ip_address"]
    to_mac, to_ip = target["mac_address"], target["fixed_ips"][0]["ip_address"]
    hostile = {"other ip": marker(), "other mac": marker(), "dhcp offer": marker(), "ra": marker()}
    caught = frames.Catcher.start(box["netns"])
    try:
        sends = [
            frames.ethernet(to_mac, mac, 0x0800,
                            frames.ipv4_udp("10.75.0.99", to_ip, 40000, 5500, hostile["other ip"])),
            frames.ethernet(to_mac, "fa:16:3e:00:00:99", 0x0800,
                            frames.ipv4_udp(ip, to_ip, 40000, 5500, hostile["other mac"])),
            frames.ethernet("ff:ff:ff:ff:ff:ff", mac, 0x0800,
                            frames.ipv4_udp(ip, "255.255.255.255", 67, 68, hostile["dhcp offer"])),
            frames.ethernet("33:33:00:00:00:01", mac, 0x86DD,
                            frames.ipv6_icmp("fe80::1", "ff02::1", frames.router_advert(mac, hostile["ra"]))),
        ]  # fmt: skip
        for frame in sends:
            os.write(fd, frame)
        good = marker()
        os.write(fd, frames.ethernet(to_mac, mac, 0x0800, frames.ipv4_udp(ip, to_ip, 40000, 5500, good)))
        assert caught.seen(good, 3), "the genuine frame did not arrive"
        assert [k for k, m in hostile.items() if caught.seen(m, 0)] == []
    finally:
        caught.stop()


def test_a_foreign_tap_is_left_alone_and_a_name_clash_fails_that_instance_alone(cloud: Cloud) -> None:
    cloud.start_agent(resync_interval=0.5)  # (full passes, each collecting)
    net, _sub = cloud.network("vmclash", "10.76.0.0/24")
    box = cloud.instance("box", [{"network": net["id"]}])
    host_ns, bridge = names.host_ns(cloud.host), names.bridge(net["id"])
    taken = cloud.create("ports", "port", {"network_id": net["id"]})
    clash, foreign = vm_device(taken["id"]), f"tapf{cloud.suffix}"
    for dev in (clash, foreign):  # somebody else's taps on cloudnet's bridge, one named as the port's would be
        ns_run(host_ns, "ip", "tuntap", "add", "dev", dev, "mode", "tap", check=True)
        ns_run(host_ns, "ip", "link", "set", dev, "master", bridge, "up", check=True)
    before = {dev: host_link(cloud, dev) for dev in (clash, foreign)}
    bad = vm(cloud, "vmclash", [{"port": taken["id"]}], wait=False)
    good = vm(cloud, "vmgood", [{"network": net["id"]}])

    def failed_with_reason() -> bool:
        p = port(cloud, taken["id"])
        return p["status"] == "ERROR" and "not cloudnet's" in (p["binding:vif_details"] or {}).get("reason", "")

    cloud.wait_for(failed_with_reason, what="the clashing instance in ERROR with its reason")
    assert cloud.api.get(f"/instances/{bad['id']}").json()["instance"]["status"] == "ERROR"
    # Something goes away (collection runs), and full passes go on: the foreign devices stay as they were.
    assert cloud.api.delete(f"/instances/{good['id']}").status_code == 204
    cloud.wait_for(lambda: host_link(cloud, good["nets"][0]["device"]) is None, what="the good VM's tap removed")
    assert cloud.api.delete(f"/instances/{box['id']}").status_code == 204
    cloud.wait_for(lambda: host_link(cloud, names.tap(box["nets"][0]["port_id"])) is None, what="the box's veth gone")
    assert {dev: host_link(cloud, dev) for dev in (clash, foreign)} == before
    assert failed_with_reason()  # (still, with its reason)


def test_a_port_a_compute_service_binds_gets_a_tap(cloud: Cloud) -> None:
    cloud.start_agent()
    net, _sub = cloud.network("vmnova", "10.77.0.0/24")
    device_id = str(uuid.uuid4())
    body = {"network_id": net["id"], "binding:host_id": cloud.host, "device_owner": "compute:nova",
            "device_id": device_id}  # fmt: skip
    p = cloud.create("ports", "port", body)
    cloud.wait_for(lambda: port(cloud, p["id"])["status"] == "ACTIVE", what="the Nova-style port ACTIVE")
    got = port(cloud, p["id"])
    tap = vm_device(p["id"])
    assert got["binding:vif_type"] == "tap" and got["binding:vif_details"]["device"] == tap
    link = host_link(cloud, tap)
    assert link is not None and link["master"] == bridge_index(cloud, net["id"])
    assert link["alias"] == tuntap.mark(cloud.host, p["id"])
    assert cloud.api.delete(f"/ports/{p['id']}").status_code == 204
    cloud.wait_for(lambda: host_link(cloud, tap) is None, what="its tap removed with the port")


def agent_process(cloud: Cloud, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([CLOUDNET, "agent", "--host", cloud.host, "--server", cloud.server.url,
                                 "--state-dir", str(log.parent), "--metadata-url", "off", "--vm-user", "nobody",
                                 "--vm-group", "nogroup"], stdout=out, stderr=subprocess.STDOUT)  # fmt: skip


def test_killed_agent_taps_survive_and_are_adopted_and_a_held_tap_does_not_stall_deletion(
    cloud: Cloud, tmp_path: Path
) -> None:
    log = tmp_path / "agent.log"
    proc = agent_process(cloud, log)
    try:
        cloud.wait_for(lambda: cloud.api.get(f"/hosts/{cloud.host}").status_code == 200, 30, "the agent registered")
        net, _sub = cloud.network("vmkill", "10.78.0.0/24")
        first = vm(cloud, "vmk1", [{"network": net["id"]}], wait=False)
        first = cloud.wait_active(first["id"], timeout=30)
        tap = first["nets"][0]["device"]
        assert tun_info(cloud, tap)["user"] == "nobody"  # (--vm-user)
        held = attach_in(names.host_ns(cloud.host), tap)  # a VMM holds it throughout
        try:
            before = host_link(cloud, tap)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert host_link(cloud, tap) == before  # persistent: still there, as it was
            proc = agent_process(cloud, log)
            second = vm(cloud, "vmk2", [{"network": net["id"]}], wait=False)
            cloud.wait_active(second["id"], timeout=30)  # (the new agent's passes, the first a full one)
            assert host_link(cloud, tap) == before  # adopted: not made again (same ifindex), nothing changed
            assert port(cloud, first["nets"][0]["port_id"])["status"] == "ACTIVE"
            # Deleted while its VMM holds it: gone at once, and the agent goes on.
            assert cloud.api.delete(f"/instances/{first['id']}").status_code == 204
            cloud.wait_for(lambda: host_link(cloud, tap) is None, what="the held tap removed")
            third = vm(cloud, "vmk3", [{"network": net["id"]}], wait=False)
            cloud.wait_active(third["id"], timeout=30)
        finally:
            os.close(held)
    finally:
        proc.kill()  # (a SIGTERM waits out the agent's long poll; the fixture tears the host down)
        proc.wait()


def test_qemu_attaches_to_the_taps_with_the_printed_arguments(cloud: Cloud) -> None:
    """A real QEMU (stopped before its first instruction: only its NICs matter) started as `cloudnet instance
    qemu-args --command` prints it: it attaches to both taps (their carrier comes up) and runs."""
    cloud.start_agent()
    net, _sub = cloud.network("vmqemu", "10.79.0.0/24", mtu=1450)
    inst = vm(cloud, "vmq", [{"network": net["id"]}, {"network": net["id"]}])
    taps = [n["device"] for n in inst["nets"]]
    assert [(host_link(cloud, t) or {}).get("carrier") for t in taps] == [0, 0]  # (nobody attached yet)
    args = shlex.split(Cli(cloud.server.url).ok("instance", "qemu-args", "vmq", "--command").stdout)
    assert args[:4] == ["ip", "netns", "exec", names.host_ns(cloud.host)]
    qemu = subprocess.Popen([*args, "-accel", "tcg", "-nodefaults", "-display", "none", "-S", "-monitor", "none",
                             "-serial", "none"], stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        cloud.wait_for(lambda: qemu.poll() is not None or all((host_link(cloud, t) or {}).get("carrier") for t in taps),
                       what="QEMU attached to both taps")  # fmt: skip
        assert qemu.poll() is None, qemu.communicate()[1]
    finally:
        qemu.kill()
        qemu.wait()


def test_a_vm_reads_metadata_only_from_its_own_addresses(cloud: Cloud) -> None:
    """The metadata identity rule covers VM taps: a VM whose port has a pair naming its neighbour's address, or no
    port security, sending to 169.254.169.254:80 as that neighbour reaches nothing (caught on the metadata
    namespace's side); from its own address, it does."""
    cloud.start_agent()
    net, _sub = cloud.network("vmident", "10.73.0.0/24")
    box = cloud.instance("box", [{"network": net["id"]}])
    neighbour = box["nets"][0]["fixed_ips"][0]["ip_address"]
    paired = cloud.create(
        "ports", "port", {"network_id": net["id"], "allowed_address_pairs": [{"ip_address": neighbour}]}
    )
    open_port = cloud.create("ports", "port", {"network_id": net["id"], "port_security_enabled": False,
                                               "security_groups": []})  # fmt: skip
    vms = [vm(cloud, f"vmi{i}", [{"port": p["id"]}]) for i, p in enumerate((paired, open_port))]
    (meta,) = cloud.api.get("/ports", params={"network_id": net["id"], "device_owner": "network:distributed"}).json()[
        "ports"
    ]
    catcher = frames.Catcher.start(names.metadata_ns(cloud.host, net["id"]), names.metadata_iface(meta["id"]))
    fds = [attach_in(names.host_ns(cloud.host), inst["nets"][0]["device"]) for inst in vms]
    try:
        hostile, twins = [], []
        for fd, inst in zip(fds, vms, strict=True):
            nic = inst["nets"][0]
            for source, kept in ((neighbour, hostile), (nic["fixed_ips"][0]["ip_address"], twins)):
                kept.append(mark := marker())
                packet = frames.ipv4_tcp(source, "169.254.169.254", 40000, 80, mark)
                os.write(fd, frames.ethernet(meta["mac_address"], nic["mac_address"], 0x0800, packet))
        assert all(catcher.seen(m, 3) for m in twins), "a VM's own request did not arrive"
        assert not any(catcher.seen(m, 0) for m in hostile)
    finally:
        catcher.stop()
        for fd in fds:
            os.close(fd)


def test_a_vm_behind_a_router_reaches_its_gateway(cloud: Cloud, tmp_path: Path) -> None:
    cloud.start_agent()
    net, sub = cloud.network("vmrouted", "10.72.8.0/24")
    router = cloud.create("routers", "router", {"name": f"r-{cloud.suffix}"})
    r = cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    assert r.status_code == 200, r.text
    inst = vm(cloud, "vmr", [{"network": net["id"]}])
    nic = inst["nets"][0]
    guest = cloud.namespace("vmrg")
    with TapGuest(names.host_ns(cloud.host), nic["device"], guest, nic["mac_address"], 1500):
        got = dhcp_configure(guest, tmp_path)
        assert got["router"] == sub["gateway_ip"]
        assert ping(guest, sub["gateway_ip"], count=2)


def test_a_forward_from_outside_reaches_a_vm(site: Site, tmp_path: Path) -> None:
    cloud = site.cloud
    (published,) = cloud.api.get("/security-groups", params={"name": "published"}).json()["security_groups"]
    p = cloud.create("ports", "port", {"network_id": site.net["id"], "security_groups": [published["id"]]})
    inst = vm(cloud, "vmfwd", [{"port": p["id"]}])
    nic = inst["nets"][0]
    guest = cloud.namespace("vmfg")
    with TapGuest(names.host_ns(cloud.host), nic["device"], guest, nic["mac_address"], 1500):
        got = dhcp_configure(guest, tmp_path)
        responder = Responder.start(guest, "V", tcp=(8080,))
        try:
            site.forward({"listen_address": "192.0.2.51", "ports": [
                {"protocol": "tcp", "listen_port": "8080", "target_address": got["ip"]}]})  # fmt: skip
            site.until(lambda: tcp_ask(site.outside, "192.0.2.51", 8080).startswith("V "), "the forward to the VM")
            assert tcp_ask(site.outside, "192.0.2.51", 8080) == "V 192.0.2.1 8080"
        finally:
            responder.stop()


def test_a_full_pass_puts_a_tap_someone_changed_back(cloud: Cloud) -> None:
    cloud.start_agent(resync_interval=0.5)
    net, _sub = cloud.network("vmrepair", "10.72.9.0/24", mtu=1400)
    inst = vm(cloud, "vmrep", [{"network": net["id"]}])
    tap = inst["nets"][0]["device"]
    before = host_link(cloud, tap)
    ns_run(names.host_ns(cloud.host), "ip", "link", "set", tap, "nomaster", "mtu", "1300", check=True)
    cloud.wait_for(lambda: host_link(cloud, tap) == before, what="the tap back on its bridge with its MTU")


def test_a_tap_left_by_an_instance_deleted_while_the_agent_was_away_is_collected(cloud: Cloud) -> None:
    """Collection knows cloudnet's taps by their mark for this host: one whose instance went while the agent was
    stopped goes; a tap marked for another host, on the same bridge, stays."""
    cloud.start_agent()
    net, _sub = cloud.network("vmaway", "10.72.10.0/24")
    gone, kept = vm(cloud, "vmgone", [{"network": net["id"]}]), vm(cloud, "vmkept", [{"network": net["id"]}])
    host_ns, other = names.host_ns(cloud.host), f"tapo{cloud.suffix}"
    ns_run(host_ns, "ip", "tuntap", "add", "dev", other, "mode", "tap", check=True)
    ns_run(host_ns, "ip", "link", "set", other, "master", names.bridge(net["id"]), "alias",
           tuntap.mark(f"{cloud.host}-other", str(uuid.uuid4())), check=True)  # fmt: skip
    before = host_link(cloud, other)
    cloud.stop_agent()
    assert cloud.api.delete(f"/instances/{gone['id']}").status_code == 204
    assert host_link(cloud, gone["nets"][0]["device"]) is not None  # (nobody to remove it)
    cloud.start_agent()
    cloud.wait_for(lambda: host_link(cloud, gone["nets"][0]["device"]) is None, what="the left tap collected")
    assert host_link(cloud, kept["nets"][0]["device"]) is not None and host_link(cloud, other) == before

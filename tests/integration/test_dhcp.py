"""DHCP on the Linux dataplane (issue 28): a real dnsmasq per network in its metadata namespace, asked by busybox's
udhcpc from an instance's namespace whose static configuration was flushed, as a VM's guest would ask (root)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import dhcp_conf, names
from cloudnet.dataplane.linux.dhcp import RUN_ROOT
from tests.support import frames
from tests.support.cloud import Cloud, ns_run

SCRIPT = """#!/bin/sh
[ "$1" = bound ] && env | grep -E '^(ip|subnet|router|dns|domain|mtu|staticroutes|serverid|hostname)='
exit 0
"""


def _script(tmp_path: Path) -> str:
    path = tmp_path / "udhcpc.sh"
    path.write_text(SCRIPT)
    path.chmod(0o755)
    return str(path)


def ask(ns: str, script: str, tries: int = 4) -> dict[str, str] | None:
    """What a DHCP client on eth0 of `ns` is offered and acknowledged (None: no lease), its static address gone."""
    ns_run(ns, "ip", "addr", "flush", "dev", "eth0", check=True)
    done = ns_run(ns, "busybox", "udhcpc", "-i", "eth0", "-f", "-n", "-q", "-t", str(tries), "-T", "1",
                  "-O", "staticroutes", "-O", "mtu", "-s", script, timeout=30)  # fmt: skip
    if done.returncode != 0:
        return None
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def _files(cloud: Cloud, network_id: str) -> dhcp_conf.Files:
    return dhcp_conf.Files(RUN_ROOT / names.host_ns(cloud.host) / network_id)


def _pid(cloud: Cloud, network_id: str) -> int | None:
    """dnsmasq's pid from its pidfile; None while there is none (a restart removes it before the new one writes it)."""
    try:
        return int(_files(cloud, network_id).pid.read_text())
    except (FileNotFoundError, ValueError):
        return None


def _meta_ip(cloud: Cloud, network_id: str) -> str:
    r = cloud.api.get("/ports", params={"network_id": network_id, "device_owner": "network:distributed"})
    (meta,) = r.json()["ports"]
    return str(meta["fixed_ips"][0]["ip_address"])


def _network(cloud: Cloud, name: str, prefix: str, **subnet: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    net = cloud.create("networks", "network", {"name": name, "mtu": 1400})
    sub = cloud.create("subnets", "subnet", {"network_id": net["id"], "cidr": f"{prefix}.0/24", **subnet})
    return net, sub


def test_a_guest_gets_its_port_configuration_by_dhcp(cloud: Cloud, tmp_path: Path) -> None:
    script = _script(tmp_path)
    cloud.start_agent()
    net, sub = _network(cloud, "dh1", "10.71.0", dns_nameservers=["192.0.2.53"],
                        host_routes=[{"destination": "10.99.0.0/16", "nexthop": "10.71.0.254"}])  # fmt: skip
    vm = cloud.instance("vm", [{"network": net["id"]}])
    # Port security on and no group at all: DHCP still reaches the network's server, and its answers the guest.
    bare = cloud.create("ports", "port", {"network_id": net["id"], "security_groups": []})
    bare_vm = cloud.instance("bare", [{"port": bare["id"]}])
    meta_ip = _meta_ip(cloud, net["id"])
    for inst in (vm, bare_vm):
        got = ask(inst["netns"], script)
        ip = inst["nets"][0]["fixed_ips"][0]["ip_address"]
        assert got is not None, f"{inst['name']} got no lease"
        assert got["ip"] == ip and got["subnet"] == "255.255.255.0"
        assert got["router"] == sub["gateway_ip"] and got["dns"] == "192.0.2.53" and got["mtu"] == "1400"
        assert got["serverid"] == meta_ip and got["domain"] == "openstacklocal"
        assert got["hostname"] == "host-" + ip.replace(".", "-")
        routes = got["staticroutes"].split()
        pairs = set(zip(routes[::2], routes[1::2], strict=True))
        assert pairs == {("10.99.0.0/16", "10.71.0.254"), ("169.254.169.254/32", meta_ip),
                         ("0.0.0.0/0", sub["gateway_ip"])}  # fmt: skip


def test_an_address_change_reloads_dnsmasq_and_a_dead_one_restarts(cloud: Cloud, tmp_path: Path) -> None:
    script = _script(tmp_path)
    cloud.start_agent()
    net, sub = _network(cloud, "dh2", "10.72.0")
    vm = cloud.instance("vm", [{"network": net["id"]}])
    got = ask(vm["netns"], script)
    assert got is not None and got["ip"] == vm["nets"][0]["fixed_ips"][0]["ip_address"]
    pid = _pid(cloud, net["id"])
    assert pid is not None
    port_id = vm["nets"][0]["port_id"]
    r = cloud.api.put(f"/ports/{port_id}", json={"port": {"fixed_ips": [{"subnet_id": sub["id"],
                                                                          "ip_address": "10.72.0.77"}]}})  # fmt: skip
    assert r.status_code == 200, r.text
    hosts = _files(cloud, net["id"]).hosts
    cloud.wait_for(lambda: "10.72.0.77" in hosts.read_text(), what="the new address in the hosts file")
    got = ask(vm["netns"], script)
    assert got is not None and got["ip"] == "10.72.0.77"
    assert _pid(cloud, net["id"]) == pid and os.path.exists(f"/proc/{pid}")
    # A restarted agent adopts it (its first pass is a full one).
    cloud.stop_agent()
    cloud.start_agent()
    assert _pid(cloud, net["id"]) == pid and os.path.exists(f"/proc/{pid}")
    # Killed, it is restarted (a new pid) and answers; gone with the network's last instance here.
    os.kill(pid, signal.SIGKILL)
    files = _files(cloud, net["id"])
    cloud.wait_for(lambda: _pid(cloud, net["id"]) not in (None, pid), what="dnsmasq restarted")
    got = ask(vm["netns"], script)
    assert got is not None and got["ip"] == "10.72.0.77"
    pid = _pid(cloud, net["id"])
    assert pid is not None
    assert cloud.api.delete(f"/instances/{vm['id']}").status_code == 204
    cloud.wait_for(lambda: not os.path.exists(f"/proc/{pid}") and not files.dir.exists(), what="dnsmasq stopped")


def test_an_unknown_mac_gets_nothing(cloud: Cloud, tmp_path: Path) -> None:
    """No dynamic pool: a MAC the hosts file does not name is not answered (the port is unfiltered, so that only
    dnsmasq decides; the same port with its own MAC is answered first, so the test can fail)."""
    script = _script(tmp_path)
    cloud.start_agent()
    net, _ = _network(cloud, "dh3", "10.73.0")
    port = cloud.create("ports", "port", {"network_id": net["id"], "port_security_enabled": False})
    vm = cloud.instance("vm", [{"port": port["id"]}])
    assert (got := ask(vm["netns"], script)) is not None and got["ip"] == port["fixed_ips"][0]["ip_address"]
    ns_run(vm["netns"], "ip", "link", "set", "eth0", "address", "02:00:00:de:ad:01", check=True)
    assert ask(vm["netns"], script, tries=2) is None


@contextlib.contextmanager
def _rogue_server(cloud: Cloud, ns: str, tmp_path: Path, prefix: str) -> Iterator[None]:
    """busybox udhcpd on eth0 of `ns`, offering addresses of its own choosing."""
    conf = tmp_path / f"udhcpd-{ns}.conf"
    conf.write_text(f"start {prefix}.200\nend {prefix}.210\ninterface eth0\nlease_file {tmp_path}/leases-{ns}\n"
                    f"option subnet 255.255.255.0\noption router {prefix}.66\n")  # fmt: skip
    (tmp_path / f"leases-{ns}").touch()
    proc = subprocess.Popen(["ip", "netns", "exec", ns, "busybox", "udhcpd", "-f", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        cloud.wait_for(lambda: ":67 " in ns_run(ns, "ss", "-uln").stdout, what="udhcpd listening")
        yield
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_a_guest_dhcp_server_does_not_reach_other_guests(cloud: Cloud, tmp_path: Path) -> None:
    """A guest answering DHCP (its group lets everything in, so it hears the asks): with port security its offers
    are dropped; without, the victim takes them (the test can fail). The network's own DHCP is off."""
    script = _script(tmp_path)
    cloud.start_agent()
    net, _ = _network(cloud, "dh4", "10.74.0", enable_dhcp=False)
    group = cloud.create("security-groups", "security_group", {"name": f"open-{cloud.suffix}"})
    rule = {"security_group_id": group["id"], "direction": "ingress", "ethertype": "IPv4"}
    cloud.create("security-group-rules", "security_group_rule", rule)
    rogue_port = cloud.create("ports", "port", {"network_id": net["id"], "security_groups": [group["id"]]})
    rogue = cloud.instance("rogue", [{"port": rogue_port["id"]}])
    victim = cloud.instance("victim", [{"network": net["id"]}])
    assert not (_files(cloud, net["id"]).dir.exists())  # (no dnsmasq: DHCP is off)
    with _rogue_server(cloud, rogue["netns"], tmp_path, "10.74.0"):
        assert ask(victim["netns"], script, tries=3) is None
    r = cloud.api.put(f"/ports/{rogue_port['id']}", json={"port": {"security_groups": [],
                                                                    "port_security_enabled": False}})  # fmt: skip
    assert r.status_code == 200, r.text
    cloud.wait_for(lambda: _unfiltered(cloud, rogue_port["id"]), what="the rogue port unfiltered")
    with _rogue_server(cloud, rogue["netns"], tmp_path, "10.74.0"):
        got = ask(victim["netns"], script)
        assert got is not None and got["router"] == "10.74.0.66"


def _unfiltered(cloud: Cloud, port_id: str) -> bool:
    out = ns_run(names.host_ns(cloud.host), "nft", "list", "set", "bridge", "cloudnet", "unfiltered").stdout
    return names.tap(port_id) in out


def test_a_network_whose_dnsmasq_cannot_start_fails_alone(cloud: Cloud, tmp_path: Path) -> None:
    """One network's lease file cannot be made (a directory is in its place): that network's server is reported
    failed with dnsmasq's reason, and the other network's guests get their leases."""
    script = _script(tmp_path)
    cloud.start_agent()
    bad, _ = _network(cloud, "bad", "10.75.0")
    good, _ = _network(cloud, "good", "10.76.0")
    _files(cloud, bad["id"]).leases.mkdir(parents=True)
    vm_bad = cloud.instance("vmbad", [{"network": bad["id"]}])
    vm_good = cloud.instance("vmgood", [{"network": good["id"]}])
    got = ask(vm_good["netns"], script)
    assert got is not None and got["ip"] == vm_good["nets"][0]["fixed_ips"][0]["ip_address"]
    assert cloud.agent is not None
    failures = {f["object"]: f["reason"] for f in cloud.agent.dataplane.failures()}
    assert "lease file" in failures.get(f"dhcp:{bad['id']}", ""), failures
    assert f"dhcp:{good['id']}" not in failures
    assert vm_bad["status"] == "ACTIVE"  # (its guest keeps its static configuration)
    assert ask(vm_bad["netns"], script, tries=2) is None


# A DHCP discover with a client hardware address of the caller's choosing (broadcast flag: the offer comes back to
# everyone), sent from the namespace's own address; prints the address offered, or "none".
DISCOVER = """
import os, socket, struct, sys
chaddr = bytes.fromhex(sys.argv[1].replace(":", ""))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"eth0")
s.bind(("0.0.0.0", 68))
s.settimeout(3)
xid = os.urandom(4)
head = struct.pack("!BBBB4sHH16s16s", 1, 1, 6, 0, xid, 0, 0x8000, bytes(16), chaddr + bytes(10))
s.sendto(head + bytes(192) + bytes([99, 130, 83, 99, 53, 1, 1, 255]), ("255.255.255.255", 67))
while True:
    try:
        data = s.recv(2048)
    except socket.timeout:
        print("none")
        break
    if data[0] == 2 and data[4:8] == xid:
        print(socket.inet_ntoa(data[16:20]))
        break
"""


def test_a_guest_cannot_ask_for_another_ports_lease(cloud: Cloud) -> None:
    """The server answers by the client hardware address inside the request: a guest naming another port's MAC
    there (from its own MAC and address) is dropped; naming its own, it is answered (the test can fail)."""
    cloud.start_agent()
    net, _ = _network(cloud, "dh5", "10.77.0")
    thief = cloud.instance("thief", [{"network": net["id"]}])
    victim = cloud.instance("victim", [{"network": net["id"]}])
    own = ns_run(thief["netns"], "python3", "-c", DISCOVER, thief["nets"][0]["mac_address"]).stdout.strip()
    assert own == thief["nets"][0]["fixed_ips"][0]["ip_address"]
    stolen = ns_run(thief["netns"], "python3", "-c", DISCOVER, victim["nets"][0]["mac_address"]).stdout.strip()
    assert stolen == "none"


def test_a_hosts_dhcp_server_answers_its_own_guests_only(cloud: Cloud) -> None:
    """A flat network reaching the outside by an uplink: an ask from out there (another host's guest) is not answered
    by this host's server, even naming one of its ports' MACs; the same ask from the port's guest is."""
    outside = cloud.outside("physnet1", "198.51.100.1/24")
    cloud.start_agent()
    body = {"name": "flat", "router:external": True, "provider:network_type": "flat",
            "provider:physical_network": "physnet1"}  # fmt: skip
    net = cloud.create("networks", "network", body)
    pool = [{"start": "198.51.100.10", "end": "198.51.100.99"}]
    cloud.create("subnets", "subnet", {"network_id": net["id"], "cidr": "198.51.100.0/24", "allocation_pools": pool})
    vm = cloud.instance("vm", [{"network": net["id"]}])
    mac, ip = vm["nets"][0]["mac_address"], vm["nets"][0]["fixed_ips"][0]["ip_address"]
    assert ns_run(vm["netns"], "python3", "-c", DISCOVER, mac).stdout.strip() == ip
    assert ns_run(outside, "python3", "-c", DISCOVER, mac).stdout.strip() == "none"


DHCLIENT_SCRIPT = """#!/bin/sh
env | grep -E '^(reason|new_ip6_address|new_ip6_prefixlen|new_dhcp6_name_servers|new_dhcp6_domain_search)=' >> "$0.out"
echo --- >> "$0.out"
exit 0
"""


def ask6(cloud: Cloud, ns: str, tmp_path: Path, stateless: bool = False) -> dict[str, str] | None:
    """What ISC dhclient -6 on eth0 of `ns` is given (an address and options; `stateless`: options only), or None."""
    # (a client asks from its link-local address, once the kernel's duplicate address detection is through)
    link = ("ip", "-6", "addr", "show", "dev", "eth0", "scope", "link")
    cloud.wait_for(lambda: "tentative" not in ns_run(ns, *link).stdout, what="eth0's link-local address usable")
    conf = tmp_path / "dhclient6.conf"  # (gives up after 5 s)
    conf.write_text("timeout 5;\nrequest dhcp6.name-servers, dhcp6.domain-search;\n")
    script = tmp_path / f"dhclient6-{ns}.sh"
    script.write_text(DHCLIENT_SCRIPT)
    script.chmod(0o755)
    out = Path(f"{script}.out")
    out.unlink(missing_ok=True)
    ns_run(ns, "ip", "-6", "addr", "flush", "dev", "eth0", "scope", "global", check=True)
    pidfile = tmp_path / f"dhclient6-{ns}.pid"
    leases = tmp_path / f"dhclient6-{ns}.leases"
    cmd = ["dhclient", "-6", "-1", "-cf", str(conf), "-sf", str(script), "-lf", str(leases), "-pf", str(pidfile),
           *(["-S"] if stateless else []), "eth0"]  # fmt: skip
    done = ns_run(ns, *cmd, timeout=60)
    with contextlib.suppress(OSError, ValueError):  # (it stays, in the background, once bound)
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
    if done.returncode != 0 or not out.exists():
        return None
    blocks = [dict(line.split("=", 1) for line in b.splitlines() if "=" in line) for b in out.read_text().split("---")]
    # (an information request's answer comes as RENEW6)
    return next((b for b in blocks if b.get("reason") in ("BOUND6", "RENEW6")), None)


def test_dhcpv6_stateful_gives_the_port_address_and_stateless_only_options(cloud: Cloud, tmp_path: Path) -> None:
    cloud.start_agent()
    net = cloud.create("networks", "network", {"name": "v6"})
    modes = {"ipv6_address_mode": "dhcpv6-stateful", "ipv6_ra_mode": "dhcpv6-stateful"}
    full = cloud.create("subnets", "subnet", {"network_id": net["id"], "cidr": "fd71::/64", "ip_version": 6,
                                              "dns_nameservers": ["2001:db8::53"], **modes})  # fmt: skip
    vm = cloud.instance("vm6", [{"network": net["id"]}])
    ip = next(f["ip_address"] for f in vm["nets"][0]["fixed_ips"] if f["subnet_id"] == full["id"])
    got = ask6(cloud, vm["netns"], tmp_path)
    assert got is not None and got["new_ip6_address"] == ip, got
    assert got["new_dhcp6_name_servers"] == "2001:db8::53" and got["new_dhcp6_domain_search"] == "openstacklocal."
    # Stateless: options only (an address-mode slaac subnet is not served at all).
    net2 = cloud.create("networks", "network", {"name": "v6s"})
    modes = {"ipv6_address_mode": "dhcpv6-stateless", "ipv6_ra_mode": "dhcpv6-stateless"}
    cloud.create("subnets", "subnet", {"network_id": net2["id"], "cidr": "fd72::/64", "ip_version": 6,
                                       "dns_nameservers": ["2001:db8::54"], **modes})  # fmt: skip
    vm2 = cloud.instance("vm6s", [{"network": net2["id"]}])
    assert ask6(cloud, vm2["netns"], tmp_path) is None  # (no address to lease)
    got = ask6(cloud, vm2["netns"], tmp_path, stateless=True)
    assert got is not None and got["new_dhcp6_name_servers"] == "2001:db8::54" and "new_ip6_address" not in got


def _discover_frame(mac: str, marker: bytes) -> bytes:
    """A DHCPDISCOVER from `mac` (its chaddr too, as a real client's), `marker` in the server name field."""
    chaddr = bytes.fromhex(mac.replace(":", ""))
    bootp = struct.pack("!BBBB4sHH16s16s64s128s", 1, 1, 6, 0, os.urandom(4), 0, 0x8000, bytes(16), chaddr + bytes(10),
                        marker.ljust(64, b"\0"), bytes(128))  # fmt: skip
    payload = bootp + bytes([99, 130, 83, 99, 53, 1, 1, 255])
    return frames.ethernet("ff:ff:ff:ff:ff:ff", mac, 0x0800, frames.ipv4_udp("0.0.0.0", "255.255.255.255", 68, 67,
                                                                               payload))  # fmt: skip


def test_a_guest_flooding_its_dhcp_server_does_not_starve_the_others(cloud: Cloud, tmp_path: Path) -> None:
    """Each port has a budget of DHCP asks (fw_render.DHCP_RATE): of a flood of discovers from one guest (its own
    MAC, its own chaddr: nothing else would stop them) only the budget reaches the server, and a neighbour asking
    meanwhile gets its lease."""
    cloud.start_agent()
    net, _ = _network(cloud, "flood", "10.78.0")
    flooder = cloud.instance("flooder", [{"network": net["id"]}])
    patient = cloud.instance("patient", [{"network": net["id"]}])
    meta = cloud.api.get("/ports", params={"network_id": net["id"], "device_owner": "network:distributed"})
    (meta_port,) = meta.json()["ports"]
    server = frames.Catcher.start(names.metadata_ns(cloud.host, net["id"]), names.metadata_iface(meta_port["id"]))
    marker = os.urandom(8).hex().encode()
    frame = _discover_frame(flooder["nets"][0]["mac_address"], marker)
    try:
        with netns.entered(flooder["netns"]):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        with sock:
            sock.bind(("eth0", 0))
            started = time.monotonic()
            for _ in range(2000):
                sock.send(frame)
            took = time.monotonic() - started
        got = ask(patient["netns"], _script(tmp_path))
        assert server.seen(marker, within=2)  # (some of the flood is the flooder's budget)
        arrived = sum(marker in f for f in list(server.frames))
    finally:
        server.stop()
    assert got is not None and got["ip"] == patient["nets"][0]["fixed_ips"][0]["ip_address"], got
    assert arrived <= 30 + 10 * (took + 1) + 5, f"{arrived} of 2000 discovers in {took:.2f} s reached the server"

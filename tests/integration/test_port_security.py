"""Port security (anti-spoofing) and the firewall's robustness, against frames a hostile guest crafts (root).

Each hostile frame has a control twin that differs only in what makes it hostile (its source address, its MAC,
the address it claims, its ICMPv6 type, its UDP source port, its VLAN tag): the twin arrives, the hostile one does
not. The hostile one is sent first, on the same device: once the twin has arrived, so would have the hostile one
(no wait of its own). The receiving side catches every frame that reaches its interface (AF_PACKET), before its
own IP stack.
"""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from cloudnet.dataplane import security
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import fw_render, names
from tests.support import frames
from tests.support.cloud import ns_run, ping
from tests.support.netserve import Responder, tcp_ask
from tests.support.sg_rig import Net, Port, Rig, rule

BLOCKED = 0.6


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    r = Rig()
    net = r.network(82)
    for label, host_part in (("a", 10), ("b", 11), ("c", 12)):
        r.port(net, label, host_part, groups=["open"])
    r.group("open", rule("egress"), rule("egress", "IPv6"), rule("ingress"), rule("ingress", "IPv6"))
    r.converge(full=True)
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def caught(rig: Rig) -> Iterator[frames.Catcher]:
    """Everything that reaches b."""
    catcher = frames.Catcher.start(rig_ports(rig)[1].ns)
    yield catcher
    catcher.stop()


def arrived_alone(caught: frames.Catcher, twins: list[bytes], hostile: list[bytes]) -> bool:
    """Did every twin arrive (sent after the hostile frames), and none of the hostile frames?"""
    return all(caught.seen(m, 3) for m in twins) and not any(caught.seen(m, 0) for m in hostile)


def rig_ports(rig: Rig) -> tuple[Port, Port, Port]:
    a, b, c = list(rig.ports.values())[:3]
    return a, b, c


def marker() -> bytes:
    return b"cloudnet-test-" + uuid.uuid4().hex.encode()


def udp_frame(src_mac: str, dst: Port, src_ip: str, mark: bytes, sport: int = 40000, dport: int = 5500,
              dst_mac: str | None = None, vlan: int | None = None) -> bytes:  # fmt: skip
    packet = frames.ipv4_udp(src_ip, dst.ip, sport, dport, mark)
    return frames.ethernet(dst_mac or dst.mac, src_mac, 0x0800, packet, vlan)


def test_spoofed_source_address_or_mac_is_dropped(rig: Rig, caught: frames.Catcher) -> None:
    a, b, c = rig_ports(rig)
    good, other_ip, made_up_ip, other_mac = marker(), marker(), marker(), marker()
    frames.send(a.ns, udp_frame(a.mac, b, c.ip, other_ip))
    frames.send(a.ns, udp_frame(a.mac, b, "10.82.0.99", made_up_ip))
    frames.send(a.ns, udp_frame(c.mac, b, a.ip, other_mac))
    frames.send(a.ns, udp_frame(a.mac, b, a.ip, good))
    good6, other_ip6 = marker(), marker()
    for source, mark in ((c.ip6, other_ip6), (a.ip6, good6)):
        packet = frames.ipv6_udp(source, b.ip6, 40000, 5500, mark)
        frames.send(a.ns, frames.ethernet(b.mac, a.mac, 0x86DD, packet))
    assert arrived_alone(caught, [good, good6], [other_ip, made_up_ip, other_mac, other_ip6])


def test_arp_and_neighbour_advertisements_for_a_neighbours_address_are_dropped(
    rig: Rig, caught: frames.Catcher
) -> None:
    a, b, c = rig_ports(rig)
    own, neighbours, own6, neighbours6 = marker(), marker(), marker(), marker()
    for claimed, mark in ((c.ip, neighbours), (a.ip, own)):  # gratuitous ARP (a reply to everyone), padded
        packet = frames.arp(2, a.mac, claimed, frames.BROADCAST, claimed) + mark
        frames.send(a.ns, frames.ethernet(frames.BROADCAST, a.mac, 0x0806, packet))
    for claimed, mark in ((c.ip6, neighbours6), (a.ip6, own6)):
        na = frames.neighbour_advert(claimed, a.mac) + mark
        frames.send(a.ns, frames.ethernet("33:33:00:00:00:01", a.mac, 0x86DD, frames.ipv6_icmp(a.ip6, "ff02::1", na)))
    assert arrived_alone(caught, [own, own6], [neighbours, neighbours6])
    assert a.mac not in ns_run(b.ns, "ip", "neigh", "show", c.ip).stdout


def test_rogue_router_advertisement_and_dhcp_server_replies_are_dropped(rig: Rig, caught: frames.Catcher) -> None:
    a, b, _c = rig_ports(rig)
    ra, echo, offer, not_offer = marker(), marker(), marker(), marker()
    link_local = str(security.link_local(a.mac).network_address)
    for icmp in (frames.router_advert(a.mac, ra), frames.echo_request(echo)):
        packet = frames.ipv6_icmp(link_local, "ff02::1", icmp)
        frames.send(a.ns, frames.ethernet("33:33:00:00:00:01", a.mac, 0x86DD, packet))
    for sport, mark in ((67, offer), (1067, not_offer)):  # a DHCP server's offer is from port 67 to port 68
        packet = frames.ipv4_udp(a.ip, "255.255.255.255", sport, 68, mark)
        frames.send(a.ns, frames.ethernet(frames.BROADCAST, a.mac, 0x0800, packet))
    reply6, not_reply6 = marker(), marker()
    for sport, mark in ((547, reply6), (1547, not_reply6)):  # a DHCPv6 server's reply: port 547 to port 546
        packet = frames.ipv6_udp(link_local, "ff02::1", sport, 546, mark)
        frames.send(a.ns, frames.ethernet("33:33:00:00:00:01", a.mac, 0x86DD, packet))
    assert arrived_alone(caught, [echo, not_offer, not_reply6], [ra, offer, reply6])
    assert "default" not in ns_run(b.ns, "ip", "-6", "route").stdout


def test_vlan_tagged_frames_neither_leave_nor_reach_a_filtered_port(rig: Rig, caught: frames.Catcher) -> None:
    """They would skip br_netfilter (and with it every rule): from a filtered port, or towards one."""
    a, b, c = rig_ports(rig)
    plain, tagged, plain_in, tagged_in = marker(), marker(), marker(), marker()
    frames.send(a.ns, udp_frame(a.mac, b, a.ip, tagged, vlan=5))
    frames.send(a.ns, udp_frame(a.mac, b, a.ip, plain))
    c.security = False  # c is not filtered: what it sends is not checked, but it still must not reach b tagged
    try:
        rig.converge()
        frames.send(c.ns, udp_frame(c.mac, b, c.ip, tagged_in, vlan=5))
        frames.send(c.ns, udp_frame(c.mac, b, c.ip, plain_in))
        assert arrived_alone(caught, [plain, plain_in], [tagged, tagged_in])
    finally:
        c.security = True
        rig.converge()


def test_an_allowed_address_pair_lets_exactly_that_address_through(rig: Rig, caught: frames.Catcher) -> None:
    a, b, _c = rig_ports(rig)
    a.pairs = [{"ip_address": "10.82.0.200", "mac_address": a.mac}]
    server = Responder.start(b.ns, "B", tcp=(7500,))
    try:
        rig.converge()
        for address in ("10.82.0.200", "10.82.0.201"):
            ns_run(a.ns, "ip", "addr", "add", f"{address}/32", "dev", "eth0", check=True)
        assert tcp_ask(a.ns, b.ip, 7500, source="10.82.0.200").startswith("B 10.82.0.200 ")
        assert tcp_ask(a.ns, b.ip, 7500, BLOCKED, source="10.82.0.201") == ""
        pair, beside = marker(), marker()
        frames.send(a.ns, udp_frame(a.mac, b, "10.82.0.201", beside))
        frames.send(a.ns, udp_frame(a.mac, b, "10.82.0.200", pair))
        assert arrived_alone(caught, [pair], [beside])
    finally:
        server.stop()
        for address in ("10.82.0.200", "10.82.0.201"):
            ns_run(a.ns, "ip", "addr", "del", f"{address}/32", "dev", "eth0")
        a.pairs = []
        rig.converge()


def test_the_metadata_service_sees_a_port_only_from_its_own_addresses(rig: Rig) -> None:
    """Frames to 169.254.169.254:80, caught on the metadata namespace's side of the bridge: from a pair address (one
    naming a neighbour's address, as a network's owner may give) or from a port without port security sending with
    its neighbour's address, none arrives; from the port's own address, it does."""
    a, b, c = rig_ports(rig)
    meta = rig.state()["networks"][a.net.id]["metadata_port"]
    catcher = frames.Catcher.start(names.metadata_ns(rig.host, a.net.id), names.metadata_iface(meta["id"]))
    a.pairs = [{"ip_address": b.ip, "mac_address": a.mac}]
    c.security = False
    try:
        rig.converge()
        sent = {}
        for port, source in ((a, b.ip), (a, a.ip), (c, b.ip), (c, c.ip)):  # the hostile one first, then its twin
            sent[port.id, source] = mark = marker()
            packet = frames.ipv4_tcp(source, "169.254.169.254", 40000, 80, mark)
            frames.send(port.ns, frames.ethernet(meta["mac_address"], port.mac, 0x0800, packet))
        assert arrived_alone(catcher, [sent[a.id, a.ip], sent[c.id, c.ip]], [sent[a.id, b.ip], sent[c.id, b.ip]])
    finally:
        catcher.stop()
        a.pairs, c.security = [], True
        rig.converge()


def test_conntrack_zones_keep_overlapping_networks_apart(rig: Rig) -> None:
    """d and e, on another network, have a's and b's addresses. e answering "as b" to d must not pass d's filter
    as the reply of a's conversation with b (which it would be in one conntrack zone)."""
    a, b, _c = rig_ports(rig)
    twin = Net(str(uuid.uuid4()), a.net.v4, a.net.v6)
    rig.nets.append(twin)
    d, e = rig.port(twin, "d", 10), rig.port(twin, "e", 11)
    rig.group("egress-only", rule("egress"), rule("egress", "IPv6"))
    d.groups, e.groups = ["egress-only"], ["open"]
    try:
        rig.converge()
        server = Responder.start(b.ns, "B", udp=(5600,))
        with netns.entered(a.ns):
            client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with netns.entered(d.ns):
            victim = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with netns.entered(e.ns):
            attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            client.settimeout(3)
            client.bind((a.ip, 40000))
            client.sendto(b"?", (b.ip, 5600))
            assert client.recv(100).startswith(b"B ")  # a's conversation is established
            victim.settimeout(BLOCKED)
            victim.bind((d.ip, 40000))
            attacker.bind((e.ip, 5600))
            attacker.sendto(b"as if from b", (d.ip, 40000))
            with pytest.raises(TimeoutError):
                victim.recv(100)
        finally:
            for s in (client, victim, attacker):
                s.close()
            server.stop()
    finally:
        for p in (d, e):
            del rig.ports[p.id]
        rig.nets.remove(twin)
        rig.converge()


def test_a_device_the_firewall_does_not_know_passes_nothing(rig: Rig) -> None:
    """A host end named like an instance port's but not (or not yet) known to the firewall: nothing passes."""
    _a, b, _c = rig_ports(rig)
    stranger = f"cntest-x-{rig.suffix}"
    netns.ensure(stranger)
    rig.namespaces.append(stranger)
    tap = names.tap(str(uuid.uuid4()))
    bridge = names.bridge(b.net.id)
    subprocess.run(["ip", "-n", rig.host_ns, "link", "add", tap, "type", "veth", "peer", "name", "eth0", "netns",
                    stranger], check=True)  # fmt: skip
    try:
        subprocess.run(["ip", "-n", rig.host_ns, "link", "set", tap, "master", bridge, "up"], check=True)
        ns_run(stranger, "ip", "addr", "add", "10.82.0.50/24", "dev", "eth0", check=True)
        ns_run(stranger, "ip", "link", "set", "eth0", "up", check=True)
        assert not ping(stranger, b.ip, wait=BLOCKED)
        assert ping(rig_ports(rig)[0].ns, b.ip)  # the known ones pass
    finally:
        subprocess.run(["ip", "-n", rig.host_ns, "link", "del", tap], capture_output=True)


def test_one_bad_port_or_group_fails_alone(rig: Rig) -> None:
    a, b, _c = rig_ports(rig)
    bad_port = rig.port(a.net, "f", 20, groups=["open"])
    bad_port.pairs = [{"ip_address": "10.82.0.300", "mac_address": bad_port.mac}]
    rig.group("broken", rule("ingress", protocol=6, lo=22), {**rule("ingress"), "protocol": 300})
    b.groups = ["open", "broken"]
    try:
        reports = rig.apply()
        assert reports[bad_port.id].status == "ERROR" and "10.82.0.300" in reports[bad_port.id].vif_details["reason"]
        assert reports[b.id].status == "ERROR" and "security group broken" in reports[b.id].vif_details["reason"]
        assert reports[a.id].status == "ACTIVE"
        assert not ping(bad_port.ns, a.ip, wait=BLOCKED)  # never plugged: nothing to ping with
        assert ping(a.ns, b.ip)  # b keeps what it had
        failed = {f["object"] for f in rig.dp.failures()}
        assert {f"firewall:{bad_port.id}", "security-group:broken"} <= failed
        bad_port.pairs = []
        b.groups = ["open"]
        rig.converge()
        assert ping(bad_port.ns, a.ip)
    finally:
        del rig.ports[bad_port.id]
        b.groups = ["open"]
        rig.converge()


def test_tables_changed_behind_the_agents_back_are_reported_and_written_again(rig: Rig, caught: frames.Catcher) -> None:
    """A table deleted, anti-spoofing flushed, an address's element deleted: a check finds each (the pass is a full
    one: its whole state is compared, not only what it changed) and rewrites the tables."""
    a, b, _c = rig_ports(rig)
    element = f'{{ "{a.tap}" . {a.mac} . {a.ip} }}'
    for change, found in (
        (("delete", "table", "bridge", "cloudnet"), "table bridge cloudnet: missing"),
        (("flush", "chain", "bridge", "cloudnet", "prerouting"), "prerouting"),
        (("delete", "element", "bridge", "cloudnet", "src4", element), "missing element(s) in src4"),
    ):
        assert rig.nft(*change).returncode == 0
        rig.converge(full=True, check=True)  # a full pass checks what the kernel holds
        differences = rig.dp.differences()
        assert [d["object"] for d in differences] == ["firewall"] and found in differences[0]["difference"], change
        spoofed, own = marker(), marker()
        frames.send(a.ns, udp_frame(a.mac, b, "10.82.0.98", spoofed))
        frames.send(a.ns, udp_frame(a.mac, b, a.ip, own))
        assert arrived_alone(caught, [own], [spoofed]), change
    assert rig.nft("delete", "table", "inet", "cloudnet").returncode == 0
    rig.groups["open"]["rules"].append(rule("ingress", protocol=6, lo=9))  # an incremental pass, refused: rewritten
    try:
        rig.converge()
        assert "e_remote" in rig.nft("list", "table", "inet", "cloudnet").stdout
    finally:
        rig.groups["open"]["rules"].pop()
        rig.converge()


def test_gone_ports_leave_nothing_behind(rig: Rig) -> None:
    a = rig_ports(rig)[0]
    gone = rig.port(a.net, "g", 30, groups=["open"])
    rig.converge()
    chain = f"e_{uuid.UUID(gone.id).hex}"
    assert rig.nft("list", "chain", "inet", "cloudnet", chain).returncode == 0
    del rig.ports[gone.id]
    rig.converge()
    assert rig.nft("list", "chain", "inet", "cloudnet", chain).returncode != 0
    assert gone.tap not in rig.nft("list", "table", "bridge", "cloudnet").stdout


def test_a_parked_pool_device_gets_its_ports_policy() -> None:
    rig = Rig(park=True)
    try:
        net = rig.network(83)
        b = rig.port(net, "b", 11, groups=["open"])
        rig.group("open", rule("egress"), rule("ingress"))
        rig.group("closed", rule("egress"))
        pooled = Port(str(uuid.uuid4()), net, "fa:16:3e:99:00:01", "10.83.0.50", "fd00:83::50", "", "", ["closed"])
        rig.pool[pooled.id] = pooled
        reports = rig.converge()
        parked = reports[pooled.id].vif_details["prepared_netns"]
        assert reports[pooled.id].vif_details["port_filter"] is True
        assert not ping(b.ns, pooled.ip, wait=BLOCKED)
        assert ping(parked, b.ip)  # its egress is open, and the reply comes back
        pooled.groups = ["open"]
        rig.converge()
        assert ping(b.ns, pooled.ip)
        rig.namespaces.append(parked)
    finally:
        rig.close()


def test_a_part_the_kernel_refuses_fails_alone(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever made it (a bug), a port's part the kernel refuses is found by checking each part alone: that port
    fails, with the kernel's reason, and every other part is applied in one transaction."""
    a, b, _c = rig_ports(rig)
    refused = rig.port(a.net, "k", 40, groups=["open"])
    real = fw_render.port_part

    def port_part(port: security.PortPolicy, tap: str, ident: str, number: int, stateful: bool,
                  groups: list[int]) -> fw_render.Part:  # fmt: skip
        made = real(port, tap, ident, number, stateful, groups)
        if port.id != refused.id:
            return made
        return fw_render.Part(made.chains, made.elements | {("inet", "ingress_ports", f"{number} : jump nowhere")})

    monkeypatch.setattr(fw_render, "port_part", port_part)
    newcomer = rig.port(a.net, "n", 41, groups=["open"])  # applied in the same pass
    try:
        reports = rig.apply()
        assert reports[refused.id].status == "ERROR" and reports[newcomer.id].status == "ACTIVE"
        assert f"firewall:{refused.id}" in {f["object"] for f in rig.dp.failures()}
        assert ping(newcomer.ns, b.ip) and ping(a.ns, b.ip)
        assert not ping(refused.ns, b.ip, wait=BLOCKED)
    finally:
        monkeypatch.undo()
        for p in (refused, newcomer):
            del rig.ports[p.id]
        rig.converge()

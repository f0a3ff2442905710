"""Security group rules enforced by the Linux dataplane, with real traffic between instance namespaces (root).

The driver is handed desired states built here in the contract's shape (tests/support/sg_rig.py); every change is
an incremental pass, as the agent makes on an event. A blocked attempt is given a short time to get through (a
same-host connection that is let through completes in milliseconds).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import conntrack, names
from cloudnet.dataplane.linux.driver import LinuxDataplane
from tests.support.cloud import ping
from tests.support.netserve import Responder, tcp_ask, udp_ask
from tests.support.sg_rig import Net, Port, Rig, rule

BLOCKED = 0.6  # seconds a blocked attempt is given


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    r = Rig()
    net = r.network(81)
    for label, host_part in (("a", 10), ("b", 11), ("c", 12)):
        r.port(net, label, host_part)
    r.group("out", rule("egress"), rule("egress", "IPv6"))
    r.converge(full=True)
    try:
        yield r
    finally:
        r.close()


def ports(rig: Rig) -> tuple[Port, Port, Port]:
    a, b, c = rig.ports.values()
    return a, b, c


def test_rules_allow_and_block_tcp_udp_and_icmp_for_ipv4_and_ipv6(rig: Rig) -> None:
    a, b, _c = ports(rig)
    web = rig.group("web", rule("ingress", protocol=6, lo=8080), rule("ingress", "IPv6", 6, 8080),
                    rule("ingress", protocol=17, lo=5353), rule("ingress", protocol=1, lo=8),
                    rule("ingress", "IPv6", 58, 128))  # fmt: skip
    a.groups, b.groups = ["out"], ["out", web]
    reports = rig.converge()
    assert reports[b.id].vif_details["port_filter"] is True
    servers = [Responder.start(b.ns, "B", tcp=(8080, 8081), udp=(5353, 5354)),
               Responder.start(b.ns, "B6", tcp=(8080, 8081), udp=(5355,), v6=True),
               Responder.start(a.ns, "A", tcp=(8080,))]  # fmt: skip
    try:
        assert tcp_ask(a.ns, b.ip, 8080).startswith("B ")
        assert tcp_ask(a.ns, b.ip, 8081, BLOCKED) == ""
        assert udp_ask(a.ns, b.ip, 5353).startswith("B ")
        assert udp_ask(a.ns, b.ip, 5354, BLOCKED) == ""
        assert ping(a.ns, b.ip) and ping(a.ns, b.ip6)
        assert tcp_ask(a.ns, b.ip6, 8080).startswith("B6 ")
        assert tcp_ask(a.ns, b.ip6, 8081, BLOCKED) == ""
        assert udp_ask(a.ns, b.ip6, 5355, BLOCKED) == ""  # no udp rule for IPv6
        assert tcp_ask(b.ns, a.ip, 8080, BLOCKED) == ""  # a lets nothing in
        rig.groups[web]["rules"] = [r for r in rig.groups[web]["rules"] if r["protocol"] not in (1, 58)]
        rig.converge()
        assert not ping(a.ns, b.ip, wait=BLOCKED) and not ping(a.ns, b.ip6, wait=BLOCKED)
        assert tcp_ask(a.ns, b.ip, 8080).startswith("B ")
    finally:
        for s in servers:
            s.stop()


def test_replies_to_allowed_egress_pass_and_egress_rules_restrict(rig: Rig) -> None:
    a, b, _c = ports(rig)
    dns_out = rig.group("dns-out", rule("egress", protocol=17, lo=53))
    rig.group("all-in", rule("ingress"), rule("ingress", "IPv6"))
    a.groups, b.groups = [dns_out], ["all-in"]
    rig.converge()
    server = Responder.start(b.ns, "B", tcp=(8090,), udp=(53,))
    try:
        assert udp_ask(a.ns, b.ip, 53).startswith("B ")  # the reply comes in: a has no ingress rule
        assert tcp_ask(a.ns, b.ip, 8090, BLOCKED) == ""
        assert not ping(a.ns, b.ip, wait=BLOCKED)
        assert not ping(a.ns, b.ip6, wait=BLOCKED)  # (neighbour discovery passes, the echo does not)
    finally:
        server.stop()


def test_remote_group_follows_membership(rig: Rig) -> None:
    a, b, c = ports(rig)
    friends = rig.group("friends", rule("ingress", protocol=6, lo=7000, group="friends"),
                        rule("ingress", "IPv6", 6, 7000, group="friends"))  # fmt: skip
    a.groups, b.groups, c.groups = ["out"], ["out", friends], ["out"]
    rig.members(friends, b)
    rig.converge()
    server = Responder.start(b.ns, "B", tcp=(7000,))
    server6 = Responder.start(b.ns, "B6", tcp=(7000,), v6=True)
    try:
        assert tcp_ask(a.ns, b.ip, 7000, BLOCKED) == ""
        rig.members(friends, a, b)  # a joins (on another host it would be just the same: an address in the set)
        rig.converge()
        assert tcp_ask(a.ns, b.ip, 7000).startswith("B ") and tcp_ask(a.ns, b.ip6, 7000).startswith("B6 ")
        assert tcp_ask(c.ns, b.ip, 7000, BLOCKED) == ""
        rig.members(friends, b)  # and leaves
        rig.converge()
        assert tcp_ask(a.ns, b.ip, 7000, BLOCKED) == "" and tcp_ask(a.ns, b.ip6, 7000, BLOCKED) == ""
    finally:
        server.stop()
        server6.stop()


class Echo:
    """A TCP echo server in a namespace, for connections that stay open."""

    def __init__(self, ns: str, port: int) -> None:
        with netns.entered(ns):
            self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", port))
        self.sock.listen(4)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _peer = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # (reset when the test is done with it)
            while data := conn.recv(100):
                conn.sendall(data)

    def close(self) -> None:
        self.sock.close()


def _round_trip(conn: socket.socket, data: bytes, timeout: float) -> bool:
    conn.settimeout(timeout)
    try:
        conn.sendall(data)
        return conn.recv(100) == data
    except OSError:
        return False


def test_removing_a_rule_cuts_an_open_connection(rig: Rig) -> None:
    a, b, _c = ports(rig)
    ssh = rig.group("ssh", rule("ingress", protocol=6, lo=7100))
    a.groups, b.groups = ["out"], ["out", ssh]
    rig.converge()
    echo = Echo(b.ns, 7100)
    with netns.entered(a.ns):
        conn = socket.socket()
    try:
        conn.settimeout(3)
        conn.connect((b.ip, 7100))
        assert _round_trip(conn, b"one", 3)
        kept = rig.groups[ssh]["rules"][0]
        rig.groups[ssh]["rules"].append(rule("ingress", protocol=6, lo=7101))  # only adds: nothing is cut
        rig.converge()
        assert _round_trip(conn, b"two", 3)
        rig.groups[ssh]["rules"] = [kept]  # takes away: b's connections are judged again, this one still passes
        rig.converge()
        assert _round_trip(conn, b"three", 3)
        rig.groups[ssh]["rules"] = [rule("ingress", protocol=6, lo=7101)]  # the rule of this connection goes
        rig.converge()
        assert not _round_trip(conn, b"four", BLOCKED)
        assert tcp_ask(a.ns, b.ip, 7100, BLOCKED) == ""
    finally:
        conn.close()
        echo.close()


def test_ports_of_a_new_network_inherit_no_connection_of_a_gone_one(rig: Rig) -> None:
    """A network and its ports go and, in the same pass, another project's network comes, its ports with the same
    addresses (here in the same namespaces, so that the old conversation's sockets can speak on). Neither the gone
    network's conntrack zone nor its entries may make that conversation an established one of the new ports: x lets
    nothing in, only conntrack could."""
    gone = Net(str(uuid.uuid4()), "10.86.0.", "fd00:86::")
    rig.nets.append(gone)
    p, q = rig.port(gone, "p", 10), rig.port(gone, "q", 11)
    rig.group("udp-in", rule("ingress", protocol=17, lo=7160))
    p.groups, q.groups = ["udp-in"], ["out"]
    rig.converge()
    with netns.entered(p.ns):
        server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with netns.entered(q.ns):
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    new = Net(str(uuid.uuid4()), gone.v4, gone.v6)
    x = Port(str(uuid.uuid4()), new, p.mac, p.ip, p.ip6, p.ns, str(uuid.uuid4()), ["out"])
    y = Port(str(uuid.uuid4()), new, q.mac, q.ip, q.ip6, q.ns, str(uuid.uuid4()), ["out"])
    try:
        server.settimeout(3)
        client.settimeout(3)
        server.bind(("0.0.0.0", 7160))
        client.bind(("0.0.0.0", 40000))
        client.sendto(b"hello", (p.ip, 7160))
        _data, peer = server.recvfrom(100)
        server.sendto(b"welcome", peer)
        assert client.recv(100) == b"welcome"  # established, in the gone network's zone
        rig.nets.remove(gone)
        del rig.ports[p.id], rig.ports[q.id]
        rig.nets.append(new)
        rig.ports.update({x.id: x, y.id: y})
        rig.converge()
        client.sendto(b"as before", (x.ip, 7160))
        server.settimeout(BLOCKED)
        with pytest.raises(TimeoutError):
            server.recvfrom(100)
    finally:
        server.close()
        client.close()
        for port in (p, q, x, y):
            rig.ports.pop(port.id, None)
        rig.nets = [n for n in rig.nets if n not in (gone, new)]
        rig.converge()


def test_judging_connections_that_fails_fails_alone(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections judged again past their time (a zone too large): that zone's step fails, reported and retried,
    while every port's filter, in place, stays enforced."""
    a, b, _c = ports(rig)
    ssh = rig.group("ssh", rule("ingress", protocol=6, lo=7170), rule("ingress", protocol=6, lo=7171))
    a.groups, b.groups = ["out"], ["out", ssh]
    rig.converge()

    def too_slow(*_args: object) -> int:
        raise conntrack.OutOfTime("conntrack zone: not judged whole in time")

    monkeypatch.setattr(conntrack, "sweep", too_slow)
    rig.groups[ssh]["rules"].pop()  # b loses a rule: its zone's connections are to be judged again
    reports = rig.converge()
    assert all(r.vif_details["port_filter"] for r in reports.values())
    failed = [f for f in rig.dp.failures() if f["object"].startswith("conntrack-zone:")]
    assert failed and "not judged whole in time" in failed[0]["reason"]
    monkeypatch.undo()
    deadline = time.monotonic() + 5
    while any(f["object"].startswith("conntrack-zone:") for f in rig.dp.failures()):  # (retried after its backoff)
        assert time.monotonic() < deadline, rig.dp.failures()
        rig.converge()


def test_a_stateless_group_needs_rules_in_both_directions(rig: Rig) -> None:
    a, b, _c = ports(rig)
    plain = rig.group("plain", rule("ingress", protocol=6, lo=7200), stateful=False)
    a.groups, b.groups = ["out"], [plain]
    rig.converge()
    server = Responder.start(b.ns, "B", tcp=(7200,))
    try:
        assert tcp_ask(a.ns, b.ip, 7200, BLOCKED) == ""  # b's answer needs a rule of its own
        rig.groups[plain]["rules"].append(rule("egress", protocol=6))
        rig.converge()
        assert tcp_ask(a.ns, b.ip, 7200).startswith("B ")  # (a, stateful, takes it as a reply)
    finally:
        server.stop()


def test_a_port_without_groups_passes_only_what_an_instance_needs(rig: Rig) -> None:
    a, b, c = ports(rig)
    rig.group("all-in", rule("ingress"), rule("ingress", "IPv6"))
    a.groups, b.groups, c.groups = ["out"], ["out", "all-in"], []
    rig.converge()
    metadata = Responder.start(names.metadata_ns(rig.host, c.net.id), "META", tcp=(80,))
    server = Responder.start(b.ns, "B", tcp=(7300,))
    c_server = Responder.start(c.ns, "C", tcp=(7300,))
    try:
        assert tcp_ask(c.ns, "169.254.169.254", 80).startswith(f"META {c.ip} ")
        assert tcp_ask(c.ns, b.ip, 7300, BLOCKED) == "" and not ping(c.ns, b.ip, wait=BLOCKED)
        assert tcp_ask(a.ns, c.ip, 7300, BLOCKED) == ""
        assert tcp_ask(a.ns, b.ip, 7300).startswith("B ")  # (the others are not affected)
    finally:
        for s in (metadata, server, c_server):
            s.stop()


def test_port_security_off_filters_nothing_for_that_port(rig: Rig) -> None:
    a, b, c = ports(rig)
    a.groups, b.groups = ["out"], ["out"]
    c.security = False
    try:
        reports = rig.converge()
        assert reports[c.id].vif_details["port_filter"] is False
        server = Responder.start(c.ns, "C", tcp=(7400,))
        b_server = Responder.start(b.ns, "B", tcp=(7400,))
        try:
            assert tcp_ask(a.ns, c.ip, 7400).startswith("C ")  # no rule needed to reach c
            assert tcp_ask(a.ns, b.ip, 7400, BLOCKED) == ""  # while b still filters
        finally:
            server.stop()
            b_server.stop()
    finally:
        c.security = True
        rig.converge()


def test_a_state_without_groups_filters_every_port_as_one_without_groups(rig: Rig) -> None:
    """A desired state lacking `security_groups` (the control plane always sends it) leaves no port unfiltered."""
    a, b, _c = ports(rig)
    a.groups, b.groups = ["out"], ["out"]
    state = rig.state()
    del state["security_groups"]
    server = Responder.start(b.ns, "B", tcp=(7350,))
    try:
        reports = {r.port_id: r for r in rig.dp.apply(state, full=False)}
        assert all(r.vif_details["port_filter"] is True for r in reports.values()), reports
        assert tcp_ask(a.ns, b.ip, 7350, BLOCKED) == ""
    finally:
        server.stop()
        rig.converge()


def test_a_restarted_agent_keeps_open_connections_and_their_zones(rig: Rig) -> None:
    """A new driver (an agent restart) rewrites the tables whole but keeps each network's conntrack zone: the
    server's side of an open connection can still speak first (a has no ingress rule: only conntrack lets it in).
    The other network, added later, sorts first: numbered afresh it would take the connection's zone."""
    a, b, _c = ports(rig)
    earlier = Net("00000000-0000-4000-8000-" + uuid.uuid4().hex[:12], "10.85.0.", "fd00:85::")
    rig.nets.append(earlier)
    ssh = rig.group("ssh", rule("ingress", protocol=6, lo=7150))
    a.groups, b.groups = ["out"], ["out", ssh]
    rig.converge()
    zones = rig.nft("list", "map", "inet", "cloudnet", "zones").stdout
    with netns.entered(b.ns):
        listener = socket.socket()
    with netns.entered(a.ns):
        client = socket.socket()
    try:
        listener.bind((b.ip, 7150))
        listener.listen(1)
        client.settimeout(3)
        client.connect((b.ip, 7150))
        server, _peer = listener.accept()
        server.sendall(b"before")
        assert client.recv(100) == b"before"
        rig.dp.close()
        rig.dp = LinuxDataplane(rig.host)
        rig.converge(full=True)
        assert rig.nft("list", "map", "inet", "cloudnet", "zones").stdout == zones
        server.sendall(b"after")
        assert client.recv(100) == b"after"
        server.close()
    finally:
        client.close()
        listener.close()
        rig.nets.remove(earlier)
        rig.converge()

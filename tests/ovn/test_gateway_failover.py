"""Gateway failover on OVN, with hosts joined from the command line (gateway_rig.py): host A (`cloudnet up`, no
uplink) holds two instances behind a router whose external network is on physnet1; hosts B and C (`cloudnet agent
--uplink ...`) are its gateway chassis, B first. The first instance's SNAT, a forward to it (a load balancer VIP) and
a floating IP of the second (a dnat_and_snat NAT row) go through B; when B's ovs-vswitchd and ovn-controller are
killed -9, or B is cut off its underlay, OVN's BFD between the chassis lets C claim the gateway port and all three
resume through C; when B is back it takes the port back (OVN's priorities preempt), once when restarted, after at
most a short burst of claims from both while BFD comes up when reconnected. A second router on physnet2 whose only
instance is on C cannot fail over (C sees no BFD session up to another chassis of that router's and claims nothing:
OVN's guard against two active gateways), and GET /v2.0/routers/{id}/gateway_chassis says so beforehand.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from cloudnet.dataplane.kernel import netns
from tests.ovn.gateway_rig import (
    Edge,
    Gateways,
    allow_tcp,
    edge,
    gateway_hosts,
    holder,
    kill_chassis,
    restart_host,
    snat_out,
)
from tests.ovn.test_join import OUT, Hosts, _active, host_of, ns_of
from tests.support.netserve import Responder, tcp_ask
from tests.support.ovn import UNDERLAY_PORT

# A chassis back (reconnected with its ovn-controller running: seen; restarted: possible) claims as soon as its own
# BFD sessions are up, the holder yields once its session to it is: until both see it, both claim (SB shows the
# port change hands a few times).
BFD_SETTLE = 5.0  # (seen: one such burst in about ten runs; a loaded machine may stretch it)
LISTEN = "192.0.2.50"  # the forward's address (on the external network, outside the allocation pool)


@dataclass
class Fleet:
    g: Gateways
    one: Edge  # its instance on A: A's BFD sessions let a gateway chassis claim when the other dies
    two: Edge  # on physnet2, its instance on C, a gateway chassis: nothing but its two gateways holds its ports
    responders: list[Responder] = field(default_factory=list)
    floating_ip: str = ""  # on a second instance behind the first router


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    with gateway_hosts() as g:
        h = g.h
        f = Fleet(g, edge(h, host_of(h, "a"), "physnet1", 1), edge(h, host_of(h, "c"), "physnet2", 2))
        allow_tcp(h, 8080)
        inst = f.one.inst
        address = inst["nets"][0]["fixed_ips"][0]["ip_address"]
        r = h.api("POST", f"/networks/{inst['nets'][0]['network_id']}/forwards", {"listen_address": LISTEN, "ports": [
            {"protocol": "tcp", "listen_port": "8080", "target_address": address}]})  # fmt: skip
        assert r.status_code == 201, r.text
        # A floating IP (a dnat_and_snat NAT row, not a load balancer) on a second instance beside it (the first's
        # SNAT goes out from the router's address).
        netns.create(ns_of(h, "i3"))
        beside = h.create("instances", "instance", {"name": "i3", "host": host_of(h, "a"), "netns": ns_of(h, "i3"),
                                                    "nets": [{"network": inst["nets"][0]["network_id"]}]})  # fmt: skip
        h.until("the second instance ACTIVE", lambda: _active(h, beside["id"]))
        fip = h.create("floatingips", "floatingip", {"floating_network_id": f.one.gateway_port["network_id"],
                                                     "port_id": beside["nets"][0]["port_id"]})  # fmt: skip
        f.floating_ip = fip["floating_ip_address"]
        f.responders = [Responder.start(h.outside, "OUT", udp=(53,)), Responder.start(inst["netns"], "I", tcp=(8080,)),
                        Responder.start(ns_of(h, "i3"), "F", tcp=(8080,))]  # fmt: skip
        try:
            yield f
        finally:
            for responder in f.responders:
                responder.stop()


def forwarded(f: Fleet) -> bool:
    """The forward and the floating IP answer from outside."""
    out = f.g.h.outside
    return tcp_ask(out, LISTEN, 8080, 1) == f"I {OUT} 8080" and tcp_ask(out, f.floating_ip, 8080, 1) == f"F {OUT} 8080"


def through(f: Fleet, letter: str) -> bool:
    """The first router's SNAT, forward and floating IP all work, through host `letter`'s uplink."""
    return snat_out(f.g.h, f.one) == f"o-up{letter}" and forwarded(f)


Moves = list[tuple[float, str | None]]


def moves(f: Fleet, until: Callable[[], bool], timeout: float = 60.0, settle: float = 0.0) -> Moves:
    """The first router's gateway port's holders in SB, in order, each with when it took the port (seconds from the
    call), sampled until `until()` holds and for `settle` seconds more."""
    start = time.monotonic()
    seen: Moves = [(0.0, holder(f.g.h, f.one))]
    calm: float | None = None
    while calm is None or time.monotonic() < calm:
        now = holder(f.g.h, f.one)
        if now != seen[-1][1]:
            seen.append((round(time.monotonic() - start, 2), now))
        if calm is None and until():
            calm = time.monotonic() + settle
        assert time.monotonic() < start + timeout, f"timed out; holders so far {seen}; {f.g.h.logs()}"
    return seen


def held(seen: Moves) -> list[str]:
    """The holders in turn, without the moments between: SB shows the port unbound while it moves, and also for a
    moment when a chassis that was cut off reconnects (its ovn-controller writes the release it decided while cut
    off; the holder, whose flows follow its own BFD view and not that column, claims it again at once)."""
    out: list[str] = []
    for _at, name in seen:
        if name is not None and (not out or out[-1] != name):
            out.append(name)
    return out


def back_once(seen: Moves, first: str, back: str) -> None:
    """The port went back from `first` to `back` and stayed (moves' settle window): at most one back-and-forth
    burst while the chassis' BFD sessions come up, over within BFD_SETTLE seconds of `back`'s first claim."""
    names = held(seen)
    # (`first` may already have given way when sampling starts: seen once on a loaded machine, the port back at
    # `back` the moment the link came up; what must hold is where it ends, and how soon it settles)
    assert names[-1] == back and set(names) <= {first, back}, seen
    claimed = next(at for at, name in seen if name == back)
    assert seen[-1][0] - claimed <= BFD_SETTLE, seen


def gateway_view(h: Hosts, e: Edge) -> dict[str, Any]:
    r = h.api("GET", f"/routers/{e.router['id']}/gateway_chassis")
    assert r.status_code == 200, r.text
    return dict(r.json()["gateway_chassis"])


def test_snat_and_a_forward_move_to_the_other_gateway_when_the_active_one_dies_and_move_back_once(
    fleet: Fleet,
) -> None:
    f, h = fleet, fleet.g.h
    a, b, c = (host_of(h, letter) for letter in "abc")
    one, two = gateway_view(h, f.one), gateway_view(h, f.two)
    assert [g["host"] for g in one["chassis"]] == [b, c] == [g["host"] for g in two["chassis"]]
    assert (one["failover"], one["reference_chassis"]) == (True, [a])
    # The second router's ports are all on its gateway chassis: the API says it cannot fail over.
    assert (two["failover"], two["reference_chassis"]) == (False, [])
    assert "are the only chassis holding ports of the networks it joins" in two["reason"]
    h.until("SNAT and the forward through B", lambda: through(f, "b") and snat_out(h, f.two) == "o-upb2")
    assert holder(h, f.one) == b == holder(h, f.two)

    kill_chassis(h, "b")
    seen = moves(f, lambda: through(f, "c"))
    assert seen[-1][1] == c, seen
    # As said: C, which holds the second router's only port, has no BFD session up to another chassis of that
    # router, so it does not claim its gateway port (C decided both ports in the pass that claimed the first).
    assert holder(h, f.two) == b
    assert snat_out(h, f.two) is None

    restart_host(f.g, "b")
    # Back: B (the higher priority) takes the port back once its BFD sessions are up, and keeps it.
    seen = moves(f, lambda: holder(h, f.one) == b and through(f, "b"), settle=3.0)
    back_once(seen, c, b)  # (after a restart, seen in one move every time so far)
    assert through(f, "b")
    h.until("the second router's SNAT through B again", lambda: snat_out(h, f.two) == "o-upb2")


def test_a_gateway_cut_off_its_underlay_hands_over_and_takes_the_port_back_when_reconnected(fleet: Fleet) -> None:
    f, h = fleet, fleet.g.h
    b, c = host_of(h, "b"), host_of(h, "c")
    h.until("SNAT and the forward through B", lambda: holder(h, f.one) == b and through(f, "b"))

    subprocess.run(["ip", "-n", ns_of(h, "b"), "link", "set", UNDERLAY_PORT, "down"], check=True)
    try:
        seen = moves(f, lambda: through(f, "c"))
        assert seen[-1][1] == c, seen
    finally:
        subprocess.run(["ip", "-n", ns_of(h, "b"), "link", "set", UNDERLAY_PORT, "up"], check=True)
    seen = moves(f, lambda: holder(h, f.one) == b and through(f, "b"), settle=3.0)
    back_once(seen, c, b)

"""Gateway failover on OVN, with hosts joined from the command line (join_rig.py): host A (`cloudnet up`, no uplink)
holds an instance behind a router whose external network is on physnet1; hosts B and C (`cloudnet agent --uplink
physnet1:...`) are its gateway chassis, B first. The instance's SNAT and a forward to it go through B; when B's
ovs-vswitchd and ovn-controller are killed -9, or B is cut off its underlay, OVN's BFD between the chassis lets C
claim the gateway port and both resume through C; when B is back it takes the port back, once (OVN's priorities
preempt). A router whose ports are only on its two gateway chassis cannot fail over (the survivor sees no BFD
session up to any chassis of the router's: OVN's guard against a split brain), and cloudnet says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from cloudnet.ovn import daemons
from tests.ovn.join_rig import (
    OUT,
    Hosts,
    gateway_chassis,
    learned_on,
    outside,
    routed_out,
    running_hosts,
    start_agent,
    start_server,
)
from tests.support.netserve import Responder, tcp_ask, udp_ask
from tests.support.ovn import UNDERLAY_PORT

LISTEN = "192.0.2.50"  # the forward's address (on the external network, outside the allocation pool)


@dataclass
class Fleet:
    h: Hosts
    router: dict[str, Any]
    inst: dict[str, Any]
    gateway: str  # the router's address outside
    gateway_port: dict[str, Any]
    responders: list[Responder] = field(default_factory=list)


def uplink_args(letter: str) -> tuple[str, ...]:
    return ("--uplink", f"physnet1:up{letter}")


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    with running_hosts(3) as h:
        outside(h, (h.ns("b"), "upb"), (h.ns("c"), "upc"))
        start_server(h)
        for letter in "bc":
            start_agent(h, letter, uplink_args(letter))
        router, inst, gateway = routed_out(h, h.server_host)
        ports = h.api("GET", f"/ports?device_id={router['id']}&device_owner=network:router_gateway").json()["ports"]
        f = Fleet(h, router, inst, gateway, ports[0])
        group = h.api("GET", "/security-groups?name=default").json()["security_groups"][0]
        h.create("security-group-rules", "security_group_rule", {
            "security_group_id": group["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
            "port_range_min": 8080, "port_range_max": 8080, "remote_ip_prefix": "0.0.0.0/0"})  # fmt: skip
        address = inst["nets"][0]["fixed_ips"][0]["ip_address"]
        r = h.api("POST", f"/networks/{inst['nets'][0]['network_id']}/forwards", {"listen_address": LISTEN, "ports": [
            {"protocol": "tcp", "listen_port": "8080", "target_address": address}]})  # fmt: skip
        assert r.status_code == 201, r.text
        f.responders = [Responder.start(h.outside, "OUT", udp=(53,)), Responder.start(inst["netns"], "I", tcp=(8080,))]
        try:
            yield f
        finally:
            for responder in f.responders:
                responder.stop()


def holder(f: Fleet) -> str | None:
    """The chassis SB says holds the router's gateway port (its chassisredirect binding)."""
    names = {u[1]: n for u, n in f.h.sb("--columns=_uuid,name", "list", "Chassis")["data"]}
    rows = f.h.sb("--columns=chassis", "find", "Port_Binding", f"logical_port=cr-lrp-{f.gateway_port['id']}")["data"]
    ref = rows[0][0] if rows else ["set", []]
    return names.get(ref[1]) if ref[0] == "uuid" else None


def snat_out(f: Fleet) -> str | None:
    """The uplink the instance's SNAT went out of (o-upb, o-upc), None if nothing answered."""
    if udp_ask(f.inst["netns"], OUT, 53, 1) != f"OUT {f.gateway} 53":
        return None
    return learned_on(f.h, f.gateway_port["mac_address"])


def forwarded(f: Fleet) -> bool:
    return tcp_ask(f.h.outside, LISTEN, 8080, 1) == f"I {OUT} 8080"


def through(f: Fleet, letter: str) -> bool:
    """SNAT and the forward both work, through host `letter`'s uplink."""
    return snat_out(f) == f"o-up{letter}" and forwarded(f)


def kill_chassis(h: Hosts, letter: str) -> None:
    """kill -9 the host's ovs-vswitchd and ovn-controller (its agent and ovsdb-server live on)."""
    running = daemons.pids(h.chassis_dir(letter))
    for name in ("ovs-vswitchd", "ovn-controller"):
        os.kill(running[name], signal.SIGKILL)


def moves(f: Fleet, until: Any, timeout: float = 60.0, settle: float = 0.0) -> list[str | None]:
    """The gateway port's holders, in order, sampled until `until()` holds (and for `settle` seconds more)."""
    seen: list[str | None] = [holder(f)]
    deadline, calm = time.monotonic() + timeout, None
    while calm is None or time.monotonic() < calm:
        now = holder(f)
        if now != seen[-1]:
            seen.append(now)
        if calm is None and until():
            calm = time.monotonic() + settle
        assert time.monotonic() < deadline, f"timed out; holders so far {seen}; {f.h.logs()}"
    return seen


def held(seen: list[str | None]) -> list[str]:
    """The holders in turn, without the moments between: SB shows the port unbound while it moves, and also for a
    moment when a chassis that was cut off reconnects (its ovn-controller writes the release it decided while cut
    off; the holder, whose flows follow its own BFD view and not that column, claims it again at once)."""
    out: list[str] = []
    for name in seen:
        if name is not None and (not out or out[-1] != name):
            out.append(name)
    return out


def restart_host(h: Hosts, letter: str) -> None:
    """The host back, as after a reboot: its agent (stuck on an API it cannot reach) killed, what is left of its
    chassis stopped, and its agent started again (which starts the chassis afresh)."""
    agent = h.agents[letter]
    h.procs.remove(agent)
    agent.kill()
    agent.wait()
    bridges = (daemons.INTEGRATION_BRIDGE, daemons.ENCAP_BRIDGE, daemons.provider_bridge("physnet1"))
    daemons.stop(h.chassis_dir(letter), h.ns(letter), bridges)
    start_agent(h, letter, uplink_args(letter))


def test_snat_and_a_forward_move_to_the_other_gateway_when_the_active_one_dies_and_move_back_once(
    fleet: Fleet,
) -> None:
    f, h = fleet, fleet.h
    b, c = h.host("b"), h.host("c")
    assert gateway_chassis(h) == [(2, b), (1, c)]
    h.until("SNAT and the forward through B", lambda: through(f, "b"))
    assert holder(f) == b

    kill_chassis(h, "b")
    seen = moves(f, lambda: through(f, "c"))
    assert seen[-1] == c, seen

    restart_host(h, "b")
    # Back: B (the higher priority) takes the port back once its BFD sessions are up, and keeps it.
    seen = moves(f, lambda: holder(f) == b and through(f, "b"), settle=3.0)
    assert held(seen) == [c, b], seen
    assert through(f, "b")


def test_a_gateway_cut_off_its_underlay_hands_over_and_takes_the_port_back_when_reconnected(fleet: Fleet) -> None:
    f, h = fleet, fleet.h
    b, c = h.host("b"), h.host("c")
    h.until("SNAT and the forward through B", lambda: holder(f) == b and through(f, "b"))

    subprocess.run(["ip", "-n", h.ns("b"), "link", "set", UNDERLAY_PORT, "down"], check=True)
    try:
        seen = moves(f, lambda: through(f, "c"))
        assert seen[-1] == c, seen
    finally:
        subprocess.run(["ip", "-n", h.ns("b"), "link", "set", UNDERLAY_PORT, "up"], check=True)
    seen = moves(f, lambda: holder(f) == b and through(f, "b"), settle=3.0)
    assert held(seen) == [c, b], seen

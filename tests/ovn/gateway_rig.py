"""Gateway chassis on hosts joined from the command line (test_join.py's rig): host A (`cloudnet up`, no uplink),
hosts B and C (`cloudnet agent --uplink PHYSNET:IFACE` on physnet1 and physnet2, all into the outside's bridge); routers
with an instance behind each (Edge); which chassis SB says holds a gateway port, which uplink SNAT went out of, and
a gateway host's chassis killed or the host restarted. Used by test_gateway_failover.py and
bench/gateway_failover.py."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cloudnet.ovn import daemons
from tests.ovn.test_join import (
    Hosts,
    _join,
    _learned_on,
    _outside,
    _routed_out,
    chassis_dir,
    external_network,
    ns_of,
    running_hosts,
    start_agent,
)
from tests.support.netserve import udp_ask

# Each physical network's external network (the outside holds the first address of each).
EXTERNAL = {"physnet1": "192.0.2.0/24", "physnet2": "198.51.100.0/24"}
GATEWAY_HOSTS = "bc"


def uplink(letter: str, physnet: str) -> str:
    """Host `letter`'s uplink on `physnet`: upb, upb2, ... (the outside's end: o-upb, ...)."""
    index = list(EXTERNAL).index(physnet)
    return f"up{letter}{index + 1 if index else ''}"


def uplink_args(letter: str) -> tuple[str, ...]:
    return tuple(arg for physnet in EXTERNAL for arg in ("--uplink", f"{physnet}:{uplink(letter, physnet)}"))


@dataclass
class Gateways:
    h: Hosts
    agents: dict[str, subprocess.Popen[bytes]]  # the gateway hosts' agents
    restarts: int = 0


@contextmanager
def gateway_hosts(extra: dict[str, tuple[str, ...]] | None = None) -> Iterator[Gateways]:
    """Hosts A, B and C up and joined, B and C with uplinks on every physical network of EXTERNAL (`extra`: more
    arguments of each host's command, by letter)."""
    more = extra or {}
    with running_hosts(3) as h:
        _outside(h, *((ns_of(h, letter), uplink(letter, p)) for letter in GATEWAY_HOSTS for p in EXTERNAL))
        for cidr in list(EXTERNAL.values())[1:]:  # (outside() gave the outside the first one's)
            first = f"{ipaddress.ip_network(cidr)[1]}/{ipaddress.ip_network(cidr).prefixlen}"
            subprocess.run(["ip", "-n", h.outside, "addr", "add", first, "dev", "out"], check=True)
        _join(h, up_extra=more.get("a", ()), agent_extra=uplink_args("b") + more.get("b", ()))
        agents = {"b": h.procs[-1]}
        for letter in GATEWAY_HOSTS[1:]:
            agents[letter] = start_agent(h, letter, uplink_args(letter) + more.get(letter, ()))[0]
        yield Gateways(h, agents)


@dataclass
class Edge:
    """A router with its gateway outside, and an instance behind it."""

    router: dict[str, Any]
    inst: dict[str, Any]
    gateway: str  # the router's address outside
    gateway_port: dict[str, Any]
    out: str  # the outside's address on the router's external network


def edge(h: Hosts, host: str, physnet: str, index: int) -> Edge:
    """A router whose external network is on `physnet`, and an instance behind it on `host`."""
    pub = external_network(h, physnet, EXTERNAL[physnet])
    router, inst, gateway = _routed_out(h, host, pub, index)
    ports = h.api("GET", f"/ports?device_id={router['id']}&device_owner=network:router_gateway").json()["ports"]
    return Edge(router, inst, gateway, ports[0], str(ipaddress.ip_network(EXTERNAL[physnet])[1]))


def allow_tcp(h: Hosts, port: int) -> None:
    """The default group lets TCP `port` in from anywhere (a forward's target is behind it)."""
    group = h.api("GET", "/security-groups?name=default").json()["security_groups"][0]
    h.create("security-group-rules", "security_group_rule", {
        "security_group_id": group["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
        "port_range_min": port, "port_range_max": port, "remote_ip_prefix": "0.0.0.0/0"})  # fmt: skip


def sb(h: Hosts, *args: str) -> Any:
    """ovn-sbctl ARGS on A's SB database, its JSON output parsed."""
    ctl = ["ovn-sbctl", f"--db=unix:{h.root / 'a' / 'ovn' / 'ovnsb_db.sock'}", "--timeout=5", "--format=json"]
    return json.loads(daemons.run(h.root / "a" / "ovn", [*ctl, *args]))


def holder(h: Hosts, e: Edge) -> str | None:
    """The chassis SB says holds the router's gateway port (its chassisredirect binding)."""
    names = {u[1]: n for u, n in sb(h, "--columns=_uuid,name", "list", "Chassis")["data"]}
    rows = sb(h, "--columns=chassis", "find", "Port_Binding", f"logical_port=cr-lrp-{e.gateway_port['id']}")["data"]
    ref = rows[0][0] if rows else ["set", []]
    return names.get(ref[1]) if ref[0] == "uuid" else None


def snat_answers(e: Edge, timeout: float = 1.0) -> bool:
    """The instance's UDP to the outside answered, from the router's address (SNAT)."""
    return udp_ask(e.inst["netns"], e.out, 53, timeout) == f"OUT {e.gateway} 53"


def snat_out(h: Hosts, e: Edge) -> str | None:
    """The uplink the instance's SNAT went out of (o-upb, o-upc, ...), None if nothing answered."""
    return _learned_on(h, e.gateway_port["mac_address"]) if snat_answers(e) else None


def kill_chassis(h: Hosts, letter: str) -> None:
    """kill -9 the host's ovs-vswitchd and ovn-controller (its agent and ovsdb-server live on)."""
    running = daemons.pids(chassis_dir(h, letter))
    for name in ("ovs-vswitchd", "ovn-controller"):
        os.kill(running[name], signal.SIGKILL)


def restart_host(g: Gateways, letter: str) -> None:
    """The host back, as after a reboot: its agent (stuck on an API it cannot reach) killed, what is left of its
    chassis stopped, and its agent started again (which starts the chassis afresh)."""
    h, agent = g.h, g.agents[letter]
    h.procs.remove(agent)
    agent.kill()
    agent.wait()
    bridges = (daemons.INTEGRATION_BRIDGE, daemons.ENCAP_BRIDGE, *map(daemons.provider_bridge, EXTERNAL))
    daemons.stop(chassis_dir(h, letter), ns_of(h, letter), bridges)
    g.restarts += 1
    g.agents[letter] = start_agent(h, letter, uplink_args(letter), f"agent-{letter}-{g.restarts}.log")[0]

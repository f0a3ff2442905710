"""A second host joins an OVN cloud from the command line, as an operator does it: on host A `cloudnet up --dataplane
ovn --ovn-listen ADDR --encap-iface ul0 --encap-ip ADDR/24` (API, OVN's databases, A's chassis), on host B `cloudnet
agent --dataplane ovn --ovn-sb tcp:ADDR:6642 --encap-iface ul0 --encap-ip ...` (B's chassis and agent), each a process
in a network namespace of the test's own, linked by an underlay of its own (tests/support/ovn.py). An instance on B
goes ACTIVE, reaches one on A through Geneve, and reads its metadata through B's localport; OVN's databases listen
on the given address only."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator

import pytest

from cloudnet.dataplane.kernel import netns
from cloudnet.ovn import daemons
from tests.ovn.join_rig import (
    AGENT_IP,
    OUT,
    SERVER_IP,
    Hosts,
    active,
    bridge_mappings,
    gateway_chassis,
    join,
    learned_on,
    listening,
    outside,
    routed_out,
    running_hosts,
)
from tests.support.cloud import ns_run, ping
from tests.support.netserve import Responder, udp_ask

METADATA_URL = "http://169.254.169.254/openstack/latest/meta_data.json"


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    with running_hosts() as h:
        yield h


def test_a_second_host_joins_with_cloudnet_agent_and_its_instance_talks_across(hosts: Hosts) -> None:
    h = hosts
    state_a, state_b = join(h)

    # OVN's databases listen on the given address only (plain TCP: never on every address).
    assert listening(h.server_ns, 6641) == [f"{SERVER_IP}:6641"]
    assert listening(h.server_ns, 6642) == [f"{SERVER_IP}:6642"]
    encaps = h.sb("--columns=chassis_name,ip", "list", "Encap")["data"]
    assert sorted(map(tuple, encaps)) == [(h.server_host, SERVER_IP), (h.agent_host, AGENT_IP)]

    net = h.create("networks", "network", {"name": "joined"})
    h.create("subnets", "subnet", {"network_id": net["id"], "cidr": "10.76.0.0/24"})
    insts = []
    for index, host in ((1, h.server_host), (2, h.agent_host)):
        ns = h.ns(f"i{index}")
        netns.create(ns)
        insts.append(h.create("instances", "instance", {"name": f"i{index}", "host": host, "netns": ns,
                                                        "nets": [{"network": net["id"]}]}))  # fmt: skip
    h.until("both instances ACTIVE", lambda: all(active(h, i["id"]) for i in insts))
    a, b = (active(h, i["id"]) or {} for i in insts)
    ip_a, ip_b = (i["nets"][0]["fixed_ips"][0]["ip_address"] for i in (a, b))
    assert ping(b["netns"], ip_a, count=2, wait=2) and ping(a["netns"], ip_b)
    # B's metadata: through B's localport and B's agent's proxy, over the underlay to A's metadata API.
    got = ns_run(b["netns"], "curl", "-sS", "-m", "5", METADATA_URL)
    assert json.loads(got.stdout or "{}").get("uuid") == b["id"], got.stderr

    # SIGTERM: the agent stops its chassis; `up` stops every OVN daemon it started. (Both at once: an agent that
    # is told to stop ends its long poll of the API when the answer comes, and the server's stop makes it come.)
    for proc in reversed(h.procs):
        proc.send_signal(signal.SIGTERM)
    for proc in h.procs:
        assert proc.wait(timeout=30) == 0, h.logs()
    assert daemons.pids(state_b / "ovn-chassis") == {} and daemons.pids(state_a / "ovn") == {}


# -- gateways: hosts with an uplink on the external network's physical network ------------------------------------


def test_an_agent_with_an_uplink_is_the_gateway_and_snat_goes_out_through_it(hosts: Hosts) -> None:
    h = hosts
    outside(h, (h.agent_ns, "upb"))
    join(h, agent_extra=("--uplink", "physnet1:upb"))
    assert bridge_mappings(h, h.agent_host) == "physnet1:br-physnet1"
    # The instance is on A, which has no uplink: its SNAT goes through Geneve to B and out of B's uplink.
    router, inst, gateway = routed_out(h, h.server_host)
    h.until("B the one gateway chassis", lambda: gateway_chassis(h) == [(1, h.agent_host)])
    responder = Responder.start(h.outside, "OUT", udp=(53,))
    try:
        h.until("SNAT out through B", lambda: udp_ask(inst["netns"], OUT, 53, 1) == f"OUT {gateway} 53")
    finally:
        responder.stop()
    gw_port = h.api("GET", f"/ports?device_id={router['id']}&device_owner=network:router_gateway").json()["ports"][0]
    assert learned_on(h, gw_port["mac_address"]) == "o-upb"

"""Issue 29's "done when" fleet (tests/support/fleet.py): three server hosts (NB and SB Raft clusters over SSL, three
API servers on one PostgreSQL) and three chassis hosts joined with tokens, every listener off loopback TLS. Real
traffic (instance to instance across chassis, SNAT out, a forward in, metadata through the localport), then each
fault while ports are created and deleted through the API servers (the client going round them, failing over): the
API writer killed -9, the NB and the SB leaders killed -9, the active gateway chassis' ovs-vswitchd and
ovn-controller killed -9 (SNAT and the forward resume through the other gateway), a chassis cut off its underlay and
back, PostgreSQL restarted. After each: nothing acknowledged lost, NB equal to the store, the traffic back."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from cloudnet.agent.join import Joined
from cloudnet.dataplane.kernel import netns
from cloudnet.northbound.sync import STANDBY
from cloudnet.ovn import cluster, daemons
from cloudnet.pki import tls
from cloudnet.store.db import Store
from tests.ovn.converged import nb_differences
from tests.support.cloud import ns_run, ping
from tests.support.fleet import CHASSIS_HOSTS, GATEWAYS, METADATA_PORT, OUT, FleetRig, fleet_rig, tls_handshake
from tests.support.netserve import Responder, tcp_ask, udp_ask
from tests.support.ovn import UNDERLAY_PORT, learned_on
from tests.support.ovn_cluster import API_PORT, SERVERS
from tests.support.port_churn import PortChurn, churning

pytestmark = pytest.mark.postgres
LISTEN = "192.0.2.50"  # the forward's address (on the external network, outside its allocation pool)
METADATA_URL = "http://169.254.169.254/openstack/latest/meta_data.json"
MORE = 10  # ports acknowledged after a fault before the churn stops


@dataclass
class Fleet:
    rig: FleetRig
    store: Store
    inner: dict[str, Any]  # i1 (chassis 3) and i2 (chassis 2) live there, behind the router
    churn_net: str
    i1: dict[str, Any] = field(default_factory=dict)
    i2: dict[str, Any] = field(default_factory=dict)
    gateway: str = ""  # the router's address outside
    gateway_port: dict[str, Any] = field(default_factory=dict)


def _instance(rig: FleetRig, name: str, chassis: int, network: str) -> dict[str, Any]:
    ns = rig.ns_named(name)
    netns.create(ns)
    return rig.create("instances", "instance", {"name": name, "host": rig.chassis[chassis].host, "netns": ns,
                                                "nets": [{"network": network}]})  # fmt: skip


def _active(rig: FleetRig, instance: dict[str, Any]) -> dict[str, Any] | None:
    got = rig.servers.get(f"/instances/{instance['id']}").json()["instance"]
    assert got["status"] != "ERROR", got
    return dict(got) if got["status"] == "ACTIVE" else None


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    with fleet_rig() as rig:
        pub = rig.create("networks", "network", {"name": "pub", "router:external": True,
                                                 "provider:network_type": "flat",
                                                 "provider:physical_network": "physnet1"})  # fmt: skip
        pool = {"start": "192.0.2.2", "end": "192.0.2.19"}
        rig.create("subnets", "subnet", {"network_id": pub["id"], "cidr": "192.0.2.0/24", "gateway_ip": OUT,
                                         "allocation_pools": [pool]})  # fmt: skip
        inner = rig.create("networks", "network", {"name": "inner"})
        sub = rig.create("subnets", "subnet", {"network_id": inner["id"], "cidr": "10.91.0.0/24"})
        router = rig.create("routers", "router", {"name": "edge", "external_gateway_info": {"network_id": pub["id"]}})
        r = rig.servers.request("PUT", f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
        group = rig.servers.get("/security-groups?name=default").json()["security_groups"][0]
        rig.create("security-group-rules", "security_group_rule", {
            "security_group_id": group["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
            "port_range_min": 8080, "port_range_max": 8080, "remote_ip_prefix": "0.0.0.0/0"})  # fmt: skip
        churn_net = rig.create("networks", "network", {"name": "churn"})
        rig.create("subnets", "subnet", {"network_id": churn_net["id"], "cidr": "10.92.0.0/22"})
        f = Fleet(rig, Store(rig.db_url), inner, churn_net["id"])
        f.i1, f.i2 = _instance(rig, "i1", 3, inner["id"]), _instance(rig, "i2", 2, inner["id"])
        rig.until("both instances ACTIVE", lambda: _active(rig, f.i1) and _active(rig, f.i2), timeout=90)
        f.i1, f.i2 = _active(rig, f.i1) or {}, _active(rig, f.i2) or {}
        address = f.i1["nets"][0]["fixed_ips"][0]["ip_address"]
        r = rig.servers.request("POST", f"/networks/{inner['id']}/forwards", json={"listen_address": LISTEN, "ports": [
            {"protocol": "tcp", "listen_port": "8080", "target_address": address}]})  # fmt: skip
        assert r.status_code == 201, r.text
        router = rig.servers.get(f"/routers/{router['id']}").json()["router"]
        f.gateway = router["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
        ports = rig.servers.get(f"/ports?device_id={router['id']}&device_owner=network:router_gateway").json()
        f.gateway_port = ports["ports"][0]
        responders = [Responder.start(rig.outside, "OUT", udp=(53,)), Responder.start(f.i1["netns"], "I", tcp=(8080,))]
        try:
            yield f
        finally:
            for responder in responders:
                responder.stop()
            f.store.dispose()


# -- what "healthy" means -----------------------------------------------------------------------------------------


def _ip(inst: dict[str, Any]) -> str:
    return str(inst["nets"][0]["fixed_ips"][0]["ip_address"])


def snat_answers(f: Fleet) -> bool:
    return udp_ask(f.i1["netns"], OUT, 53, 1) == f"OUT {f.gateway} 53"


def forward_answers(f: Fleet) -> bool:
    return tcp_ask(f.rig.outside, LISTEN, 8080, 1) == f"I {OUT} 8080"


def metadata_answers(f: Fleet) -> bool:
    got = ns_run(f.i1["netns"], "curl", "-sS", "-m", "3", METADATA_URL)
    return bool(got.stdout) and json.loads(got.stdout).get("uuid") == f.i1["id"]


def nb_in_step(f: Fleet) -> bool:
    return not nb_differences(f.rig, f.store, [])  # (the rig has the sandbox's nbctl: the NB leader's)


def healthy(f: Fleet) -> None:
    """Traffic across chassis, SNAT out, the forward in, metadata through chassis 3's localport, NB == the store, no
    request answered with an unhandled error by any server."""
    rig = f.rig
    rig.until("instance to instance across chassis", lambda: ping(f.i1["netns"], _ip(f.i2)), timeout=60)
    assert ping(f.i2["netns"], _ip(f.i1))
    rig.until("SNAT out", lambda: snat_answers(f), timeout=60)
    rig.until("the forward in", lambda: forward_answers(f), timeout=60)
    rig.until("metadata through the localport", lambda: metadata_answers(f), timeout=60)
    rig.until("NB equal to the store", lambda: nb_in_step(f), timeout=60)
    for index in SERVERS:  # (a 500 to an agent would not fail the churn: it fails over, and tries again)
        assert "unhandled error" not in rig.server_log(index), rig.server_log(index)[-5000:]


def switch_ports(f: Fleet) -> set[str]:
    return set(f.rig.nbctl("--bare", "--columns=name", "list", "Logical_Switch_Port").split())


def nothing_lost(f: Fleet, churn: PortChurn) -> None:
    """Every create the servers acknowledged is there (in the store and NB), every acknowledged delete gone."""
    assert churn.failures == [], churn.failures
    listed = {p["id"] for p in f.rig.servers.get(f"/ports?network_id={f.churn_net}").json()["ports"]}
    assert churn.kept() <= listed and not (churn.deleted & listed), "an acknowledged create or delete was lost"
    f.rig.until("NB equal to the store", lambda: nb_in_step(f), timeout=60)
    ports = switch_ports(f)
    assert churn.kept() <= ports and not (churn.deleted & ports)


def until_more(f: Fleet, churn: PortChurn, what: str, count: int = MORE) -> None:
    before = churn.acknowledged()
    f.rig.until(what, lambda: churn.acknowledged() >= before + count, timeout=60)


# -- the tests, in order, on the one fleet ------------------------------------------------------------------------


def _listeners(ns: str) -> set[str]:
    out = ns_run(ns, "ss", "-Hltn", check=True).stdout
    return {line.split()[3] for line in out.splitlines()}


def _off_loopback(ns: str) -> set[str]:
    return {a for a in _listeners(ns) if not a.rsplit(":", 1)[0].strip("[]").startswith(("127.", "::1"))}


def _plain(ns: str, address: str, port: int) -> bytes:
    """What a plain TCP client asking for OVSDB's databases, then an HTTP page, gets back (b"" if nothing)."""
    with netns.entered(ns):
        s = socket.create_connection((address, port), timeout=5)
    try:
        s.sendall(b'{"method": "list_dbs", "params": [], "id": 0}\nGET / HTTP/1.0\r\n\r\n')
        return s.recv(4096)
    except OSError:
        return b""
    finally:
        s.close()


def test_every_listener_off_loopback_is_tls_and_the_fleet_carries_traffic(fleet: Fleet) -> None:
    rig = fleet.rig
    ca, cert, key, _secret = Joined.files(rig.chassis[1].state)  # (a joined chassis' own certificate)
    context = tls.client_context(ca, cert, key)
    for index in SERVERS:
        address = rig.addresses[index - 1]
        found = _off_loopback(rig.ns(index))
        assert found == {*(f"{address}:{p}" for p in (6641, 6642, 6643, 6644)), f"0.0.0.0:{API_PORT}",
                         f"0.0.0.0:{METADATA_PORT}"}, found  # fmt: skip
        for local in found:  # each one completes a TLS handshake (with the cloud's CA) from another host
            port = int(local.rsplit(":", 1)[1])
            assert tls_handshake(rig.client_ns, address, port, context), local
        for local in found:  # and a plain client gets nothing: no database listed, no HTTP answer
            got = _plain(rig.client_ns, address, int(local.rsplit(":", 1)[1]))
            assert b"OVN_" not in got and not got.startswith(b"HTTP/"), (local, got)
    for ns in (*(c.ns for c in rig.chassis.values()), rig.client_ns):
        assert _off_loopback(ns) == set(), ns
    # The chassis joined with tokens: ovn-controller has every SB member over SSL and the host's own certificate.
    for c in rig.chassis.values():
        vsctl = ["ovs-vsctl", f"--db=unix:{c.rundir / 'db.sock'}"]
        remote = daemons.run(c.rundir, [*vsctl, "get", "Open_vSwitch", ".", "external_ids:ovn-remote"]).strip('"\n')
        assert remote == rig.sb and remote.count("ssl:") == len(SERVERS), remote
        assert "host.crt" in daemons.run(c.rundir, [*vsctl, "get-ssl"])
    healthy(fleet)


def test_the_api_writer_killed_during_churn_hands_nb_over(fleet: Fleet) -> None:
    """Server 1 started first and writes NB; 2 and 3 stand by. Killed -9 mid-churn: another takes the lock."""
    rig = fleet.rig
    rig.until("servers 2 and 3 stand by", lambda: all(STANDBY in rig.server_log(i) for i in (2, 3)))
    assert STANDBY not in rig.server_log(1)
    with churning(rig.servers, fleet.churn_net) as churn:
        until_more(fleet, churn, "ports created before the kill", 5)
        seen = {i: len(rig.server_log(i)) for i in (2, 3)}
        rig.kill_server(1)
        until_more(fleet, churn, "ports created after the kill")
        rig.until("a survivor took NB over (its first pass as the writer: a resync)",
                  lambda: any("northbound resync" in rig.server_log(i)[seen[i]:] for i in (2, 3)))  # fmt: skip
    nothing_lost(fleet, churn)
    before = len(rig.server_log(1))
    rig.start_server(1)
    rig.until("server 1 back, standing by", lambda: STANDBY in rig.server_log(1)[before:], timeout=60)
    rig.until("the clusters whole again", rig.formed)
    healthy(fleet)


def test_the_nb_and_the_sb_leaders_killed_during_churn(fleet: Fleet) -> None:
    rig = fleet.rig
    killed = []
    with churning(rig.servers, fleet.churn_net) as churn:
        for kind in cluster.KINDS:
            until_more(fleet, churn, f"ports created before the {kind} leader's kill", 5)
            leader = rig.until(f"a {kind} leader", lambda k=kind: rig.leader(k), timeout=30)
            rig.kill(leader, kind)
            killed.append((leader, kind))
            until_more(fleet, churn, f"ports created after the {kind} leader's kill")
    nothing_lost(fleet, churn)
    for index, kind in killed:
        rig.restart(index, kind)
    rig.until("the clusters whole again", rig.formed)
    healthy(fleet)


def _holder(f: Fleet) -> int:
    """The chassis host SB says holds the router's gateway port."""
    rig = f.rig
    names = {u[1]: n for u, n in json.loads(rig.sbctl("--format=json", "--columns=_uuid,name", "list",
                                                      "Chassis"))["data"]}  # fmt: skip
    rows = json.loads(rig.sbctl("--format=json", "--columns=chassis", "find", "Port_Binding",
                                f"logical_port=cr-lrp-{f.gateway_port['id']}"))["data"]  # fmt: skip
    ref = rows[0][0] if rows else ["set", []]
    held = names.get(ref[1]) if ref[0] == "uuid" else None
    return next((j for j, c in f.rig.chassis.items() if c.host == held), 0)


def _out_through(f: Fleet, index: int) -> bool:
    """SNAT and the forward answer, the router's gateway seen outside on chassis `index`'s uplink."""
    uplink = f"o-{f.rig.chassis[index].uplink}"
    return snat_answers(f) and forward_answers(f) and learned_on(f.rig.outside, f.gateway_port["mac_address"]) == uplink


def test_the_active_gateway_chassis_killed_during_churn_fails_over(fleet: Fleet) -> None:
    rig = fleet.rig
    active = rig.until("a gateway chassis holds the router's port", lambda: _holder(fleet), timeout=30)
    assert active in GATEWAYS
    other = next(j for j in GATEWAYS if j != active)
    rig.until("SNAT and the forward through the active one", lambda: _out_through(fleet, active), timeout=30)
    with churning(rig.servers, fleet.churn_net) as churn:
        until_more(fleet, churn, "ports created before the kill", 5)
        running = daemons.pids(rig.chassis[active].rundir)
        for name in ("ovs-vswitchd", "ovn-controller"):
            os.kill(running[name], signal.SIGKILL)
        rig.until("SNAT and the forward through the other gateway", lambda: _out_through(fleet, other), timeout=60)
        assert _holder(fleet) == other
        until_more(fleet, churn, "ports created after the kill")
    nothing_lost(fleet, churn)
    rig.restart_chassis(active)
    rig.until("the restarted chassis alive", lambda: rig.host_alive(active), timeout=60)
    healthy(fleet)


def test_a_chassis_cut_off_its_underlay_and_back_during_churn(fleet: Fleet) -> None:
    rig = fleet.rig
    ns = rig.chassis[3].ns  # (i1's host: the far end of every traffic check)
    with churning(rig.servers, fleet.churn_net) as churn:
        until_more(fleet, churn, "ports created before the cut", 5)
        subprocess.run(["ip", "-n", ns, "link", "set", UNDERLAY_PORT, "down"], check=True)
        try:
            rig.until("i1 cut off", lambda: not ping(fleet.i2["netns"], _ip(fleet.i1)), timeout=30)
            until_more(fleet, churn, "ports created while it is cut off")
        finally:
            subprocess.run(["ip", "-n", ns, "link", "set", UNDERLAY_PORT, "up"], check=True)
        until_more(fleet, churn, "ports created after it is back", 5)
    nothing_lost(fleet, churn)
    rig.until("chassis 3's agent alive", lambda: rig.host_alive(3), timeout=60)
    healthy(fleet)


def _postmaster(f: Fleet) -> int:
    return int((f.rig.pg.data / "postmaster.pid").read_text().split()[0])


def test_postgresql_restarted_during_churn(fleet: Fleet) -> None:
    """A crash and a start of PostgreSQL (immediate: no checkpoint): a request while it is away gets 503 (allowed,
    nothing else is), the servers write again by themselves, and nothing they acknowledged is lost."""
    rig = fleet.rig
    with churning(rig.servers, fleet.churn_net, refusable=(503,)) as churn:
        until_more(fleet, churn, "ports created before the restart", 5)
        postmaster = _postmaster(fleet)
        rig.pg.pg_ctl("-m", "immediate", "-l", str(rig.pg.socket_dir / "log"), "restart")
        assert _postmaster(fleet) != postmaster  # (a new server: every connection of the API servers was cut)
        until_more(fleet, churn, "ports created after the restart")
    nothing_lost(fleet, churn)
    rig.until("every agent alive", lambda: all(rig.host_alive(j) for j in CHASSIS_HOSTS), timeout=60)
    healthy(fleet)

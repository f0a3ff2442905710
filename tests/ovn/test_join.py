"""A second host joins an OVN cloud from the command line, as an operator does it: on host A `cloudnet up --dataplane
ovn --ovn-listen ADDR --encap-iface ul0 --encap-ip ADDR/24` (API, OVN's databases, A's chassis), on host B `cloudnet
agent --dataplane ovn --ovn-sb tcp:ADDR:6642 --encap-iface ul0 --encap-ip ...` (B's chassis and agent), each a process
in a network namespace of the test's own, linked by an underlay of its own (tests/support/ovn.py). An instance on B
goes ACTIVE, reaches one on A through Geneve, and reads its metadata through B's localport; OVN's databases listen
on the given address only."""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.dataplane.base import metadata_ns_prefix
from cloudnet.dataplane.kernel import netns
from cloudnet.namespaces import managed_ns_prefix
from cloudnet.ovn import daemons
from tests.support.cloud import ns_run, ping
from tests.support.netserve import Responder, udp_ask
from tests.support.ovn import UNDERLAY, UNDERLAY_PORT, learned_on, outside_bridge, underlay_bridge, underlay_port
from tests.support.process import CLOUDNET

API_PORT, METADATA_PORT = 9696, 8775  # (in the test's own namespaces: nothing else listens there)
SERVER_IP, AGENT_IP = str(UNDERLAY[1]), str(UNDERLAY[2])
METADATA_URL = "http://169.254.169.254/openstack/latest/meta_data.json"


class Hosts:
    """Two hosts (namespaces) on one underlay, each running a cloudnet process."""

    def __init__(self, suffix: str, root: Path) -> None:
        self.suffix, self.root = suffix, root
        self.server_ns, self.agent_ns, self.underlay, self.outside = (f"cn-join-{suffix}-{n}" for n in "abuo")
        self.server_host, self.agent_host = f"ch-join-{suffix}-a", f"ch-join-{suffix}-b"
        self.token = secrets.token_urlsafe(16)
        self.procs: list[subprocess.Popen[bytes]] = []
        # Where A's API answers inside A, and what verifies it (https with the cloud's CA: test_join_tls.py).
        self.api_base = f"http://127.0.0.1:{API_PORT}"
        self.verify: ssl.SSLContext | bool = True

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """A request to host A's API from inside A (the API listens on the underlay, A's loopback included)."""
        with netns.entered(self.server_ns), httpx.Client(timeout=30, verify=self.verify) as client:
            return client.request(method, f"{self.api_base}/v2.0{path}", json=body,
                                  headers={"X-Auth-Token": self.token})  # fmt: skip

    def create(self, collection: str, member: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.api("POST", f"/{collection}", {member: body})
        assert r.status_code == 201, r.text
        return dict(r.json()[member])

    def start(self, ns: str, argv: list[str], log: str, token: bool = True) -> subprocess.Popen[bytes]:
        """`cloudnet ARGV` in namespace `ns`, with the admin token in its environment unless not `token`."""
        out = (self.root / log).open("ab")  # (appended: a restarted process keeps its first run's log)
        env = {**os.environ, "CLOUDNET_TOKEN": self.token}  # (not on the command line, for every user to read)
        if not token:
            del env["CLOUDNET_TOKEN"]
        proc = subprocess.Popen(["ip", "netns", "exec", ns, CLOUDNET, *argv], stdout=out, stderr=subprocess.STDOUT,
                                env=env)  # fmt: skip
        out.close()
        self.procs.append(proc)
        return proc

    def until(self, what: str, check: Callable[[], Any], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            for proc in self.procs:
                assert proc.poll() is None, f"a process exited early ({what}): {self.logs()}"
            assert time.monotonic() < deadline, f"timed out: {what}; {self.logs()}"
            time.sleep(0.1)

    def logs(self) -> str:
        return "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.root.glob("*.log")))


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    with running_hosts() as h:
        yield h


def ns_of(h: Hosts, letter: str) -> str:
    """Host `letter`'s namespace (a: the server's, b: the agent's, c...: more agents; also u, o: the underlay and
    the outside; i1...: instances)."""
    return f"cn-join-{h.suffix}-{letter}"


def host_of(h: Hosts, letter: str) -> str:
    return f"ch-join-{h.suffix}-{letter}"


def chassis_dir(h: Hosts, letter: str) -> Path:
    return h.root / letter / ("ovn" if letter == "a" else "ovn-chassis")


@contextmanager
def running_hosts(count: int = 2) -> Iterator[Hosts]:
    """Hosts a, b, ... (`count` of them) on one underlay; every process and namespace of theirs gone afterwards."""
    root = Path(tempfile.mkdtemp(prefix="cn-join-", dir="/tmp"))  # (short: unix socket paths)
    h = Hosts(uuid.uuid4().hex[:6], root)
    letters = "abcdefgh"[:count]
    try:
        underlay_bridge(h.underlay)
        for index, letter in enumerate(letters, start=1):
            netns.create(ns_of(h, letter))
            subprocess.run(["ip", "-n", ns_of(h, letter), "link", "set", "lo", "up"], check=True)
            underlay_port(h.underlay, ns_of(h, letter), index)
        yield h
    finally:
        # All at once (as the test's own stop does): an agent ends its long poll of the API when the server stops.
        for proc in h.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in h.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for letter in letters:
            daemons.stop(chassis_dir(h, letter), ns_of(h, letter), (daemons.INTEGRATION_BRIDGE, daemons.ENCAP_BRIDGE))
        # Namespaces the processes made inside their own mount namespaces (left behind as plain files here).
        for letter in letters:
            for prefix in (metadata_ns_prefix(host_of(h, letter)), managed_ns_prefix(host_of(h, letter))):
                for name in netns.names(prefix):
                    netns.remove(name)
        for name in netns.names(ns_of(h, "")):  # (the hosts', the underlay, the outside, instances: the run's own)
            netns.remove(name)
        shutil.rmtree(root, ignore_errors=True)


def _alive(h: Hosts, host: str) -> bool:
    try:
        r = h.api("GET", f"/hosts/{host}")
    except httpx.TransportError:  # (the API is not serving yet)
        return False
    return r.status_code == 200 and r.json()["host"]["alive"]


def _active(h: Hosts, instance_id: str) -> dict[str, Any] | None:
    inst = h.api("GET", f"/instances/{instance_id}").json()["instance"]
    assert inst["status"] != "ERROR", inst
    return inst if inst["status"] == "ACTIVE" else None


def _listening(ns: str, port: int) -> list[str]:
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return [line.split()[3] for line in out.splitlines()]


def _join(h: Hosts, up_extra: tuple[str, ...] = (), agent_extra: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """Host A's `cloudnet up` (API, OVN's databases, A's chassis), then host B's `cloudnet agent` joining it; their
    state directories once both agents are alive."""
    state_a = h.root / "a"
    state_a.mkdir(mode=0o700)
    # A non-loopback API needs a tokens file: the remote agent's admin token.
    (state_a / "tokens.json").write_text(json.dumps({"tokens": {h.token: {"project_id": "admin", "role": "admin"}}}))
    h.start(h.server_ns, ["up", "--dataplane", "ovn", "--state-dir", str(state_a), "--agent-host", h.server_host,
                          "--host", "0.0.0.0", "--port", str(API_PORT), "--metadata-listen", f"0.0.0.0:{METADATA_PORT}",
                          "--ovn-listen", SERVER_IP, "--encap-iface", UNDERLAY_PORT,
                          "--encap-ip", f"{SERVER_IP}/{UNDERLAY.prefixlen}", *up_extra], "up.log")  # fmt: skip
    h.until("host A is up, its chassis and OVN's TCP listeners with it", lambda: _listening(h.server_ns, 6642))
    h.until("host A's agent registered", lambda: _alive(h, h.server_host))
    _, state_b = start_agent(h, "b", agent_extra, "agent.log")
    return state_a, state_b


def start_agent(h: Hosts, letter: str, extra: tuple[str, ...] = (), log: str = "") -> tuple[Any, Path]:
    """Host `letter`'s `cloudnet agent` joining A (the letter's underlay address, A's SB and API); (its process, its
    state directory) once the agent is alive."""
    state = h.root / letter
    address = f"{UNDERLAY['abcdefgh'.index(letter) + 1]}/{UNDERLAY.prefixlen}"
    proc = h.start(ns_of(h, letter), [
        "agent", "--dataplane", "ovn", "--ovn-sb", f"tcp:{SERVER_IP}:6642", "--host", host_of(h, letter),
        "--state-dir", str(state), "--server", f"http://{SERVER_IP}:{API_PORT}",
        "--metadata-url", f"http://{SERVER_IP}:{METADATA_PORT}",
        "--metadata-secret-file", str(h.root / "a" / "metadata_secret"),
        "--encap-iface", UNDERLAY_PORT, "--encap-ip", address, *extra], log or f"agent-{letter}.log")  # fmt: skip
    h.until(f"host {letter.upper()}'s agent registered", lambda: _alive(h, host_of(h, letter)))
    return proc, state


def test_a_second_host_joins_with_cloudnet_agent_and_its_instance_talks_across(hosts: Hosts) -> None:
    h = hosts
    state_a, state_b = _join(h)

    # OVN's databases listen on the given address only (plain TCP: never on every address).
    assert _listening(h.server_ns, 6641) == [f"{SERVER_IP}:6641"]
    assert _listening(h.server_ns, 6642) == [f"{SERVER_IP}:6642"]
    sb = ["ovn-sbctl", f"--db=unix:{state_a / 'ovn' / 'ovnsb_db.sock'}", "--timeout=5", "--format=json"]
    encaps = json.loads(daemons.run(state_a / "ovn", [*sb, "--columns=chassis_name,ip", "list", "Encap"]))["data"]
    assert sorted(map(tuple, encaps)) == [(h.server_host, SERVER_IP), (h.agent_host, AGENT_IP)]

    net = h.create("networks", "network", {"name": "joined"})
    h.create("subnets", "subnet", {"network_id": net["id"], "cidr": "10.76.0.0/24"})
    insts = []
    for index, host in ((1, h.server_host), (2, h.agent_host)):
        ns = f"cn-join-{h.suffix}-i{index}"
        netns.create(ns)
        insts.append(h.create("instances", "instance", {"name": f"i{index}", "host": host, "netns": ns,
                                                        "nets": [{"network": net["id"]}]}))  # fmt: skip
    h.until("both instances ACTIVE", lambda: all(_active(h, i["id"]) for i in insts))
    active = [_active(h, i["id"]) or {} for i in insts]
    a, b = active
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

OUT = "192.0.2.1"


def _outside(h: Hosts, *uplinks: tuple[str, str]) -> None:
    """The outside: a namespace whose bridge holds OUT and the far ends of the hosts' uplinks ((namespace, name))."""
    outside_bridge(h.outside, f"{OUT}/24", *uplinks)


def external_network(h: Hosts, physnet: str = "physnet1", cidr: str = "192.0.2.0/24") -> dict[str, Any]:
    """A flat external network on `physnet` (its first address, the outside's, its gateway)."""
    first = ipaddress.ip_network(cidr)[1]
    network = {"name": f"pub-{physnet}", "router:external": True, "provider:network_type": "flat",
               "provider:physical_network": physnet}  # fmt: skip
    pub = h.create("networks", "network", network)
    pool = {"start": str(first + 1), "end": str(first + 18)}
    h.create("subnets", "subnet", {"network_id": pub["id"], "cidr": cidr, "gateway_ip": str(first),
                                   "allocation_pools": [pool]})  # fmt: skip
    return pub


def _routed_out(h: Hosts, host: str, pub: dict[str, Any] | None = None, index: int = 1,
                **router_attrs: Any) -> tuple[dict[str, Any], dict[str, Any], str]:  # fmt: skip
    """A router (with `router_attrs`) with its gateway on the external network (physnet1's, made, unless given) and a
    network behind it (10.7<6+index>.0.0/24), and an instance on `host` in that network: (router, instance, the
    router's address outside)."""
    pub = pub or external_network(h)
    net = h.create("networks", "network", {"name": f"inner{index}"})
    sub = h.create("subnets", "subnet", {"network_id": net["id"], "cidr": f"10.{76 + index}.0.0/24"})
    router = h.create("routers", "router", {"name": f"edge{index}", "external_gateway_info": {"network_id": pub["id"]},
                                            **router_attrs})  # fmt: skip
    r = h.api("PUT", f"/routers/{router['id']}/add_router_interface", {"subnet_id": sub["id"]})
    assert r.status_code == 200, r.text
    router = h.api("GET", f"/routers/{router['id']}").json()["router"]
    gateway = router["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
    ns = ns_of(h, f"i{index}")
    netns.create(ns)
    inst = h.create("instances", "instance", {"name": f"i{index}", "host": host, "netns": ns,
                                              "nets": [{"network": net["id"]}]})  # fmt: skip
    h.until("the instance ACTIVE", lambda: _active(h, inst["id"]))
    return router, inst, gateway


def _gateway_chassis(state_a: Path) -> list[tuple[int, str]]:
    nb = ["ovn-nbctl", f"--db=unix:{state_a / 'ovn' / 'ovnnb_db.sock'}", "--timeout=5", "--format=json"]
    got = json.loads(daemons.run(state_a / "ovn", [*nb, "--columns=priority,chassis_name", "list", "Gateway_Chassis"]))
    return sorted(((p, c) for p, c in got["data"]), reverse=True)


def _bridge_mappings(state_a: Path, chassis: str) -> str:
    sb = ["ovn-sbctl", f"--db=unix:{state_a / 'ovn' / 'ovnsb_db.sock'}", "--timeout=5", "--format=json"]
    row = json.loads(daemons.run(state_a / "ovn", [*sb, "--columns=other_config,external_ids", "find", "Chassis",
                                                   f"name={chassis}"]))["data"][0]  # fmt: skip
    merged = {k: v for column in row for k, v in column[1]}
    return str(merged.get("ovn-bridge-mappings", ""))


def _learned_on(h: Hosts, mac: str) -> str | None:
    """The outside bridge's port the MAC was last seen on (which host's uplink it came out of)."""
    return learned_on(h.outside, mac)


def test_an_agent_with_an_uplink_is_the_gateway_and_snat_goes_out_through_it(hosts: Hosts) -> None:
    h = hosts
    _outside(h, (h.agent_ns, "upb"))
    state_a, _state_b = _join(h, agent_extra=("--uplink", "physnet1:upb"))
    assert _bridge_mappings(state_a, h.agent_host) == "physnet1:br-physnet1"
    # The instance is on A, which has no uplink: its SNAT goes through Geneve to B and out of B's uplink.
    router, inst, gateway = _routed_out(h, h.server_host)
    h.until("B the one gateway chassis", lambda: _gateway_chassis(state_a) == [(1, h.agent_host)])
    responder = Responder.start(h.outside, "OUT", udp=(53,))
    try:
        h.until("SNAT out through B", lambda: udp_ask(inst["netns"], OUT, 53, 1) == f"OUT {gateway} 53")
    finally:
        responder.stop()
    gw_port = h.api("GET", f"/ports?device_id={router['id']}&device_owner=network:router_gateway").json()["ports"][0]
    assert _learned_on(h, gw_port["mac_address"]) == "o-upb"

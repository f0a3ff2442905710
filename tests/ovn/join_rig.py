"""Hosts that join an OVN cloud from the command line, as an operator does it: host A runs `cloudnet up --dataplane
ovn --ovn-listen ADDR --encap-iface ul0 --encap-ip ADDR/24` (API, OVN's databases, A's chassis), hosts B, C, ... run
`cloudnet agent --dataplane ovn --ovn-sb tcp:ADDR:6642 --encap-iface ul0 --encap-ip ...` (their chassis and agents),
each a process in a network namespace of the test's own, linked by an underlay of its own (tests/support/ovn.py);
an outside namespace their uplinks reach. Used by test_join.py, test_gateway_failover.py and
bench/gateway_failover.py."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from cloudnet.dataplane.base import metadata_ns_prefix
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn import veth
from cloudnet.namespaces import managed_ns_prefix
from cloudnet.ovn import daemons
from tests.support.ovn import UNDERLAY, UNDERLAY_PORT, underlay_bridge, underlay_port
from tests.support.process import CLOUDNET

API_PORT, METADATA_PORT = 9696, 8775  # (in the test's own namespaces: nothing else listens there)
SERVER_IP, AGENT_IP = str(UNDERLAY[1]), str(UNDERLAY[2])
OUT = "192.0.2.1"  # the outside's address (the external network's gateway)
LETTERS = "abcdefgh"


class Hosts:
    """Hosts (namespaces) a, b, ... on one underlay, each running a cloudnet process: A `cloudnet up`, the others
    `cloudnet agent`."""

    def __init__(self, suffix: str, root: Path, count: int = 2) -> None:
        self.suffix, self.root, self.letters = suffix, root, LETTERS[:count]
        self.underlay, self.outside = self.ns("u"), self.ns("o")
        self.server_ns, self.agent_ns = self.ns("a"), self.ns("b")
        self.server_host, self.agent_host = self.host("a"), self.host("b")
        self.token = secrets.token_urlsafe(16)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.agents: dict[str, subprocess.Popen[bytes]] = {}

    def ns(self, letter: str) -> str:
        return f"cn-join-{self.suffix}-{letter}"

    def host(self, letter: str) -> str:
        return f"ch-join-{self.suffix}-{letter}"

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """A request to host A's API from inside A (the API listens on the underlay, A's loopback included)."""
        with netns.entered(self.server_ns), httpx.Client(timeout=30) as client:
            return client.request(method, f"http://127.0.0.1:{API_PORT}/v2.0{path}", json=body,
                                  headers={"X-Auth-Token": self.token})  # fmt: skip

    def create(self, collection: str, member: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.api("POST", f"/{collection}", {member: body})
        assert r.status_code == 201, r.text
        return dict(r.json()[member])

    def start(self, ns: str, argv: list[str], log: str) -> subprocess.Popen[bytes]:
        out = (self.root / log).open("ab")
        env = {**os.environ, "CLOUDNET_TOKEN": self.token}  # (not on the command line, for every user to read)
        proc = subprocess.Popen(["ip", "netns", "exec", ns, CLOUDNET, *argv], stdout=out, stderr=subprocess.STDOUT,
                                env=env)  # fmt: skip
        out.close()
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
        """SIGTERM one process of ours and wait for it; returns its exit status."""
        self.procs.remove(proc)
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def until(self, what: str, check: Callable[[], Any], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            for proc in self.procs:
                assert proc.poll() is None, f"a process exited early ({what}): {self.logs()}"
            assert time.monotonic() < deadline, f"timed out: {what}; {self.logs()}"
            time.sleep(0.1)

    def logs(self) -> str:
        return "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.root.glob("*.log")))

    def chassis_dir(self, letter: str) -> Path:
        return self.root / letter / ("ovn" if letter == "a" else "ovn-chassis")

    def sb(self, *args: str) -> Any:
        """An ovn-sbctl command on A's SB database (JSON output, parsed)."""
        sb = ["ovn-sbctl", f"--db=unix:{self.root / 'a' / 'ovn' / 'ovnsb_db.sock'}", "--timeout=5", "--format=json"]
        return json.loads(daemons.run(self.root / "a" / "ovn", [*sb, *args]))


@contextmanager
def running_hosts(count: int = 2) -> Iterator[Hosts]:
    root = Path(tempfile.mkdtemp(prefix="cn-join-", dir="/tmp"))  # (short: unix socket paths)
    h = Hosts(uuid.uuid4().hex[:6], root, count)
    try:
        underlay_bridge(h.underlay)
        for index, letter in enumerate(h.letters, start=1):
            netns.create(h.ns(letter))
            subprocess.run(["ip", "-n", h.ns(letter), "link", "set", "lo", "up"], check=True)
            underlay_port(h.underlay, h.ns(letter), index)
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
        for letter in h.letters:
            daemons.stop(h.chassis_dir(letter), h.ns(letter), (daemons.INTEGRATION_BRIDGE, daemons.ENCAP_BRIDGE))
        # Namespaces the processes made inside their own mount namespaces (left behind as plain files here).
        for letter in h.letters:
            for prefix in (metadata_ns_prefix(h.host(letter)), managed_ns_prefix(h.host(letter))):
                for name in netns.names(prefix):
                    netns.remove(name)
        for name in netns.names(f"cn-join-{h.suffix}-"):  # (hosts, underlay, outside, instances: all the run's)
            netns.remove(name)
        shutil.rmtree(root, ignore_errors=True)


def alive(h: Hosts, host: str) -> bool:
    try:
        r = h.api("GET", f"/hosts/{host}")
    except httpx.TransportError:  # (the API is not serving yet)
        return False
    return r.status_code == 200 and r.json()["host"]["alive"]


def active(h: Hosts, instance_id: str) -> dict[str, Any] | None:
    inst = h.api("GET", f"/instances/{instance_id}").json()["instance"]
    assert inst["status"] != "ERROR", inst
    return inst if inst["status"] == "ACTIVE" else None


def listening(ns: str, port: int) -> list[str]:
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return [line.split()[3] for line in out.splitlines()]


def start_server(h: Hosts, extra: tuple[str, ...] = ()) -> Path:
    """Host A's `cloudnet up` (API, OVN's databases, A's chassis); its state directory once its agent is alive."""
    state_a = h.root / "a"
    state_a.mkdir(mode=0o700)
    # A non-loopback API needs a tokens file: the remote agent's admin token.
    (state_a / "tokens.json").write_text(json.dumps({"tokens": {h.token: {"project_id": "admin", "role": "admin"}}}))
    h.start(h.server_ns, ["up", "--dataplane", "ovn", "--state-dir", str(state_a), "--agent-host", h.server_host,
                          "--host", "0.0.0.0", "--port", str(API_PORT), "--metadata-listen", f"0.0.0.0:{METADATA_PORT}",
                          "--ovn-listen", SERVER_IP, "--encap-iface", UNDERLAY_PORT,
                          "--encap-ip", f"{SERVER_IP}/{UNDERLAY.prefixlen}", *extra], "up.log")  # fmt: skip
    h.until("host A is up, its chassis and OVN's TCP listeners with it", lambda: listening(h.server_ns, 6642))
    h.until("host A's agent registered", lambda: alive(h, h.server_host))
    return state_a


def start_agent(h: Hosts, letter: str, extra: tuple[str, ...] = ()) -> Path:
    """Host `letter`'s `cloudnet agent` joining A; its state directory once the agent is alive."""
    state = h.root / letter
    address = f"{UNDERLAY[LETTERS.index(letter) + 1]}/{UNDERLAY.prefixlen}"
    h.agents[letter] = h.start(h.ns(letter), [
        "agent", "--dataplane", "ovn", "--ovn-sb", f"tcp:{SERVER_IP}:6642", "--host", h.host(letter),
        "--state-dir", str(state), "--server", f"http://{SERVER_IP}:{API_PORT}",
        "--metadata-url", f"http://{SERVER_IP}:{METADATA_PORT}",
        "--metadata-secret-file", str(h.root / "a" / "metadata_secret"),
        "--encap-iface", UNDERLAY_PORT, "--encap-ip", address, *extra], f"agent-{letter}.log")  # fmt: skip
    h.until(f"host {letter.upper()}'s agent registered", lambda: alive(h, h.host(letter)))
    return state


def join(h: Hosts, up_extra: tuple[str, ...] = (), agent_extra: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """Host A's `cloudnet up`, then host B's `cloudnet agent` joining it; their state directories."""
    return start_server(h, up_extra), start_agent(h, "b", agent_extra)


# -- gateways: hosts with an uplink on the external network's physical network ------------------------------------


def outside(h: Hosts, *uplinks: tuple[str, str]) -> None:
    """The outside: a namespace whose bridge holds OUT and the far ends of the hosts' uplinks ((namespace, name))."""
    netns.create(h.outside)
    for cmd in (["link", "add", "out", "type", "bridge"], ["addr", "add", f"{OUT}/24", "dev", "out"],
                ["link", "set", "out", "up"]):  # fmt: skip
        subprocess.run(["ip", "-n", h.outside, *cmd], check=True, capture_output=True)
    veth.tx_checksum_off(h.outside, "out")  # (the userspace datapath completes no partial checksums)
    for ns, name in uplinks:
        subprocess.run(["ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name", f"o-{name}", "netns",
                        h.outside], check=True, capture_output=True)  # fmt: skip
        subprocess.run(["ip", "-n", h.outside, "link", "set", f"o-{name}", "master", "out", "up"], check=True,
                       capture_output=True)  # fmt: skip


def external_network(h: Hosts) -> dict[str, Any]:
    """An external network on physnet1 (192.0.2.0/24, OUT its gateway)."""
    pub = h.create("networks", "network", {"name": "pub", "router:external": True, "provider:network_type": "flat",
                                           "provider:physical_network": "physnet1"})  # fmt: skip
    h.create("subnets", "subnet", {"network_id": pub["id"], "cidr": "192.0.2.0/24", "gateway_ip": OUT,
                                   "allocation_pools": [{"start": "192.0.2.2", "end": "192.0.2.19"}]})  # fmt: skip
    return pub


def routed_out(h: Hosts, host: str, pub: dict[str, Any] | None = None, index: int = 1,
               cidr: str = "10.77.0.0/24") -> tuple[dict[str, Any], dict[str, Any], str]:  # fmt: skip
    """A router with its gateway on the external network (made if not given) and a network behind it, and an
    instance on `host` in that network: (router, instance, the router's address outside)."""
    pub = pub or external_network(h)
    net = h.create("networks", "network", {"name": f"inner{index}"})
    sub = h.create("subnets", "subnet", {"network_id": net["id"], "cidr": cidr})
    router = h.create("routers", "router", {"name": f"edge{index}", "external_gateway_info": {"network_id": pub["id"]}})
    r = h.api("PUT", f"/routers/{router['id']}/add_router_interface", {"subnet_id": sub["id"]})
    assert r.status_code == 200, r.text
    router = h.api("GET", f"/routers/{router['id']}").json()["router"]
    gateway = router["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
    ns = h.ns(f"i{index}")
    netns.create(ns)
    inst = h.create("instances", "instance", {"name": f"i{index}", "host": host, "netns": ns,
                                              "nets": [{"network": net["id"]}]})  # fmt: skip
    h.until("the instance ACTIVE", lambda: active(h, inst["id"]))
    return router, inst, gateway


def gateway_chassis(h: Hosts) -> list[tuple[int, str]]:
    """NB's Gateway_Chassis rows, (priority, chassis), highest first."""
    nb = ["ovn-nbctl", f"--db=unix:{h.root / 'a' / 'ovn' / 'ovnnb_db.sock'}", "--timeout=5", "--format=json"]
    got = json.loads(daemons.run(h.root / "a" / "ovn", [*nb, "--columns=priority,chassis_name", "list",
                                                        "Gateway_Chassis"]))  # fmt: skip
    return sorted(((p, c) for p, c in got["data"]), reverse=True)


def bridge_mappings(h: Hosts, chassis: str) -> str:
    row = h.sb("--columns=other_config,external_ids", "find", "Chassis", f"name={chassis}")["data"][0]
    merged = {k: v for column in row for k, v in column[1]}
    return str(merged.get("ovn-bridge-mappings", ""))


def learned_on(h: Hosts, mac: str) -> str | None:
    """The outside bridge's port the MAC was last seen on (which host's uplink it came out of)."""
    out = subprocess.run(["bridge", "-n", h.outside, "-j", "fdb", "show", "br", "out"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return next((e["ifname"] for e in json.loads(out or "[]") if e.get("mac") == mac.lower()), None)

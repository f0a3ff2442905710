"""Issue 29's test fleet: three server hosts and three chassis hosts, each a network namespace of the rig's own on one
underlay, every wire between them TLS. Each server host runs `cloudnet serve --dataplane ovn --tls --ovn-cluster
A,B,C --ovn-listen <own>` on one PostgreSQL (its NB and SB members, its ovn-northd, an API server and its NB writer;
the first makes the cloud's CA and secrets, the others get a copy, as servers sharing a database do); each chassis host
runs `cloudnet agent --join URL TOKEN` (its ovs-vswitchd in userspace, its ovn-controller, its agent: certificate,
SB list and metadata URL from the join) with every API server and metadata API in its lists. Chassis 1 and 2 have an
uplink on physnet1 into the outside (gateway chassis); an operator's namespace on the underlay reaches the API servers.
Builds on tests/support/ovn_cluster.py's rig (members, leaders, kills, the stop); PostgreSQL from
tests/support/postgres.py (a Unix socket: no TCP listener at all)."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn import veth
from cloudnet.ovn import daemons
from cloudnet.pki import tls
from tests.support.ovn import UNDERLAY, UNDERLAY_PORT, outside_bridge, underlay_bridge, underlay_port
from tests.support.ovn_cluster import API_PORT, SERVERS, ClusterRig, api_answers, stop_rig
from tests.support.port_churn import Servers
from tests.support.postgres import PostgresServer

CHASSIS_HOSTS = (1, 2, 3)
GATEWAYS = (1, 2)  # chassis hosts with an uplink on physnet1
CLIENT = 20  # the operator's namespace's index on the underlay
METADATA_PORT = 8775
OUT = "192.0.2.1"  # the outside's address (physnet1's external network's gateway)
DURABLE = {"synchronous_commit": "on"}  # (an acknowledged write must survive PostgreSQL's restart)
SHARED = ("pki/ca.crt", "pki/ca.key", "metadata_secret", "keystone_secret", "tokens.json")


@dataclass
class Chassis:
    index: int
    ns: str
    host: str
    state: Path

    @property
    def address(self) -> str:
        return str(UNDERLAY[10 + self.index])

    @property
    def rundir(self) -> Path:
        return self.state / "ovn-chassis"

    @property
    def uplink(self) -> str:
        return f"up{self.index}"  # (the outside's end: o-up<index>)


class FleetRig(ClusterRig):
    def __init__(self, root: Path, pg: PostgresServer) -> None:
        super().__init__(root, tls=True)
        self.pg = pg
        self.outside, self.client_ns = self.ns_named("o"), self.ns(CLIENT)
        self.chassis = {j: Chassis(j, self.ns(10 + j), f"ch-fleet-{self.suffix}-{j}", root / f"c{j}")
                        for j in CHASSIS_HOSTS}  # fmt: skip
        self.api_urls = [f"https://{a}:{API_PORT}" for a in self.addresses]
        self.metadata_urls = [f"https://{a}:{METADATA_PORT}" for a in self.addresses]
        self._servers: Servers | None = None

    def ns_named(self, name: str) -> str:
        return f"cn-raft-{self.suffix}-{name}"

    @property
    def ca(self) -> Path:
        return self.state(1) / "pki" / "ca.crt"

    @property
    def db_url(self) -> str:
        return self.pg.url("cloudnet")

    def ssl(self, index: int) -> daemons.Ssl:
        """Host `index`'s member certificate: its server makes it at each start with the cloud's CA."""
        pki = self.state(index) / "pki"
        return daemons.Ssl(pki / "ovsdb.key", pki / "ovsdb.crt", pki / "ca.crt")

    def chassis_hosts(self) -> list[tuple[str, Path, str]]:
        return [(c.ns, c.rundir, c.host) for c in self.chassis.values()]

    @property
    def servers(self) -> Servers:
        """The operator's client of the three API servers (from its namespace on the underlay, failing over)."""
        if self._servers is None:
            self._servers = Servers(self.api_urls, {"X-Auth-Token": self.token}, tls.client_context(self.ca),
                                    self.client_ns)  # fmt: skip
        return self._servers

    def create(self, collection: str, member: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.servers.request("POST", f"/{collection}", json={member: body})
        assert r.status_code == 201, r.text
        return dict(r.json()[member])

    # -- processes ------------------------------------------------------------------------------------------------

    def start_server(self, index: int = 1) -> None:
        """Host `index`'s `cloudnet serve` (a start after a kill runs on its files: its members rejoin)."""
        address = self.addresses[index - 1]
        self._start(f"server{index}", self.ns(index), [
            "serve", "--dataplane", "ovn", "--tls", "--tls-san", address, "--host", "0.0.0.0", "--port", str(API_PORT),
            "--metadata-listen", f"0.0.0.0:{METADATA_PORT}", "--db", self.db_url, "--pool-min", "0",
            *self.cluster_args(index)])  # fmt: skip

    def share_secrets(self, index: int) -> None:
        """What servers on one database share: the CA, the metadata and Keystone secrets, the tokens file."""
        for name in SHARED:
            target = self.state(index) / name
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            shutil.copy2(self.state(1) / name, target)

    def start_agent(self, index: int = 1) -> None:
        """Chassis host `index`'s agent: joined with a token the first time (no admin token in its environment
        ever: its certificate is its credential), from what the join wrote afterwards."""
        c = self.chassis[index]
        join = [] if (c.state / "join").exists() else ["--join", self.api_urls[0], self.join_token(c.host)]
        uplink = ["--uplink", f"physnet1:{c.uplink}"] if index in GATEWAYS else []
        self._start(f"agent{index}", c.ns, [
            "agent", "--dataplane", "ovn", *join, "--host", c.host, "--state-dir", str(c.state),
            "--server", ",".join(self.api_urls), "--metadata-url", ",".join(self.metadata_urls),
            "--encap-iface", UNDERLAY_PORT, "--encap-ip", f"{c.address}/{UNDERLAY.prefixlen}", *uplink],
            token=False)  # fmt: skip

    def restart_chassis(self, index: int) -> None:
        """Chassis host `index` back, as after a reboot: its agent killed, what is left of its chassis stopped, its
        agent started again (from its join's files), which starts the chassis afresh."""
        c = self.chassis[index]
        proc = self.procs.pop(f"agent{index}")
        proc.kill()
        proc.wait()
        daemons.stop(c.rundir, c.ns, (daemons.INTEGRATION_BRIDGE, daemons.ENCAP_BRIDGE, daemons.provider_bridge(
            "physnet1")))  # fmt: skip
        self.start_agent(index)

    def kill_server(self, index: int) -> None:
        """SIGKILL host `index`'s API server (its NB writer's connection, and the lock with it, go with it)."""
        proc = self.procs.pop(f"server{index}")
        proc.kill()
        proc.wait()

    def server_log(self, index: int) -> str:
        path = self.root / f"server{index}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def answers(self, index: int) -> bool:
        """Host `index`'s API answers, over TLS from the operator's namespace."""
        try:
            with netns.entered(self.client_ns), httpx.Client(verify=tls.client_context(self.ca), timeout=3) as c:
                return c.get(f"{self.api_urls[index - 1]}/v2.0/networks",
                             headers={"X-Auth-Token": self.token}).status_code == 200  # fmt: skip
        except httpx.TransportError:
            return False

    def host_alive(self, index: int) -> bool:
        try:
            r = self.servers.get(f"/hosts/{self.chassis[index].host}")
        except httpx.TransportError:
            return False
        return r.status_code == 200 and bool(r.json()["host"]["alive"])


def _ns_on_underlay(rig: FleetRig, ns: str, index: int) -> None:
    netns.create(ns)
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    underlay_port(rig.underlay, ns, index)
    subprocess.run(["ip", "-n", ns, "addr", "add", f"{UNDERLAY[index]}/{UNDERLAY.prefixlen}", "dev", UNDERLAY_PORT],
                   check=True)  # fmt: skip
    subprocess.run(["ip", "-n", ns, "link", "set", UNDERLAY_PORT, "up"], check=True)
    veth.tx_checksum_off(ns, UNDERLAY_PORT)  # (the userspace datapath completes no partial checksums)


@contextmanager
def fleet_rig() -> Iterator[FleetRig]:
    """The fleet up: both clusters formed over SSL, the three API servers answering, the chassis joined and alive."""
    pg = PostgresServer.start(DURABLE)
    rig = FleetRig(Path(tempfile.mkdtemp(prefix="cn-fleet-", dir="/tmp")), pg)  # (short: unix socket paths)
    try:
        pg.psql("CREATE DATABASE cloudnet")
        underlay_bridge(rig.underlay)
        for index in SERVERS:
            _ns_on_underlay(rig, rig.ns(index), index)
        for c in rig.chassis.values():
            _ns_on_underlay(rig, c.ns, 10 + c.index)
        _ns_on_underlay(rig, rig.client_ns, CLIENT)
        outside_bridge(rig.outside, f"{OUT}/24", *((rig.chassis[j].ns, rig.chassis[j].uplink) for j in GATEWAYS))
        rig.state(1).mkdir(mode=0o700)
        admin = {"tokens": {rig.token: {"project_id": "admin", "role": "admin"}}}
        (rig.state(1) / "tokens.json").write_text(json.dumps(admin))
        rig.start_server(1)  # (first alone: it makes the CA and secrets, the clusters, and the schema)
        rig.until("server 1 answers", lambda: api_answers(rig), timeout=90)
        for index in SERVERS[1:]:
            rig.share_secrets(index)
            rig.start_server(index)
        rig.until("the NB and SB clusters formed", rig.formed, timeout=90)
        rig.until("every API server answers", lambda: all(rig.answers(i) for i in SERVERS), timeout=90)
        for j in CHASSIS_HOSTS:
            rig.start_agent(j)
        rig.until("every chassis' agent alive", lambda: all(rig.host_alive(j) for j in CHASSIS_HOSTS), timeout=90)
        yield rig
    finally:
        if rig._servers is not None:
            rig._servers.close()
        stop_rig(rig)
        pg.stop()


def tls_handshake(ns: str, address: str, port: int, context: ssl.SSLContext) -> bool:
    """A TLS handshake with `address`:`port` from inside `ns` completes (the listener speaks TLS)."""
    with netns.entered(ns):
        raw = socket.create_connection((address, port), timeout=5)
    try:
        with context.wrap_socket(raw, server_hostname=address):
            return True
    except (ssl.SSLError, OSError):
        return False
    finally:
        raw.close()

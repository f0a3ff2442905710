"""Three OVN server hosts and one chassis host, each a network namespace of the rig's own on one underlay, running
cloudnet from the command line as an operator does: host 1 `cloudnet serve --dataplane ovn --ovn-cluster A,B,C
--ovn-listen A` (the API, its NB writer, this host's NB and SB members, ovn-northd), hosts 2 and 3 `cloudnet ovn join
--ovn-cluster A,B,C --ovn-listen B|C`, the chassis host `cloudnet agent --dataplane ovn --ovn-sb <every member>`.
With `tls`, the server runs `--tls` and the other two get their member certificates with join tokens (`cloudnet ovn
join --join URL TOKEN`): the clusters run over SSL. Names carry a random suffix; the stop ends the processes, then
every daemon by its pidfiles, and removes the namespaces and the directory. Shared by tests/ovn/test_cluster.py,
tests/ovn/test_cluster_tls.py and bench/ovn_cluster.py."""

from __future__ import annotations

import contextlib
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

from cloudnet.agent.join import Joined, join
from cloudnet.dataplane.base import metadata_ns_prefix
from cloudnet.dataplane.kernel import netns
from cloudnet.namespaces import managed_ns_prefix
from cloudnet.ovn import cluster, daemons
from cloudnet.ovn.cluster import servers
from tests.support.ovn import UNDERLAY, UNDERLAY_PORT, underlay_bridge, underlay_port
from tests.support.process import CLOUDNET

SERVERS = (1, 2, 3)
CHASSIS = 10  # the chassis host's index on the underlay
API_PORT = 9696  # (in the rig's own namespace: nothing else listens there)


class ClusterRig:
    def __init__(self, root: Path, tls: bool = False) -> None:
        self.root, self.suffix, self.tls = root, uuid.uuid4().hex[:6], tls
        self.token = secrets.token_urlsafe(16)
        self.addresses = tuple(str(UNDERLAY[i]) for i in SERVERS)
        self.underlay = f"cn-raft-{self.suffix}-u"
        self.chassis_ns = f"cn-raft-{self.suffix}-c"
        self.host = f"ch-raft-{self.suffix}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def ns(self, index: int) -> str:
        return f"cn-raft-{self.suffix}-{index}"

    def state(self, index: int) -> Path:
        return self.root / f"s{index}"

    def rundir(self, index: int) -> Path:
        return self.state(index) / "ovn"

    def ssl(self, index: int) -> daemons.Ssl | None:
        """Host `index`'s member certificate (tls): the server's made by itself, the others' by their joins."""
        if not self.tls:
            return None
        if index == 1:
            pki = self.state(1) / "pki"
            return daemons.Ssl(pki / "ovsdb.key", pki / "ovsdb.crt", pki / "ca.crt")
        ca, cert, key, _secret = Joined.files(self.state(index))
        return daemons.Ssl(key, cert, ca)

    def members(self, index: int) -> cluster.Members:
        """Host `index`'s view of the members; fronted when a server's TLS front serves its clients (`serve --tls`:
        a member restarted there leaves the client port to it, as the server starts it)."""
        fronted = daemons.FRONT in daemons.pids(self.rundir(index))
        return cluster.Members(self.addresses[index - 1], self.addresses, self.ssl(index), fronted)

    @property
    def nb(self) -> str:
        return self.members(1).clients("nb")

    @property
    def sb(self) -> str:
        return self.members(1).clients("sb")

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.state(1) / 'cloudnet.db'}"

    # -- processes ------------------------------------------------------------------------------------------------

    def _start(self, name: str, ns: str, argv: list[str], token: bool = True) -> None:
        """`cloudnet ARGV` in `ns`, logged to <name>.log (appended), with the admin token in its environment unless
        not `token` (a joined agent's certificate is its credential)."""
        with (self.root / f"{name}.log").open("ab") as out:
            env = {k: v for k, v in os.environ.items() if k != "CLOUDNET_TOKEN"}
            if token:
                env["CLOUDNET_TOKEN"] = self.token
            self.procs[name] = subprocess.Popen(["ip", "netns", "exec", ns, CLOUDNET, *argv], stdout=out,
                                                stderr=subprocess.STDOUT, env=env)  # fmt: skip

    def cluster_args(self, index: int) -> list[str]:
        return ["--ovn-cluster", ",".join(self.addresses), "--ovn-listen", self.addresses[index - 1],
                "--state-dir", str(self.state(index))]  # fmt: skip

    def start_server(self) -> None:
        tls = ["--tls", "--tls-san", self.addresses[0]] if self.tls else []
        self._start("server", self.ns(1), ["serve", "--dataplane", "ovn", "--host", "0.0.0.0", "--port",
                                           str(API_PORT), "--metadata-listen", "127.0.0.1:8775", *tls,
                                           *self.cluster_args(1)])  # fmt: skip

    def start_join(self, index: int) -> None:
        """Host `index`'s `cloudnet ovn join` (tls: with a join token of host 1's API, the first time)."""
        join = []
        if self.tls and not Joined.files(self.state(index))[1].exists():
            name = f"srv{index}-{self.suffix}"
            join = ["--join", f"https://{self.addresses[0]}:{API_PORT}", self.join_token(name), "--host", name]
        self._start(f"join{index}", self.ns(index), ["ovn", "join", *self.cluster_args(index), *join])

    def start_agent(self) -> None:
        """The chassis host's agent (tls: joined with a token, which hands it the SB list and its certificate)."""
        if self.tls:
            token = self.join_token(self.host)
            access = ["--join", f"https://{self.addresses[0]}:{API_PORT}", token]
        else:
            access = ["--ovn-sb", self.sb, "--server", f"http://{self.addresses[0]}:{API_PORT}"]
        self._start("agent", self.chassis_ns, ["agent", "--dataplane", "ovn", *access, "--host", self.host,
                                               "--state-dir", str(self.root / "c"),
                                               "--metadata-url", "off"])  # fmt: skip

    def join_token(self, host: str) -> str:
        """A join token for `host`, from host 1's API (`cloudnet host join-token`)."""
        with self.api() as api:
            r = api.post(f"/hosts/{host}/join-tokens", json={"join_token": {}})
        assert r.status_code == 201, r.text
        return str(r.json()["join_token"]["token"])

    def stop_proc(self, name: str) -> int:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=30)

    def until(self, what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while not (got := check()):
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"{name} exited early ({what}): {self.logs()}"
            assert time.monotonic() < deadline, f"timed out: {what}; {self.logs()}"
            time.sleep(0.1)
        return got

    def logs(self) -> str:
        found = sorted(self.root.glob("*.log")) + sorted(self.root.glob("s*/ovn/ovn*_db.log"))
        return "".join(f"\n--- {p}\n{p.read_text(errors='replace')[-2500:]}" for p in found)

    # -- the API (in host 1's namespace), OVN's databases ----------------------------------------------------------

    @contextmanager
    def api(self) -> Iterator[httpx.Client]:
        """A client of host 1's API; requests go from inside its namespace (keep the block to API calls)."""
        ca = self.state(1) / "pki" / "ca.crt"
        scheme, verify = ("https", ssl.create_default_context(cafile=ca)) if self.tls else ("http", False)
        with netns.entered(self.ns(1)), httpx.Client(base_url=f"{scheme}://127.0.0.1:{API_PORT}/v2.0", timeout=30,
                                                      headers={"X-Auth-Token": self.token},
                                                      verify=verify) as client:  # fmt: skip
            yield client

    def nbctl(self, *args: str) -> str:
        """ovn-nbctl on the NB leader's socket, once there is one (a one-shot client given the list tries each
        remote once: during an election every member refuses it, and it fails)."""
        return self._ctl("nb", args)

    def sbctl(self, *args: str) -> str:
        return self._ctl("sb", args)

    def _ctl(self, kind: str, args: tuple[str, ...]) -> str:
        index = self.until(f"a {kind} leader", lambda: self.leader(kind), timeout=30)
        db = f"unix:{self.rundir(index) / f'ovn{kind}_db.sock'}"
        return daemons.run(self.root, [f"ovn-{kind}ctl", f"--db={db}", "--timeout=20", *args], timeout=25)

    def status(self, index: int, kind: str) -> str:
        return cluster.status(self.rundir(index), kind)

    def leader(self, kind: str) -> int | None:
        """The host whose `kind` member says it leads (None during an election)."""
        for index in SERVERS:
            with contextlib.suppress(daemons.OvnError):  # (a killed member has no control socket)
                if cluster.role(self.rundir(index), kind) == "leader":
                    return index
        return None

    def kill(self, index: int, kind: str) -> None:
        """SIGKILL host `index`'s `kind` member; returns once it is gone."""
        pid = daemons.pids(self.rundir(index))[f"ovn{kind}_db"]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while daemons.alive(pid):
            assert time.monotonic() < deadline, f"pid {pid} still alive after SIGKILL"
            time.sleep(0.01)

    def restart(self, index: int, kind: str) -> None:
        """Host `index`'s `kind` member again, on its file (it rejoins: no create or join)."""
        cluster.start_member(self.rundir(index), kind, self.members(index), self.ns(index))

    def formed(self) -> bool:
        """Every member of both clusters a member knowing 3 servers, all in the same term under the same leader (a
        member restarted a moment ago may still be a term behind: a leader killed then makes a slow election)."""
        for kind in cluster.KINDS:
            seen = set()
            for index in SERVERS:
                try:
                    text = self.status(index, kind)
                except daemons.OvnError:
                    return False
                if "Status: cluster member" not in text or len(servers(text)) != len(SERVERS):
                    return False
                seen.add((field(text, "Term"), field(text, "Leader").replace("self", server_id(text))))
            if len(seen) != 1 or self.leader(kind) is None:
                return False
        return True

    def chassis_hosts(self) -> list[tuple[str, Path, str]]:
        """(namespace, chassis directory, host name) of each chassis host, for the stop."""
        return [(self.chassis_ns, self.root / "c" / "ovn-chassis", self.host)]

    def monitor(self, remote: str, ssl: daemons.Ssl) -> subprocess.Popen[str]:
        """An open connection to `remote` from the chassis host's namespace: `ovsdb-client monitor` of SB_Global,
        returned once it printed the table's heading (connected and served; it fails the assertion otherwise)."""
        argv = ["ip", "netns", "exec", self.chassis_ns, "ovsdb-client", *daemons.ssl_args(ssl), "monitor", remote,
                "OVN_Southbound", "SB_Global", "nb_cfg"]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()  # (blocks until served, or "" when it failed)
        if "nb_cfg" not in first and "row" not in first:
            proc.kill()
            raise AssertionError(f"ovsdb-client monitor {remote} was not served: {first!r} {proc.stderr.read()}")
        return proc

    def join_host(self, name: str, state: Path) -> daemons.Ssl:
        """Host `name` joined with a token of host 1's API (as `cloudnet agent --join` does) into `state`: its SSL
        files."""
        token = self.join_token(name)
        with netns.entered(self.ns(1)):
            join(f"https://127.0.0.1:{API_PORT}", token, name, state)
        return joined_ssl(state)

    def alive(self, host: str) -> bool:
        try:
            with self.api() as api:
                r = api.get(f"/hosts/{host}")
        except httpx.TransportError:
            return False
        return r.status_code == 200 and bool(r.json()["host"]["alive"])


def joined_ssl(state: Path) -> daemons.Ssl:
    """OVS's SSL files of a host that joined with a token into `state`."""
    ca, cert, key, _secret = Joined.files(state)
    return daemons.Ssl(key, cert, ca)


def field(status: str, name: str) -> str:
    return next((line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith(f"{name}:")), "")


def server_id(status: str) -> str:
    return field(status, "Server ID").split()[0]


def cluster_id(status: str) -> str:
    return field(status, "Cluster ID").split()[0]


def bound_here(rig: ClusterRig) -> set[str]:
    """Logical ports SB says are bound to the rig's chassis and up."""
    chassis = json.loads(rig.sbctl("--format=json", "--columns=_uuid", "find", "Chassis", f"name={rig.host}"))
    if not chassis["data"]:
        return set()
    ours = chassis["data"][0][0][1]
    data = json.loads(rig.sbctl("--format=json", "--columns=logical_port,chassis,up", "list", "Port_Binding"))
    return {lp for lp, ch, up in data["data"] if ch == ["uuid", ours] and up is True}


@contextmanager
def cluster_rig(agent: bool = True, tls: bool = False) -> Iterator[ClusterRig]:
    """The rig, its clusters formed, its API answering, its chassis' agent (with `agent`) registered."""
    rig = ClusterRig(Path(tempfile.mkdtemp(prefix="cn-raft-", dir="/tmp")), tls)  # (short: unix socket paths)
    try:
        underlay_bridge(rig.underlay)
        for index in (*SERVERS, CHASSIS):
            ns = rig.ns(index) if index != CHASSIS else rig.chassis_ns
            netns.create(ns)
            subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
            underlay_port(rig.underlay, ns, index)
            # (the underlay address on the port, as a server host's interface has it; the chassis tunnels over
            # loopback: one chassis, no Geneve)
            subprocess.run(["ip", "-n", ns, "addr", "add", f"{UNDERLAY[index]}/{UNDERLAY.prefixlen}", "dev",
                            UNDERLAY_PORT], check=True)  # fmt: skip
            subprocess.run(["ip", "-n", ns, "link", "set", UNDERLAY_PORT, "up"], check=True)
        rig.state(1).mkdir(mode=0o700)
        (rig.state(1) / "tokens.json").write_text(
            json.dumps({"tokens": {rig.token: {"project_id": "admin", "role": "admin"}}})
        )
        rig.start_server()
        if tls:  # (the joins' tokens come from the API, which answers once the first member made its clusters)
            rig.until("the API answers", lambda: api_answers(rig))
        for index in SERVERS[1:]:
            rig.start_join(index)
        rig.until("the NB and SB clusters formed", rig.formed)
        rig.until("the API answers", lambda: api_answers(rig))
        if agent:
            rig.start_agent()
            rig.until("the chassis' agent registered", lambda: rig.alive(rig.host))
        yield rig
    finally:
        stop_rig(rig)


def api_answers(rig: ClusterRig) -> bool:
    if rig.tls and not (rig.state(1) / "pki" / "ca.crt").exists():
        return False  # (the server makes its CA as it starts)
    try:
        with rig.api() as api:
            return api.get("/networks").status_code == 200
    except httpx.TransportError:
        return False


def stop_rig(rig: ClusterRig) -> None:
    for proc in rig.procs.values():  # (all at once: an agent ends its long poll of the API when the server stops)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in rig.procs.values():
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for ns, chassis, _host in rig.chassis_hosts():
        daemons.stop(chassis, ns)
    for index in SERVERS:
        daemons.stop(rig.rundir(index), rig.ns(index))
    for _ns, _chassis, host in rig.chassis_hosts():
        for prefix in (metadata_ns_prefix(host), managed_ns_prefix(host)):
            for name in netns.names(prefix):
                netns.remove(name)
    for ns in netns.names(f"cn-raft-{rig.suffix}-"):  # (the hosts', the tests' instances', the underlay: the run's)
        netns.remove(ns)
    shutil.rmtree(rig.root, ignore_errors=True)

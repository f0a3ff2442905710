"""The processes of tests/ovn/test_restarts.py, each killable with SIGKILL and restartable on the same state: the
server (`cloudnet serve --dataplane ovn` on a sandbox's NB/SB), a chassis' agent (`cloudnet agent --dataplane
ovn` on the sandbox's chassis, in the chassis' namespace), ovn-northd and ovn-controller (by their pidfiles)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cloudnet.dataplane.base import metadata_ns_prefix
from cloudnet.dataplane.kernel import netns
from cloudnet.namespaces import managed_ns_prefix
from cloudnet.ovn import daemons
from tests.support.ovn import OvnSandbox
from tests.support.process import CLOUDNET, free_port


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while daemons.alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive after SIGKILL"
        time.sleep(0.01)


@dataclass
class Rig:
    ovn: OvnSandbox
    state: Path  # the server's state dir (its SQLite database, metadata secret)
    logs: Path
    port: int = field(default_factory=free_port)
    metadata_port: int = field(default_factory=free_port)
    server: subprocess.Popen[bytes] | None = None
    agent: subprocess.Popen[bytes] | None = None

    @property
    def chassis(self) -> daemons.Chassis:
        return self.ovn.chassis[0]

    @property
    def host(self) -> str:
        return self.chassis.name  # the agent's host is its chassis' name (OVN binds ports to it)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.state / 'cloudnet.db'}"

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def start_server(self) -> None:
        self.server = self._spawn("server", [
            CLOUDNET, "serve", "--state-dir", str(self.state), "--port", str(self.port),
            "--metadata-listen", f"127.0.0.1:{self.metadata_port}", "--dataplane", "ovn",
            "--ovn-nb", self.ovn.nb_url, "--ovn-sb", self.ovn.sb_url])  # fmt: skip
        deadline = time.monotonic() + 30
        while True:  # readiness: the API answers
            try:
                httpx.get(self.url + "/", timeout=1)
                return
            except httpx.TransportError:
                assert self.server.poll() is None, f"server exited: {self.log('server')}"
                assert time.monotonic() < deadline, "server did not answer within 30 s"
                time.sleep(0.05)

    def start_agent(self) -> None:
        ch = self.chassis
        assert ch.netns is not None
        self.agent = self._spawn("agent", [
            CLOUDNET, "agent", "--host", self.host, "--server", self.url, "--state-dir", str(self.logs),
            "--dataplane", "ovn", "--ovn-sb", self.ovn.sb_url, "--ovs-db", ch.ovs_url, "--ovs-netns", ch.netns,
            "--metadata-url", f"http://127.0.0.1:{self.metadata_port}",
            "--metadata-secret-file", str(self.state / "metadata_secret")])  # fmt: skip

    def kill(self, victim: str) -> None:
        """SIGKILL, wherever it was; returns once it is gone."""
        if victim in ("server", "agent"):
            proc = self.server if victim == "server" else self.agent
            assert proc is not None and proc.poll() is None, f"the {victim} died before it was killed"
            proc.kill()
            proc.wait()
            return
        rundir = self.ovn.root if victim == "ovn-northd" else self.chassis.rundir
        pid = daemons.pids(rundir)[victim]
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)

    def restart(self, victim: str) -> None:
        if victim == "server":
            self.start_server()
        elif victim == "agent":
            self.start_agent()
        elif victim == "ovn-northd":
            daemons.start_northd(self.ovn.central)
        else:
            daemons.start_controller(self.chassis)

    def tamper(self, victim: str) -> None:
        """While `victim` is away, what its restart must repair: for the server, NB rows changed, deleted and made
        up behind its back; for the agent, a br-int port and namespaces of this host that nothing wants (leaks)."""
        if victim == "server":
            switches = self.ovn.nbctl("--bare", "--columns=name", "list", "Logical_Switch").split()
            if switches:
                self.ovn.nbctl("set", "Logical_Switch", switches[0], "other_config:mtu=9000")
            ports = self.ovn.nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port", 'type=""').split()
            if ports:
                self.ovn.nbctl("lsp-del", ports[0])
            self.ovn.nbctl("ls-add", "cloudnet-ghost", "--", "set", "Logical_Switch", "cloudnet-ghost",
                           'external_ids:"cloudnet:key"="ls/ghost"')  # fmt: skip
        elif victim == "agent":
            ch, leak = self.chassis, "cno-0leak000000"
            assert ch.netns is not None
            subprocess.run(["ip", "-n", ch.netns, "link", "add", leak, "type", "veth", "peer", "name", "cnx-0leak"],
                           check=True)  # fmt: skip
            daemons.run(ch.rundir, ["ovs-vsctl", f"--db={ch.ovs_url}", "--", "add-port", "br-int", leak, "--", "set",
                                    "Interface", leak, f'external_ids:"cloudnet:host"="{self.host}"',
                                    'external_ids:iface-id="0leak"'])  # fmt: skip
            netns.create(metadata_ns_prefix(self.host) + "0leak")
            netns.create(managed_ns_prefix(self.host) + "0leak")

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for proc in (self.agent, self.server):  # (killed: a stopping agent would first finish its long poll)
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for prefix in (metadata_ns_prefix(self.host), managed_ns_prefix(self.host)):
            for name in netns.names(prefix):
                with contextlib.suppress(OSError):
                    netns.remove(name)

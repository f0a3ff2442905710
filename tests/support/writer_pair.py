"""Two `cloudnet serve --dataplane ovn` processes on one database and one NB (issue 29's "many API servers"): each
asks NB for the writer lock, one writes, the other stands by. For tests/ovn/test_writer_killed.py and
bench/writer_failover.py: start them, see which one writes, kill it with SIGKILL, start it again.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cloudnet.northbound.sync import STANDBY
from tests.support.api import create, create_network, create_subnet
from tests.support.ovn import OvnSandbox
from tests.support.process import CLOUDNET, free_port

HEADERS = {"X-Auth-Token": "admin"}  # (no tokens file: every token is admin on loopback)


@dataclass
class Server:
    name: str
    state: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.state / "serve.log"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def standing_by(self) -> bool:
        return STANDBY in self.log_text()

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url + "/v2.0", headers=HEADERS, timeout=30)


class WriterPair:
    def __init__(self, root: Path, ovn: OvnSandbox) -> None:
        self.ovn = ovn
        self.db_url = f"sqlite:///{root / 'cloudnet.db'}"
        self.servers = {name: Server(name, root / name) for name in ("a", "b")}

    def start(self, name: str) -> Server:
        """Start server `name` (again, after a kill: a new log) and return once its API answers."""
        srv = self.servers[name]
        srv.port = free_port()  # (afresh at each start: a port released by a killed server may be another's now)
        srv.state.mkdir(parents=True, exist_ok=True)
        srv.log.unlink(missing_ok=True)
        with srv.log.open("ab") as out:
            srv.proc = subprocess.Popen([
                CLOUDNET, "serve", "--state-dir", str(srv.state), "--port", str(srv.port), "--db", self.db_url,
                "--metadata-listen", "off", "--pool-min", "0", "--dataplane", "ovn",
                "--ovn-nb", self.ovn.nb_url, "--ovn-sb", self.ovn.sb_url],
                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        self.until(f"server {name} answers", lambda: self._answers(srv), timeout=30)
        return srv

    def _answers(self, srv: Server) -> bool:
        assert srv.proc is not None and srv.proc.poll() is None, f"server {srv.name} exited:\n{srv.log_text()}"
        try:
            httpx.get(srv.url + "/", timeout=1)
            return True
        except httpx.TransportError:
            return False

    def kill(self, name: str) -> None:
        """SIGKILL: its NB connection (and the lock with it) goes as the kernel closes its sockets."""
        proc = self.servers[name].proc
        assert proc is not None and proc.poll() is None, f"server {name} died before it was killed"
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        for srv in self.servers.values():
            if srv.proc is not None and srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait()

    def switch_ports(self) -> set[str]:
        return set(self.ovn.nbctl("--bare", "--columns=name", "list", "Logical_Switch_Port").split())

    def until(self, what: str, check: Callable[[], Any], timeout: float = 30.0, step: float = 0.02) -> Any:
        deadline = time.monotonic() + timeout
        while not (found := check()):
            assert time.monotonic() < deadline, f"{what}: not within {timeout} s{self.logs()}"
            time.sleep(step)
        return found

    def logs(self) -> str:
        return "".join(f"\n--- server {s.name} ---\n{s.log_text()[-3000:]}" for s in self.servers.values())


@contextmanager
def writer_pair(root: Path, ovn: OvnSandbox) -> Iterator[WriterPair]:
    pair = WriterPair(root, ovn)
    try:
        yield pair
    finally:
        pair.stop()


def writer_then_standby(pair: WriterPair, network_name: str) -> tuple[Server, Server, dict[str, Any]]:
    """Server a started first and seen writing (a port it made is in NB), then b started and seen standing by;
    returns (writer, standby, a network with a subnet to make ports on)."""
    writer = pair.start("a")
    with writer.api() as api:
        net = create_network(api, name=network_name)
        create_subnet(api, net["id"], "10.79.0.0/22")
        first = create(api, "ports", "port", network_id=net["id"], name="first")
    pair.until("server a wrote NB", lambda: first["id"] in pair.switch_ports())
    standby = pair.start("b")
    pair.until("server b stands by", standby.standing_by)
    return writer, standby, net

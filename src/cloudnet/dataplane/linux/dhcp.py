"""DHCP on the Linux driver, as Neutron's DHCP agent does it: one dnsmasq per network with a DHCP-enabled subnet
(IPv4, or IPv6 in a DHCPv6 address mode), in the network's metadata namespace, answering on the metadata port's
interface with the metadata port's addresses (Neutron OVN's `network:distributed` port is its networks' DHCP server
address too: no `network:dhcp` port).

Static leases only, for this host's ports. A change rewrites the hosts and options files atomically and sends SIGHUP
(dnsmasq rereads both); only a changed command line (subnets, MTU) restarts it. dnsmasq runs as a daemon with a pid
file, as Neutron's does: a restarted agent adopts it (its /proc cmdline must be the wanted one), a watcher thread
restarts one that died, with backoff. A network whose dnsmasq cannot start fails alone (its step, `dhcp:<id>`)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudnet.dataplane.base import DesiredState
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import dhcp_conf, names
from cloudnet.dataplane.linux.dhcp_conf import Files
from cloudnet.dataplane.linux.passes import Pass, fingerprint_of, needed_networks
from cloudnet.dataplane.steps import FIRST_RETRY, StepFailed

log = logging.getLogger(__name__)
RUN_ROOT = Path("/run/cloudnet/dhcp")
WATCH_EVERY = 0.5  # seconds between looks at the servers (a dead one is restarted on the next look)
MAX_BACKOFF = 60.0
START_TIMEOUT = 5.0
# One watcher per host directory in a process: the newest driver's (an agent restarted in-process, a test's).
_watching: dict[Path, DhcpServers] = {}
_watching_lock = threading.Lock()


@dataclass
class Server:
    network_id: str
    ns: str
    files: Files
    cmd: list[str]
    pid: int | None = None
    attempts: int = 0  # restarts since it last ran for a while
    started: float = 0.0
    retry_at: float = 0.0


class DhcpServers:
    """The DHCP job of the Linux driver: one step per network with a DHCP-served subnet."""

    def __init__(self, host: str, root: Path | None = None) -> None:
        self.host = host
        self.root = (root or RUN_ROOT) / names.host_ns(host)
        self.servers: dict[str, Server] = {}
        self._applied: dict[str, str] = {}  # network id -> the fingerprint of what its last step applied
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._closing = threading.Event()

    # -- the pass --------------------------------------------------------------------------

    def apply(self, run: Pass) -> None:
        served, ports = dhcp_conf.dhcp_subnets(run.state), dhcp_conf.ports_by_network(run.state)
        wanted = set()
        for net_id in run.networks:
            if net_id not in served:
                continue
            wanted.add(net_id)
            if net_id in run.broken:
                continue  # (its bridge failed: what it had stays)
            config = self._wanted(run.state, net_id, served[net_id], ports.get(net_id, []))
            fingerprint = fingerprint_of(config)
            if not run.full and self._applied.get(net_id) == fingerprint:
                continue  # (unchanged since it was applied; a server that died is the watcher's)
            with contextlib.suppress(StepFailed):
                run.steps.run(f"dhcp:{net_id}", lambda n=net_id, c=config: self._apply_network(n, c, run.full),
                              fingerprint)  # fmt: skip
                self._applied[net_id] = fingerprint
        with self._lock:
            for net_id in [n for n in self.servers if n not in wanted]:
                shutil.rmtree(self.root / net_id, ignore_errors=True)  # (first: nothing restarts it then)
                self._stop(self.servers.pop(net_id))
                self._applied.pop(net_id, None)
        if run.full:  # left by an agent before this one (its networks gone while it was down)
            for left in self._dirs() - wanted - set(self.servers):
                self._stop_dir(left)

    def step_keys(self, state: DesiredState) -> list[str]:
        served = dhcp_conf.dhcp_subnets(state)
        return [f"dhcp:{n}" for n in needed_networks(state) if n in served]

    def forget(self) -> None:
        self._applied.clear()  # (what runs is read back from the pid files and /proc)

    def close(self) -> None:
        """Stop watching (the servers go on answering, as devices stay: a restarted agent adopts them)."""
        self._closing.set()

    def teardown(self) -> None:
        """Stop every server of this host and remove their files."""
        self._closing.set()
        with _watching_lock:
            watcher = _watching.pop(self.root, None)
        if watcher is not None:
            watcher.close()
        with self._lock:
            self.servers.clear()
            for left in self._dirs():
                self._stop_dir(left)
        shutil.rmtree(self.root, ignore_errors=True)

    def _wanted(self, state: DesiredState, net_id: str, subnets: list[dict[str, Any]], ports: list[dict[str, Any]]
                ) -> tuple[list[str], str, str]:  # fmt: skip
        """The network's dnsmasq command line, hosts file and options file."""
        network = state["networks"][net_id]
        iface = names.metadata_iface(network["metadata_port"]["id"])
        cmd = dhcp_conf.command(Files(self.root / net_id), iface, network["mtu"], subnets)
        hosts = dhcp_conf.hosts_lines(ports, dhcp_conf.leased(subnets))
        opts = dhcp_conf.opts_lines(state, net_id, subnets)
        return cmd, "".join(f"{line}\n" for line in hosts), "".join(f"{line}\n" for line in opts)

    def _apply_network(self, net_id: str, config: tuple[list[str], str, str], full: bool) -> None:
        cmd, hosts, opts = config
        files = Files(self.root / net_id)
        files.dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        changed = [_write_atomic(files.hosts, hosts), _write_atomic(files.opts, opts)]
        with self._lock:
            server = self.servers.get(net_id)
            if server is None or server.cmd != cmd:
                if server is not None:
                    self._stop(server)
                server = Server(net_id, names.metadata_ns(self.host, net_id), files, cmd, pid=_running(files, cmd))
                self.servers[net_id] = server
            elif server.pid is not None and not _alive(server.pid, cmd):
                server.pid = None
            if server.pid is not None and full and not _in_namespace(server.pid, server.ns):
                self._stop(server)  # its namespace was made anew: it answers on nothing
            if server.pid is None:
                self._start(server)
            elif any(changed):
                os.kill(server.pid, signal.SIGHUP)  # rereads the hosts and options files
        self._watch()

    # -- the processes ---------------------------------------------------------------------

    def _start(self, server: Server) -> None:
        """Start the server's dnsmasq (it daemonizes once it listens); raises with dnsmasq's reason."""
        server.files.pid.unlink(missing_ok=True)
        try:
            done = subprocess.run(["ip", "netns", "exec", server.ns, *server.cmd], capture_output=True, text=True,
                                  timeout=START_TIMEOUT)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError("dnsmasq did not start in time") from exc
        pid = _read_pid(server.files) if done.returncode == 0 else None
        if pid is None or not _alive(pid, server.cmd):
            reason = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(f"dnsmasq failed to start: {reason[-1] if reason else f'exit {done.returncode}'}")
        server.pid, server.started = pid, time.monotonic()

    def _stop(self, server: Server) -> None:
        if server.pid is not None:
            _terminate(server.pid, server.cmd)
        server.pid = None

    def _stop_dir(self, net_id: str) -> None:
        files = Files(self.root / net_id)
        pid = _read_pid(files)
        shutil.rmtree(files.dir, ignore_errors=True)
        if pid is not None and f"--pid-file={files.pid}" in _cmdline(pid):
            _terminate(pid, _cmdline(pid))

    def _dirs(self) -> set[str]:
        return {p.name for p in self.root.iterdir() if p.is_dir()} if self.root.is_dir() else set()

    # -- the watcher -----------------------------------------------------------------------

    def _watch(self) -> None:
        with _watching_lock:
            before = _watching.get(self.root)
            if before is not None and before is not self:
                before.close()
            _watching[self.root] = self
        if self._watcher is None or not self._watcher.is_alive():
            self._watcher = threading.Thread(target=self._watch_loop, name="cloudnet-dhcp", daemon=True)
            self._watcher.start()

    def _watch_loop(self) -> None:
        while not self._closing.wait(WATCH_EVERY):
            with self._lock:
                for server in list(self.servers.values()):
                    self._look_after(server)

    def _look_after(self, server: Server) -> None:
        """Restart a server that died, with backoff; one whose namespace went is left to the next pass."""
        now = time.monotonic()
        if not netns.exists(server.ns) or not server.files.dir.is_dir():
            return  # (gone with its network, or the host torn down: the next pass decides)
        if server.pid is not None:
            if _alive(server.pid, server.cmd):
                return
            log.warning("dnsmasq of network %s (pid %s) died; restarting", server.network_id, server.pid)
            if now - server.started > MAX_BACKOFF:
                server.attempts = 0
            server.pid, server.retry_at = None, now
        if now < server.retry_at:
            return
        try:
            self._start(server)
        except Exception as exc:  # (the next pass's step reports it)
            server.attempts += 1
            server.retry_at = now + min(FIRST_RETRY * 2**server.attempts, MAX_BACKOFF)
            log.error("network %s: %s; next attempt in %.1f s", server.network_id, exc, server.retry_at - now)


def _write_atomic(path: Path, text: str) -> bool:
    """Write `path` whole or not at all (dnsmasq may reread it at any time); False when it was already so."""
    with contextlib.suppress(FileNotFoundError):
        if path.read_text() == text:
            return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)  # (dnsmasq rereads it after dropping its privileges)
    tmp.replace(path)
    return True


def _read_pid(files: Files) -> int | None:
    try:
        return int(files.pid.read_text().strip())
    except (OSError, ValueError):
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1]


def _alive(pid: int, cmd: list[str]) -> bool:
    """The process `pid` is that dnsmasq (not a reused pid); a zombie is dead."""
    if _cmdline(pid) != cmd:
        return False
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def _running(files: Files, cmd: list[str]) -> int | None:
    pid = _read_pid(files)
    return pid if pid is not None and _alive(pid, cmd) else None


def _in_namespace(pid: int, ns: str) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(netns.path_of(ns)).st_ino
    except OSError:
        return False


def _terminate(pid: int, cmd: list[str], wait: float = 2.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while _alive(pid, cmd):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.01)

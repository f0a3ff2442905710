"""dnsmasq processes of the Linux driver, one per object (a network's DHCP server, a router's advertisements),
each in a namespace and a directory of its own under <root>/<key>, run as Neutron's DHCP agent runs its own: a
daemon with a pid file, so that a restarted agent adopts it (its /proc cmdline must be the wanted one); a change of
its files is a SIGHUP (dnsmasq rereads its hosts and options files), only a changed command line restarts it; a
watcher thread restarts one that died, with backoff. Which objects want one, and what it is told, is the job's
(dhcp.py, radverts.py): this module only keeps them running."""

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

from cloudnet import metrics
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.steps import FIRST_RETRY

log = logging.getLogger(__name__)
WATCH_EVERY = 0.5  # seconds between looks at the servers (a dead one is restarted on the next look)
MAX_BACKOFF = 60.0
START_TIMEOUT = 5.0
PID_FILE = "pid"
# One watcher per directory in a process: the newest driver's (an agent restarted in-process, a test's).
_watching: dict[Path, Dnsmasqs] = {}
_watching_lock = threading.Lock()


@dataclass
class Server:
    key: str
    ns: str
    dir: Path
    cmd: list[str]
    pid: int | None = None
    attempts: int = 0  # restarts since it last ran for a while
    started: float = 0.0
    retry_at: float = 0.0

    @property
    def pid_file(self) -> Path:
        return self.dir / PID_FILE


class Dnsmasqs:
    """The dnsmasq processes under `root`, by key."""

    def __init__(self, root: Path, what: str) -> None:
        self.root = root
        self.what = what  # what one serves, for the logs ("network", "router")
        self.servers: dict[str, Server] = {}
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._closing = threading.Event()

    def directory(self, key: str) -> Path:
        return self.root / key

    def ensure(
        self, key: str, ns: str, cmd: list[str], files: dict[str, str], full: bool,
        leases: tuple[Path, Path, dict[str, str]] | None = None,
    ) -> None:  # fmt: skip
        """`key`'s dnsmasq runs `cmd` in `ns` with these files (name -> text, written atomically first; `cmd` names
        the pid file `directory(key)/pid`): started, restarted for a new command line or namespace, or told to
        reread its files (SIGHUP) when one changed. `leases`: its static leases (`sync_leases`: hosts file, hosts
        directory, lines by port). Raises with dnsmasq's reason when it cannot start."""
        where = self.directory(key)
        where.mkdir(mode=0o755, parents=True, exist_ok=True)
        changed = [write_atomic(where / name, text) for name, text in files.items()]
        if leases is not None:
            changed.append(sync_leases(*leases))
        with self._lock:
            server = self.servers.get(key)
            if server is None or server.cmd != cmd or server.ns != ns:
                if server is not None:
                    self._stop(server)
                server = Server(key, ns, where, cmd, pid=_running(where / PID_FILE, cmd))
                self.servers[key] = server
            elif server.pid is not None and not _alive(server.pid, cmd):
                server.pid = None
            if server.pid is not None and full and not _in_namespace(server.pid, server.ns):
                self._stop(server)  # its namespace was made anew: it answers on nothing
            if server.pid is None:
                self._start(server)
            elif any(changed):
                os.kill(server.pid, signal.SIGHUP)  # rereads the hosts and options files
        self._watch()

    def keep_only(self, wanted: set[str], full: bool) -> None:
        """Stop every server not wanted (its files first: nothing restarts it then); on a full pass also those an
        agent before this one left (their objects gone while it was down)."""
        with self._lock:
            for key in [k for k in self.servers if k not in wanted]:
                shutil.rmtree(self.directory(key), ignore_errors=True)
                self._stop(self.servers.pop(key))
        if full:
            for left in self._dirs() - wanted - set(self.servers):
                self._stop_dir(left)

    def close(self) -> None:
        """Stop watching (the servers go on answering, as devices stay: a restarted agent adopts them)."""
        self._closing.set()

    def teardown(self) -> None:
        """Stop every server under the root and remove their files."""
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

    # -- the processes ---------------------------------------------------------------------

    def _start(self, server: Server) -> None:
        """Start the server's dnsmasq (it daemonizes once it listens); raises with dnsmasq's reason."""
        server.pid_file.unlink(missing_ok=True)
        try:
            done = subprocess.run(["ip", "netns", "exec", server.ns, *server.cmd], capture_output=True, text=True,
                                  timeout=START_TIMEOUT)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError("dnsmasq did not start in time") from exc
        pid = _read_pid(server.pid_file) if done.returncode == 0 else None
        if pid is None or not _alive(pid, server.cmd):
            reason = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(f"dnsmasq failed to start: {reason[-1] if reason else f'exit {done.returncode}'}")
        server.pid, server.started = pid, time.monotonic()

    def _stop(self, server: Server) -> None:
        if server.pid is not None:
            _terminate(server.pid, server.cmd)
        server.pid = None

    def _stop_dir(self, key: str) -> None:
        pid_file = self.directory(key) / PID_FILE
        pid = _read_pid(pid_file)
        shutil.rmtree(self.directory(key), ignore_errors=True)
        if pid is not None and f"--pid-file={pid_file}" in _cmdline(pid):
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
            self._watcher = threading.Thread(target=self._watch_loop, name=f"cloudnet-dnsmasq-{self.what}", daemon=True)
            self._watcher.start()

    def _watch_loop(self) -> None:
        while not self._closing.wait(WATCH_EVERY):
            with self._lock:
                for server in list(self.servers.values()):
                    self._look_after(server)

    def _look_after(self, server: Server) -> None:
        """Restart a server that died, with backoff; one whose namespace went is left to the next pass."""
        now = time.monotonic()
        if not netns.exists(server.ns) or not server.dir.is_dir():
            return  # (gone with its object, or the host torn down: the next pass decides)
        if server.pid is not None:
            if _alive(server.pid, server.cmd):
                return
            log.warning("dnsmasq of %s %s (pid %s) died; restarting", self.what, server.key, server.pid)
            metrics.DNSMASQ_RESTARTS.inc()
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
            log.error("%s %s: %s; next attempt in %.1f s", self.what, server.key, exc, server.retry_at - now)


def write_atomic(path: Path, text: str) -> bool:
    """Write `path` whole or not at all (dnsmasq may reread it at any time); False when it was already so."""
    with contextlib.suppress(FileNotFoundError):
        if path.read_text() == text:
            return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)  # (dnsmasq rereads it after dropping its privileges)
    tmp.replace(path)
    return True


def sync_leases(bulk: Path, new: Path, wanted: dict[str, str]) -> bool:
    """Static leases (port id -> its dhcp-host lines) in a --dhcp-hostsfile `bulk` and a --dhcp-hostsdir `new`.
    Only a few ports added: a file each in `new`, which dnsmasq reads as it appears (inotify), at no cost to the
    others. Any other change (or `new` filling up): everything in `bulk`, `new` emptied, and True: the caller sends
    SIGHUP (dnsmasq rereads both, and forgets what it read from either only then). One file, not one per port,
    keeps that reread short."""
    new.mkdir(mode=0o755, exist_ok=True)
    current = _blocks(bulk)
    in_new = [p for p in new.iterdir() if not p.name.startswith(".")]
    for path in in_new:
        current[path.name] = path.read_text()
    added = wanted.keys() - current.keys()
    unchanged = all(wanted.get(port) == text for port, text in current.items())
    if unchanged and bulk.exists() and len(in_new) + len(added) <= NEW_FILES:
        for port in sorted(added):
            write_atomic(new / port, wanted[port])
        return False
    write_atomic(bulk, "".join(f"{BLOCK}{port}\n{wanted[port]}" for port in sorted(wanted)))
    for path in new.iterdir():
        path.unlink(missing_ok=True)
    return True


NEW_FILES = 64  # ports in files of their own at most (then all go to the hosts file, with a reread)
BLOCK = "#port "  # (a comment to dnsmasq: where one port's lines start in the bulk file)


def _blocks(bulk: Path) -> dict[str, str]:
    try:
        text = bulk.read_text()
    except FileNotFoundError:
        return {}
    found = {}
    for block in text.split(BLOCK)[1:]:
        port, _nl, lines = block.partition("\n")
        found[port] = lines
    return found


def _read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
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


def _running(pid_file: Path, cmd: list[str]) -> int | None:
    pid = _read_pid(pid_file)
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

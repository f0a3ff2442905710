"""containerd from Debian as a CNI runtime: a daemon of the test's own (root, state, socket and configuration in a
short temporary directory; no CRI, no image, no registry), containers run by `ctr run --rootfs` on a busybox root
the test builds, networked by `ctr run --cni`.

ctr's CNI library (gocni) reads fixed directories, /etc/cni/net.d (the first conflist there) and /opt/cni/bin, and
calls the plugins from the ctr process itself: ADD in `ctr run`; DEL in a foreground `ctr run` once its task has
ended and, from containerd 1.7 on, in `ctr task kill`. So each ctr command that may call a plugin runs in a mount
namespace of its own where those two are the test's directories: the machine's are neither read nor touched."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.cni import PLUGIN
from tests.support.installed import require, require_commands
from tests.support.podman import APPLETS, BUSYBOX

NAMESPACE = "cloudnet"  # containerd's; gocni names a container `<namespace>-<id>` to the plugins
# Only what `ctr run --rootfs` needs: no CRI (Kubernetes' API, with its own CNI setup), no opt plugin (it would
# make /opt/containerd).
CONFIG = """version = 2
root = "{work}/root"
state = "{work}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt"]
[grpc]
  address = "{work}/ctr.sock"
[ttrpc]
  address = "{work}/ctr.sock.ttrpc"
"""
# The private mount namespace of a ctr command: the test's conflist directory over /etc/cni/net.d (podman's package
# makes that directory on both releases) and its plugin directory at /opt/cni/bin, under a tmpfs over /opt since
# /opt/cni need not exist. Private propagation (unshare's default): nothing of this shows outside.
WRAP = """set -e
mount --bind "$1" /etc/cni/net.d
mount -t tmpfs -o mode=0755,size=64k cloudnet-test /opt
mkdir -p /opt/cni/bin
mount --bind "$2" /opt/cni/bin
shift 2
exec "$@"
"""
TIMEOUT = 60.0


def require_containerd() -> None:
    require_commands("containerd", "containerd", "ctr", "containerd-shim-runc-v2")
    require_commands("runc", "runc")
    require_commands("util-linux", "unshare", "nsenter")
    require(BUSYBOX.exists(), str(BUSYBOX), "busybox-static")
    require(Path("/etc/cni/net.d").is_dir(), "/etc/cni/net.d", "podman")


@functools.cache
def version() -> tuple[int, ...]:
    """ctr's version (1.6.20 on Debian 12, 1.7.24 on 13); () without ctr."""
    if shutil.which("ctr") is None:
        return ()
    out = subprocess.run(["ctr", "--version"], capture_output=True, text=True).stdout
    found = re.search(r"\s(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(n) for n in found.groups()) if found else ()


def del_in_kill() -> bool:
    """Whether `ctr task kill` runs DEL (before it signals the task): containerd 1.7 on; 1.6's ctr runs DEL only in
    a foreground `ctr run`, once its task has ended (a detached container's DEL is nobody's: GC collects it)."""
    return version() >= (1, 7)


def runtime_path() -> str:
    """Which containerd, and which ctr command runs DEL first (the tests' ids say it)."""
    found = version()
    if not found:
        return "containerd-missing"
    return f"containerd-{'.'.join(map(str, found))}-ctr-cni-del-by-{'kill' if del_in_kill() else 'run-exit'}"


@dataclass
class Container:
    name: str
    netd: Path  # its conflist directory (ctr reads it again for DEL)
    run: subprocess.Popen[bytes]  # the foreground `ctr run`
    pid: int = 0  # the container's first process
    killed: bool = False

    @property
    def cni_id(self) -> str:
        return f"{NAMESPACE}-{self.name}"

    @property
    def netns(self) -> str:
        return f"/proc/{self.pid}/ns/net"  # what ctr gives the plugins as CNI_NETNS


@dataclass
class Containerd:
    work: Path
    daemon: subprocess.Popen[bytes]
    containers: dict[str, Container] = field(default_factory=dict)

    @classmethod
    def make(cls) -> Containerd:
        """The daemon, answering; a busybox root (rootfs/) and the plugin directory (plugins/, cloudnet-cni alone)
        in its directory (short: the socket's path is at most 107 bytes)."""
        work = Path(tempfile.mkdtemp(prefix="cnictr.", dir="/tmp"))
        (work / "plugins").mkdir()
        (work / "plugins" / "cloudnet-cni").symlink_to(PLUGIN)
        rootfs = work / "rootfs"
        for sub in ("bin", "proc", "sys", "dev", "tmp"):
            (rootfs / sub).mkdir(parents=True)
        shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
        for applet in APPLETS:
            (rootfs / "bin" / applet).symlink_to("busybox")
        (work / "config.toml").write_text(CONFIG.format(work=work))
        with open(work / "containerd.log", "wb") as log:
            daemon = subprocess.Popen(["containerd", "--config", str(work / "config.toml")], stdout=log, stderr=log,
                                      start_new_session=True)  # fmt: skip
        runtime = cls(work, daemon)
        deadline = time.monotonic() + TIMEOUT
        while runtime.ctr("version", check=False).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                runtime.close()
                raise AssertionError(f"containerd did not answer: {(work / 'containerd.log').read_text()[-2000:]}")
            time.sleep(0.05)
        return runtime

    def ctr(
        self, *args: str, netd: Path | None = None, check: bool = True, timeout: float = TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """A ctr command; with `netd` (a conflist directory), in the private mount namespace where CNI calls see it."""
        proc = subprocess.run(self._command(args, netd), capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args[:3])}... failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def _command(self, args: tuple[str, ...], netd: Path | None) -> list[str]:
        ctr = ["ctr", "--address", str(self.work / "ctr.sock"), "--namespace", NAMESPACE, *args]
        if netd is None:
            return ctr
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", WRAP, "wrap", str(netd),
                str(self.work / "plugins"), *ctr]  # fmt: skip

    def network(self, conf: dict[str, Any]) -> Path:
        """A conflist of one plugin (the runtime merges its name and cniVersion into the plugin's configuration),
        alone in a directory of its own: gocni takes the first conflist of /etc/cni/net.d."""
        plugin = {k: v for k, v in conf.items() if k not in ("name", "cniVersion")}
        netd = self.work / f"net-{uuid.uuid4().hex[:8]}"
        netd.mkdir()
        conflist = {"cniVersion": "1.0.0", "name": str(conf["name"]), "plugins": [plugin]}
        (netd / "50-cloudnet.conflist").write_text(json.dumps(conflist))
        return netd

    def start(self, name: str, netd: Path, env: dict[str, str] | None = None) -> Container:
        """`ctr run --cni` in the foreground (as a shell would keep it), once its task runs: ADD has succeeded.
        `env`: more of ctr's environment."""
        found = self.try_start(name, netd, env)
        if isinstance(found, str):
            raise AssertionError(f"ctr run {name} failed: {found}")
        return found

    def try_start(
        self, name: str, netd: Path, env: dict[str, str] | None = None, options: tuple[str, ...] = ()
    ) -> Container | str:
        """The running container, or ctr's error when it never ran (the container record removed). `options`:
        more of `ctr run`'s."""
        args = ("run", "--rootfs", "--cni", "--null-io", "--cgroup", f"/cnictr-{name}", "--env", "PATH=/bin",
                *options, str(self.work / "rootfs"), name, "/bin/sleep", "600")  # fmt: skip
        with open(self.work / f"{name}.err", "wb") as err:
            run = subprocess.Popen(self._command(args, netd), stdout=subprocess.DEVNULL, stderr=err,
                                   env={**os.environ, **(env or {})})  # fmt: skip
        container = self.containers[name] = Container(name, netd, run)
        deadline = time.monotonic() + TIMEOUT
        while (task := self.tasks().get(name, (0, "")))[1] != "RUNNING":
            if run.poll() is not None:
                self.remove(name)
                return (self.work / f"{name}.err").read_text().strip()
            assert time.monotonic() < deadline, f"{name}: no running task in {TIMEOUT:g} s"
            time.sleep(0.05)
        container.pid = task[0]
        return container

    def tasks(self) -> dict[str, tuple[int, str]]:
        """Each task's pid and status, as `ctr task ls` lists them."""
        lines = self.ctr("task", "ls").stdout.splitlines()[1:]
        return {name: (int(pid), status) for name, pid, status in (line.split() for line in lines)}

    def running(self) -> list[str]:
        """The CNI container ids of the running tasks (what a runtime gives GC as valid attachments)."""
        return [f"{NAMESPACE}-{name}" for name, (_, status) in self.tasks().items() if status == "RUNNING"]

    def exec(self, name: str, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """`ctr task exec`, the command's output written to files of the container's root and read from there: so
        it ran in the container's own root (runc started from a chroot ran commands in the host's instead, with the
        host's binaries: no file, nothing read)."""
        out = f"tmp/exec-{uuid.uuid4().hex[:12]}"
        proc = self.ctr("task", "exec", "--exec-id", out[-12:], name, "/bin/sh", "-c", '"$@" >"/$0.out" 2>"/$0.err"',
                        out, *cmd, check=False, timeout=timeout)  # fmt: skip
        stdout, stderr = (self.work / "rootfs" / f"{out}.out", self.work / "rootfs" / f"{out}.err")
        result = subprocess.CompletedProcess(cmd, proc.returncode, "", proc.stderr)
        if stdout.exists():
            result.stdout, result.stderr = stdout.read_text(), stderr.read_text() + proc.stderr
        stdout.unlink(missing_ok=True)
        stderr.unlink(missing_ok=True)
        return result

    def kill(self, name: str) -> None:
        """`ctr task kill -s KILL` (from 1.7 on, its DEL first)."""
        container = self.containers[name]
        self.ctr("task", "kill", "-s", "KILL", name, netd=container.netd)
        container.killed = True

    def stop(self, name: str) -> None:
        """As a user stops it: `ctr task kill` (unless done), the foreground `ctr run` returns (its DEL once the
        task has ended), the container record goes."""
        container = self.containers[name]
        if not container.killed:
            self.kill(name)
        container.run.wait(TIMEOUT)
        self.remove(name)

    def crash(self, name: str) -> None:
        """The runtime's client and the container die outright (SIGKILL): nothing runs a DEL."""
        container = self.containers[name]
        container.run.kill()
        container.run.wait(TIMEOUT)
        os.kill(container.pid, signal.SIGKILL)
        deadline = time.monotonic() + TIMEOUT
        while self.tasks().get(name, (0, "RUNNING"))[1] == "RUNNING":
            assert time.monotonic() < deadline, f"{name} still runs"
            time.sleep(0.05)

    def remove(self, name: str) -> None:
        """Its task and record gone (neither `ctr task delete` nor `ctr container delete` runs a DEL, on 1.6 as on
        1.7: a container still running here keeps its instance)."""
        container = self.containers.pop(name)
        if container.run.poll() is None:
            container.run.kill()
            container.run.wait(TIMEOUT)
        self.ctr("task", "delete", "--force", name, check=False)
        self.ctr("container", "delete", name, check=False)

    def close(self) -> None:
        """Containers, the daemon (by its PID), shims left (by PID: those whose command line names this daemon's
        socket; a shim ends with its last task, so normally none), the directory."""
        for name in list(self.containers):
            self.remove(name)
        self.daemon.terminate()
        try:
            self.daemon.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait(TIMEOUT)
        address = f"{self.work}/ctr.sock".encode()
        for proc in Path("/proc").iterdir():
            with contextlib.suppress(OSError, ValueError):
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                if "containerd-shim" in argv[0].decode() and address in argv:
                    os.kill(int(proc.name), signal.SIGKILL)
        shutil.rmtree(self.work, ignore_errors=True)

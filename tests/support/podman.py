"""Podman from Debian with storage, state and network configuration of its own (a temporary root), a local busybox
image imported from a tarball (no registry), and cloudnet's plugin for its network backend: podman 4 (Debian 12)
through CNI and cloudnet-cni, podman 5 (Debian 13, built without CNI) through netavark and cloudnet-netavark. The
flags this machine needs are ../shared/recipes/podman-cni.sh's: runc, cgroupfs, lowered ulimits."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import installed
from tests.support.cni import PLUGIN, invoke
from tests.support.netavark import NETAVARK_PLUGIN, run_plugin

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "ip", "ping", "wget", "cat", "sleep", "ifconfig", "route")
ULIMITS = ("--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096")


def require() -> None:
    """podman, runc and busybox-static are what `make deps` installs for these tests: missing, the test fails."""
    installed.require_commands("podman and runc", "podman", "runc")
    installed.require(BUSYBOX.exists(), str(BUSYBOX), "busybox-static")


def version() -> tuple[int, ...]:
    """The installed podman's version ((0,) without one)."""
    if shutil.which("podman") is None:
        return (0,)
    out = subprocess.run(["podman", "--version"], capture_output=True, text=True, timeout=30).stdout.split()
    return tuple(int(p) for p in (out[-1] if out else "0").split("-")[0].split(".") if p.isdigit()) or (0,)


# Podman 5 has only netavark (Debian's is built without CNI); podman 4 is run with CNI, as the README's block.
BACKEND = "netavark" if version() >= (5,) else "cni"
DRIVER = "cloudnet-netavark" if BACKEND == "netavark" else "cloudnet-cni"  # the plugin, and its instances' mark


def describe() -> str:
    return f"podman {'.'.join(map(str, version()))}: {BACKEND} backend through {DRIVER}"


@dataclass
class Podman:
    work: Path
    image: str

    @classmethod
    def make(cls, label: str) -> Podman:
        """Its configuration, plugin directory (with cloudnet's plugin, and for CNI then Debian's plugins), OCI
        hooks directory (hooks.d, empty) and image, in a directory of its own (short: podman refuses a runroot path
        over 50 characters)."""
        work = Path(tempfile.mkdtemp(prefix="cnipm.", dir="/tmp"))
        for sub in ("net.d", "plugins", "hooks.d"):
            (work / sub).mkdir()
        plugins = work / "plugins"
        if BACKEND == "netavark":
            (plugins / DRIVER).symlink_to(NETAVARK_PLUGIN)
            network = f'netavark_plugin_dirs = ["{plugins}"]'
        else:
            (plugins / DRIVER).symlink_to(PLUGIN)
            network = f'cni_plugin_dirs = ["{plugins}", "/usr/lib/cni"]'
        (work / "containers.conf").write_text(
            f'[network]\nnetwork_backend = "{BACKEND}"\n{network}\nnetwork_config_dir = "{work / "net.d"}"\n'
            f'[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nhooks_dir = ["{work / "hooks.d"}"]\n'
        )
        podman = cls(work, f"localhost/cnitest-{label}:1")
        podman.image_of(podman.image)
        return podman

    def image_of(self, name: str, files: dict[str, Path] | None = None, links: dict[str, str] | None = None) -> str:
        """An image imported from a tarball: busybox and its applets, `files` (path in the image: host file) and
        symlinks (path: target)."""
        tarball = self.work / "rootfs.tar"
        with tarfile.open(tarball, "w") as tar:
            tar.add(BUSYBOX, "bin/busybox")
            for path, source in (files or {}).items():
                tar.add(source, path)
            for path, target in [*((f"bin/{a}", "busybox") for a in APPLETS), *(links or {}).items()]:
                link = tarfile.TarInfo(path)
                link.type, link.linkname = tarfile.SYMTYPE, target
                tar.addfile(link)
        # PATH is the image's own: podman 5's exec otherwise resolves a bare command against its default PATH,
        # where a name the image lacks (/usr/bin/ping) is found on the host and the exec fails.
        self.run("import", "-q", "--change", "ENV=PATH=/bin", str(tarball), name)
        tarball.unlink()
        return name

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = ["podman", "--root", str(self.work / "root"), "--runroot", str(self.work / "runroot"), *args]
        env = {"CONTAINERS_CONF": str(self.work / "containers.conf"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
               "TMPDIR": str(self.work), "PODMAN_IGNORE_CGROUPSV1_WARNING": "1"}  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args[:3])}... failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def network(self, conf: dict[str, Any]) -> str:
        """cloudnet's network from a cloudnet-cni configuration (tests/support/cni.py's): for CNI a conflist of one
        plugin (the runtime merges its name and cniVersion into the plugin's configuration); for netavark a network
        of cloudnet-netavark's whose options are the configuration's keys."""
        name = str(conf["name"])
        if BACKEND == "netavark":
            options = [o for k, v in conf.items() if k not in ("name", "cniVersion", "type")
                       for o in ("-o", f"{k}={','.join(v) if isinstance(v, list) else v}")]  # fmt: skip
            self.run("network", "create", "-d", DRIVER, *options, name)
            return name
        plugin = {k: v for k, v in conf.items() if k not in ("name", "cniVersion")}
        plugin.setdefault("capabilities", {"ips": True})  # podman run --ip
        conflist = {"cniVersion": "1.0.0", "name": name, "plugins": [plugin]}
        (self.work / "net.d" / f"50-{name}.conflist").write_text(json.dumps(conflist))
        return name

    def start(self, name: str, network: str, *options: str, image: str | None = None) -> str:
        """A container left running (`sleep`); its full id. `options`: more of `podman run`'s."""
        out = self.run("run", "-d", "--name", name, *ULIMITS, "--network", network, *options, image or self.image,
                       "/bin/sleep", "600")  # fmt: skip
        return out.stdout.strip()

    def exec(self, name: str, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """`cmd` in the container's namespaces and root, by its pid: runc's exec (podman exec) run from a chroot,
        as the Debian 13 root is, lands in the host's root instead of the container's."""
        pid = json.loads(self.run("inspect", name).stdout)[0]["State"]["Pid"]
        return subprocess.run(["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w", *cmd],
                              capture_output=True, text=True, timeout=timeout, env={"PATH": "/bin"})  # fmt: skip

    def running(self) -> list[str]:
        return self.run("ps", "-q", "--no-trunc", "--filter", "status=running").stdout.split()

    def other_network(self, label: str) -> str:
        """A network of another plugin's (no cloudnet instance): CNI's loopback, or netavark's internal bridge."""
        if BACKEND == "netavark":
            self.run("network", "create", "--internal", "--disable-dns", f"other-{label}")
            return f"other-{label}"
        return self.network({"cniVersion": "1.0.0", "name": f"other-{label}", "type": "loopback"})

    def collect(self, network: str, conf: dict[str, Any]) -> tuple[int, Any]:
        """What an administrator runs for crashed containers (the README's): the plugin's GC with the containers
        this podman still runs. CNI: CNI_COMMAND=GC with them as valid attachments; netavark: `cloudnet-netavark
        gc` with the network's JSON and their ids."""
        if BACKEND == "cni":
            valid = [{"containerID": c, "ifname": "eth0"} for c in self.running()]
            return invoke("GC", {**conf, "cni.dev/valid-attachments": valid})
        spec = self.run("network", "inspect", "--format", "{{json .}}", network).stdout
        return run_plugin(spec, "gc", *self.running())

    def crash(self, name: str) -> None:
        """The runtime dies with its container: conmon and the container killed outright, and the runtime's state
        gone (its mounts and the container's namespace unmounted, its directory removed): nothing runs a DEL."""
        state = json.loads(self.run("inspect", name).stdout)[0]
        netns = state["NetworkSettings"]["SandboxKey"]
        for pid in (state["State"]["ConmonPid"], state["State"]["Pid"]):
            os.kill(pid, signal.SIGKILL)
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for point in [*reversed([m for m in mounts if m.startswith(f"{self.work}/")]), netns]:
            subprocess.run(["umount", "-l", point], capture_output=True)
        Path(netns).unlink(missing_ok=True)
        shutil.rmtree(self.work, ignore_errors=True)

    def close(self) -> None:
        self.run("rm", "-af", "-t", "0", check=False)
        self.run("rmi", "-af", check=False)
        shutil.rmtree(self.work, ignore_errors=True)

"""Podman from Debian with storage, state and CNI configuration of its own (a temporary root), a local busybox
image imported from a tarball (no registry), and cloudnet-cni among its plugins. The flags this machine needs
are ../shared/recipes/podman-cni.sh's: runc, cgroupfs, lowered ulimits, the CNI backend."""

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

from tests.support.cni import PLUGIN

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "ip", "ping", "wget", "cat", "sleep", "ifconfig", "route")
ULIMITS = ("--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096")


def available() -> bool:
    return shutil.which("podman") is not None and BUSYBOX.exists() and shutil.which("runc") is not None


@dataclass
class Podman:
    work: Path
    image: str

    @classmethod
    def make(cls, label: str) -> Podman:
        """Its configuration, plugin directory (with cloudnet-cni, then Debian's plugins), OCI hooks directory
        (hooks.d, empty) and image, in a directory of its own (short: podman refuses a runroot path over 50
        characters)."""
        work = Path(tempfile.mkdtemp(prefix="cnipm.", dir="/tmp"))
        for sub in ("net.d", "plugins", "hooks.d"):
            (work / sub).mkdir()
        (work / "plugins" / "cloudnet-cni").symlink_to(PLUGIN)
        (work / "containers.conf").write_text(
            f'[network]\nnetwork_backend = "cni"\ncni_plugin_dirs = ["{work / "plugins"}", "/usr/lib/cni"]\n'
            f'network_config_dir = "{work / "net.d"}"\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'
            f'hooks_dir = ["{work / "hooks.d"}"]\n'
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
        self.run("import", "-q", str(tarball), name)
        tarball.unlink()
        return name

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = ["podman", "--root", str(self.work / "root"), "--runroot", str(self.work / "runroot"), *args]
        env = {"CONTAINERS_CONF": str(self.work / "containers.conf"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
               "TMPDIR": str(self.work)}  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args[:3])}... failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def network(self, conf: dict[str, Any]) -> str:
        """A conflist of one plugin: the runtime merges its name and cniVersion into the plugin's configuration."""
        name = str(conf["name"])
        plugin = {k: v for k, v in conf.items() if k not in ("name", "cniVersion")}
        conflist = {"cniVersion": "1.0.0", "name": name, "plugins": [plugin]}
        (self.work / "net.d" / f"50-{name}.conflist").write_text(json.dumps(conflist))
        return name

    def start(self, name: str, network: str, *options: str, image: str | None = None) -> str:
        """A container left running (`sleep`); its full id. `options`: more of `podman run`'s."""
        out = self.run("run", "-d", "--name", name, *ULIMITS, "--network", network, *options, image or self.image,
                       "/bin/sleep", "600")  # fmt: skip
        return out.stdout.strip()

    def exec(self, name: str, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return self.run("exec", name, *cmd, check=False, timeout=timeout)

    def running(self) -> list[str]:
        return self.run("ps", "-q", "--no-trunc", "--filter", "status=running").stdout.split()

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

"""The Debian 12 guest with cloud-init (issue 28): built by the test setup with mmdebstrap from the mirror the
host's apt uses, cached outside the checkout, booted by direct kernel boot.

The cache entry (`/var/cache/cloudnet-tests/guests/debian12-<hash of the build inputs>/`) holds the kernel, its
initramfs and the root filesystem as a raw ext4 image (`mke2fs -d`: no partitions, no bootloader). Boots attach
the image with `snapshot=on`, so the cached image is never written and every boot is a first boot. Concurrent
pytest-xdist workers: one builds under a file lock in a temporary directory that is renamed into place; the
others wait on the lock and find it built.

Boot it with qemu.py (`running_vm(guest, ...)`, `memory_mb=MEMORY_MB`). What a test reads from the guest: a unit
ordered after cloud-final.service (guest_results.py) prints, between markers on the first serial port, what
cloud-init reports and what it applied.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support import guest_results
from tests.support.guests import CACHE as TEST_CACHE
from tests.support.guests import locked

MEMORY_MB = 1024  # what cloud-init's Python and Debian's systemd boot in without swapping
CACHE = TEST_CACHE / "guests"
RELEASE = "bookworm"
# openssh-server: cloud-init applies ssh keys through its ssh module only where sshd is installed. ifupdown: the
# renderer cloud-init 22.4 picks first on Debian (eni); isc-dhcp-client (a cloud-init dependency) is what its
# ephemeral DHCP runs for the OpenStack datasource. dbus: hostnamectl, which cloud-init sets the hostname with.
# python3-serial: the SmartOS datasource's serial port (also a cloud-init dependency: named as the issue asks).
PACKAGES = ("linux-image-amd64", "cloud-init", "openssh-server", "python3-serial", "ifupdown", "isc-dhcp-client",
            "iproute2", "udev", "systemd-sysv", "dbus", "sudo", "e2fsprogs", "netbase")  # fmt: skip
# The datasources of the issue, ConfigDrive first (a drive attached is the boot's intent), None last (a boot with
# none of them still finishes, and reports None).
CLOUD_CFG = """\
datasource_list: [ConfigDrive, OpenStack, SmartOS, Ec2, None]
# No bootloader on this image (direct kernel boot): nothing for grub-dpkg to record.
grub_dpkg: {enabled: false}
# Debian's default (en_US.UTF-8) is generated at every first boot, and fails: /etc/locale.gen lists none.
locale: C.UTF-8
# Host keys are made at every boot (each boot is a first one): one type keeps TCG boots short.
ssh_genkeytypes: [ed25519]
"""
# Only what boots a virtio disk with ext4 on it; the rest (virtio_net, iso9660, sr_mod) udev loads from the root.
INITRAMFS_MODULES = "virtio_pci\nvirtio_blk\next4\n"
# Documentation and translations are never read in a test boot: a smaller image, packed faster.
EXCLUDED = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
# Timers and services a test boot never needs (each costs seconds of emulated CPU).
MASKED = ("apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
          "e2scrub_reap.service", "fstrim.timer", "man-db.timer", "logrotate.timer", "getty@tty1.service",
          "serial-getty@ttyS0.service", "systemd-timesyncd.service")  # fmt: skip


@dataclass(frozen=True)
class DebianGuest:
    """A built guest: boot `kernel` + `initrd` with `root` as a virtio disk (never written: see boot_args)."""

    kernel: Path
    initrd: Path
    root: Path
    build_seconds: float  # of the build that made this entry (read from its build.json)

    def boot_args(self, cmdline: str = "") -> list[str]:
        """Kernel, initramfs and root disk for QEMU (qemu.py's `Bootable`); the root is opened read-only with a
        throwaway overlay (snapshot=on), so each boot starts from the image as built and leaves it so."""
        append = f"root=/dev/vda rw console=ttyS0 panic=-1 quiet {cmdline}".strip()
        return ["-kernel", str(self.kernel), "-initrd", str(self.initrd), "-append", append,
                "-drive", f"file={self.root},if=virtio,format=raw,snapshot=on"]  # fmt: skip


def mirrors(sources: str) -> tuple[str, str]:
    """The Debian archive and security URIs of the host's apt sources (one-line or deb822 form), else Debian's."""
    deb822 = re.findall(r"^\s*URIs:\s*(.+)$", sources, re.M)
    uris = deb822 + re.findall(r"^\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)", sources, re.M)
    found = [u.rstrip("/") for line in uris for u in line.split()]
    archive = next((u for u in found if u.endswith("/debian")), "http://deb.debian.org/debian")
    security = next((u for u in found if u.endswith("/debian-security")), "http://deb.debian.org/debian-security")
    return archive, security


def host_sources() -> str:
    paths = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list")),
             *sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))]  # fmt: skip
    return "\n".join(p.read_text() for p in paths if p.is_file())


def recipe() -> dict[str, object]:
    """Everything the image depends on; its hash names the cache entry."""
    archive, security = mirrors(host_sources())
    return {"release": RELEASE, "packages": PACKAGES, "cloud_cfg": CLOUD_CFG, "modules": INITRAMFS_MODULES,
            "masked": MASKED, "excluded": EXCLUDED, "results": guest_results.UNIT + guest_results.SCRIPT,
            "archive": archive, "security": security, "format": 1}  # fmt: skip


def stage(files: Path) -> None:
    """The files the customize hook copies into the root (mmdebstrap runs it with the root's path as $1)."""
    files.mkdir()
    (files / "90_cloudnet.cfg").write_text(CLOUD_CFG)
    (files / "cloudnet-results").write_text(guest_results.SCRIPT)
    (files / "cloudnet-results.service").write_text(guest_results.UNIT)
    (files / "modules").write_text(INITRAMFS_MODULES)
    masks = " ".join(MASKED)
    (files / "customize.sh").write_text(f"""set -eu
cd "$(dirname "$0")"
install -m 644 90_cloudnet.cfg "$1/etc/cloud/cloud.cfg.d/"
install -m 755 cloudnet-results "$1/usr/local/sbin/"
install -m 644 cloudnet-results.service "$1/etc/systemd/system/"
mkdir -p "$1/etc/systemd/system/cloud-init.target.wants"
ln -sf /etc/systemd/system/cloudnet-results.service "$1/etc/systemd/system/cloud-init.target.wants/"
for unit in {masks}; do ln -sf /dev/null "$1/etc/systemd/system/$unit"; done
echo '/dev/vda / ext4 rw 0 0' > "$1/etc/fstab"
echo debian12 > "$1/etc/hostname"
rm -f "$1"/etc/ssh/ssh_host_*
""")


def build(into: Path) -> None:
    """mmdebstrap the root into `into/root`, then pack the kernel, initramfs and root.img beside it."""
    archive, security = mirrors(host_sources())
    files = into / "files"
    stage(files)
    # Before the kernel's package runs update-initramfs: an initramfs of the listed modules only.
    setup = (f'mkdir -p "$1/etc/initramfs-tools/conf.d" && echo MODULES=list > "$1/etc/initramfs-tools/conf.d/'
             f'cloudnet" && cp {files}/modules "$1/etc/initramfs-tools/modules"')  # fmt: skip
    root = into / "root"
    # No timeout: a killed mmdebstrap would leave the host's /dev, /proc and /sys mounted in the root (see remove).
    done = subprocess.run(["mmdebstrap", "--variant=minbase", "--mode=root", "--format=directory", "--quiet",
                           "--aptopt=Acquire::Check-Valid-Until \"false\"", "--include=" + ",".join(PACKAGES),
                           *(f"--dpkgopt=path-exclude={path}" for path in EXCLUDED),
                           "--setup-hook=" + setup, f"--customize-hook=sh {files}/customize.sh \"$1\"",
                           RELEASE, str(root),
                           f"deb {archive} {RELEASE} main", f"deb {archive} {RELEASE}-updates main",
                           f"deb {security} {RELEASE}-security main"],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"mmdebstrap exited {done.returncode}:\n{done.stderr[-3000:]}")
    kernel = sorted((root / "boot").glob("vmlinuz-*"))[-1]
    shutil.copyfile(kernel, into / "vmlinuz")
    shutil.copyfile(root / "boot" / kernel.name.replace("vmlinuz", "initrd.img"), into / "initrd.img")
    used = int(subprocess.run(["du", "-sm", str(root)], capture_output=True, text=True, check=True).stdout.split()[0])
    # Room for what a boot writes (it goes to the snapshot overlay, but ext4 must see free blocks).
    subprocess.run(["mke2fs", "-q", "-t", "ext4", "-L", "cloudnet-root", "-d", str(root), str(into / "root.img"),
                    f"{used + used // 2 + 512}M"], check=True, capture_output=True, text=True)  # fmt: skip
    shutil.rmtree(root)
    shutil.rmtree(files)


def remove(work: Path) -> None:
    """Remove a build directory, unless something is still mounted inside it: mmdebstrap's root mode bind-mounts
    the host's /dev, /proc and /sys into the root while it runs (and unmounts them when it ends, even on failure;
    it is never killed from here for that reason), and a recursive removal would follow those mounts."""
    inside = str(work) + "/"
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    if any(m.startswith(inside) for m in mounts):
        raise RuntimeError(f"{work} still has mounts inside it: not removed")
    shutil.rmtree(work, ignore_errors=True)


def prune(cache: Path, keep: Path, unused_for: float = 2 * 86400) -> None:
    """Remove entries of other recipes (older checkouts' builds) that nothing used for `unused_for` seconds."""
    for entry in cache.glob("debian12-*"):
        stamp = entry / "build.json"
        if entry != keep and (not stamp.is_file() or time.time() - stamp.stat().st_mtime > unused_for):
            remove(entry)


def debian_guest(cache: Path = CACHE, builder: Callable[[Path], None] | None = None) -> DebianGuest:
    """The cached guest, built first (by `builder`, `build` unless given) if no entry has this recipe; several
    workers at once: one builds, the others wait and find it built."""
    inputs = json.dumps(recipe(), sort_keys=True).encode()
    entry = cache / f"debian12-{hashlib.sha256(inputs).hexdigest()[:16]}"
    with locked(cache / ".debian12.lock"):
        if not (entry / "build.json").is_file():
            work = Path(tempfile.mkdtemp(prefix=".build-debian12-", dir=cache))
            try:
                started = time.monotonic()
                (builder or build)(work)
                (work / "build.json").write_text(json.dumps({"seconds": round(time.monotonic() - started, 1),
                                                             "recipe": json.loads(inputs)}))  # fmt: skip
                os.chmod(work, 0o755)  # (mkdtemp's 0700: a VMM run as another user reads the entry too)
                shutil.rmtree(entry, ignore_errors=True)
                work.rename(entry)
            finally:
                remove(work)
        os.utime(entry / "build.json")  # (its last use: what prune goes by)
        prune(cache, keep=entry)
    seconds = float(json.loads((entry / "build.json").read_text())["seconds"])
    return DebianGuest(entry / "vmlinuz", entry / "initrd.img", entry / "root.img", seconds)

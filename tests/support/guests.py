"""The tiny guest: Debian's kernel and a busybox initramfs, built from Debian packages and cached outside the checkout.

`tiny_guest()` returns a `TinyGuest` (a kernel and an initrd to pass to QEMU with `-kernel`/`-initrd`), building it
on first use under `CACHE/guests/tiny-<key>/`. The key hashes every input: the kernel package (`linux-image-amd64`'s
dependency, e.g. `linux-image-6.1.0-56-amd64` on Debian 12, `linux-image-6.12.*+deb13-amd64` on 13) and its version
as apt sees them now, busybox-static's version, the module list, and the guest's scripts
(tests/support/guest_init.py) -- so a kernel update or an edited script builds a new guest. The kernel package is
fetched with `apt-get download` into `CACHE/debs/` and unpacked with `dpkg-deb -x` in a scratch directory: no kernel
is ever installed on the host.

Parallel pytest-xdist workers (and other runs) may ask at once: one builds under a file lock, into a scratch
directory renamed into place when complete; the others wait for the lock and find it built.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.support.guest_init import INIT, UDHCPC_SCRIPT

CACHE = Path(os.environ.get("CLOUDNET_TEST_CACHE", "/var/cache/cloudnet-tests"))
# virtio-net for the NICs; isofs with virtio-blk or an IDE CD-ROM (ata_piix, sr_mod) for a config drive; their
# dependencies are added from modules.dep, and any the kernel has built in are skipped.
MODULES = ("virtio_pci", "virtio_net", "virtio_blk", "ata_piix", "sr_mod", "isofs")
BUILD_FORMAT = "1"  # bump when the build's code changes in a way the hashed inputs do not show


@dataclass(frozen=True)
class TinyGuest:
    directory: Path
    key: str
    kernel_package: str  # e.g. linux-image-6.1.0-56-amd64
    kernel_version: str  # the package's version, e.g. 6.1.192-2
    release: str  # the guest's `uname -r`
    modules: tuple[str, ...]  # loaded by /init in this order

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"

    def boot_args(self, cmdline: str = "") -> list[str]:
        """QEMU arguments that boot this guest with its console on the first serial port; `cmdline` is appended."""
        append = f"console=ttyS0 panic=-1 quiet {cmdline}".strip()
        return ["-kernel", str(self.kernel), "-initrd", str(self.initrd), "-append", append]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing), held across processes until the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _out(*cmd: str, cwd: Path | None = None) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=cwd).stdout


APT_LISTS = Path("/var/lib/apt/lists")


@cache
def kernel_package(cache_dir: Path = CACHE) -> tuple[str, str]:
    """(name, version) of the kernel image `linux-image-amd64` depends on, as this system's apt lists have it.

    apt-cache takes ~1 s here (Debian's container images turn its package cache off), so the answer is kept in
    the cache beside a signature of the lists (names, sizes, mtimes): an `apt-get update` asks apt-cache again."""
    signature = hashlib.sha256(
        repr(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in APT_LISTS.iterdir())).encode()
    ).hexdigest()
    memo = cache_dir / "guests" / "kernel-package.json"
    with contextlib.suppress(OSError, ValueError, KeyError):
        known = json.loads(memo.read_text())
        if known["signature"] == signature:
            return known["name"], known["version"]
    show = _out("apt-cache", "show", "--no-all-versions", "linux-image-amd64")  # "Depends: linux-image-X (= V)"
    depends = next(line for line in show.splitlines() if line.startswith("Depends:"))
    match = re.search(r"(linux-image-\S+) \(= ([^)]+)\)", depends)
    if match is None:
        raise LookupError(f"linux-image-amd64 names no kernel image of one version: {depends}")
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"signature": signature, "name": match[1], "version": match[2]}) + "\n")
    tmp.rename(memo)
    return match[1], match[2]


@cache
def _busybox() -> tuple[Path, str]:
    """busybox-static's binary and version (the dynamic busybox would need its libraries in the initramfs)."""
    files = _out("dpkg-query", "-L", "busybox-static").split()
    binary = next(Path(f) for f in files if f.endswith("/bin/busybox"))
    return binary.resolve(), _out("dpkg-query", "-W", "-f=${Version}", "busybox-static")


def _key(package: str, version: str, modules: tuple[str, ...]) -> str:
    inputs = [BUILD_FORMAT, package, version, _busybox()[1], " ".join(modules), INIT, UDHCPC_SCRIPT]
    return hashlib.sha256("\0".join(inputs).encode()).hexdigest()[:16]


def tiny_guest(cache_dir: Path = CACHE, modules: tuple[str, ...] = MODULES) -> TinyGuest:
    """The tiny guest for this system's kernel package, built now unless the cache has it."""
    package, version = kernel_package(cache_dir)
    key = _key(package, version, modules)
    final = cache_dir / "guests" / f"tiny-{key}"
    if not (final / "manifest.json").exists():
        with locked(cache_dir / "guests" / ".lock"):
            if not (final / "manifest.json").exists():  # another worker may have built it while this one waited
                _build(cache_dir, final, package, version, modules)
    manifest = json.loads((final / "manifest.json").read_text())
    return TinyGuest(final, key, package, version, manifest["release"], tuple(manifest["modules"]))


def _deb(cache_dir: Path, package: str, version: str) -> Path:
    """The kernel package's .deb in the cache (downloaded once per version; other versions' files are dropped)."""
    debs = cache_dir / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    wanted = [p for p in found if p.name.startswith(f"{package}_{version.split(':')[-1]}_")]
    if wanted:
        return wanted[0]
    with tempfile.TemporaryDirectory(dir=debs) as scratch:
        _out("apt-get", "download", "-q", f"{package}={version}", cwd=Path(scratch))
        (got,) = Path(scratch).glob("*.deb")
        target = debs / got.name
        got.rename(target)
    for old in debs.glob("linux-image-*.deb"):
        if old != target:
            old.unlink()
    return target


def module_order(modules_dep: str, wanted: Iterable[str], builtin: str) -> list[str]:
    """Paths (as modules.dep names them) of `wanted` and their dependencies, each after what it needs."""
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in modules_dep.splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
        by_name[_module_name(path)] = path
    built_in = {_module_name(line) for line in builtin.split()}
    order: list[str] = []

    def visit(path: str) -> None:
        if path not in order:
            for dep in deps[path]:
                visit(dep)
            order.append(path)

    for name in wanted:
        name = name.replace("-", "_")
        if name in built_in:
            continue
        if name not in by_name:
            raise LookupError(f"kernel module {name} is neither built in nor in modules.dep")
        visit(by_name[name])
    return order


def _module_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    return base.split(".ko", 1)[0].replace("-", "_")


def _unpacked_module(path: Path) -> bytes:
    """A module's ELF bytes: busybox's insmod takes no compressed module (Debian 13 ships them .ko.xz)."""
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes())
    if path.suffix == ".zst":
        return subprocess.run(["zstd", "-dcq", str(path)], capture_output=True, check=True).stdout
    return path.read_bytes()


def _build(cache_dir: Path, final: Path, package: str, version: str, modules: tuple[str, ...]) -> None:
    deb = _deb(cache_dir, package, version)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=".build-") as scratch:
        root, rootfs, out = Path(scratch) / "kernel", Path(scratch) / "initramfs", Path(scratch) / "out"
        _out("dpkg-deb", "-x", str(deb), str(root))
        if not (root / "lib").exists():  # Debian 13's package is merged-/usr: as on its systems, /lib -> usr/lib
            (root / "lib").symlink_to("usr/lib")
        (release,) = [p.name for p in (root / "lib/modules").iterdir()]
        moddir = root / "lib/modules" / release
        _out("depmod", "-b", str(root), release)  # the package ships no modules.dep: its postinst makes it
        order = module_order((moddir / "modules.dep").read_text(), modules, (moddir / "modules.builtin").read_text())
        (rootfs / "lib/modules").mkdir(parents=True)
        for path in order:
            (rootfs / "lib/modules" / f"{_module_name(path)}.ko").write_bytes(_unpacked_module(moddir / path))
        (rootfs / "etc").mkdir()
        (rootfs / "etc/modules").write_text("".join(f"{_module_name(p)}\n" for p in order))
        (rootfs / "bin").mkdir()
        shutil.copy(_busybox()[0], rootfs / "bin/busybox")
        for name, text in (("init", INIT), ("etc/udhcpc.script", UDHCPC_SCRIPT)):
            (rootfs / name).write_text(text)
            (rootfs / name).chmod(0o755)
        out.mkdir()
        _cpio(rootfs, out / "initrd.img")
        shutil.copy(root / "boot" / f"vmlinuz-{release}", out / "vmlinuz")
        manifest = {"package": package, "version": version, "release": release,
                    "modules": [_module_name(p) for p in order]}  # fmt: skip
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        shutil.rmtree(final, ignore_errors=True)  # a half-built one from a run killed mid-rename (none expected)
        out.rename(final)


def _cpio(rootfs: Path, target: Path) -> None:
    """An uncompressed newc archive (the guest need not decompress it: faster under emulation), files owned by root."""
    names = sorted(str(p.relative_to(rootfs)) for p in rootfs.rglob("*"))
    with open(target, "wb") as f:
        subprocess.run([str(_busybox()[0]), "cpio", "-o", "-H", "newc", "-R", "0:0"], input="\n".join(names).encode(),
                       stdout=f, stderr=subprocess.PIPE, cwd=rootfs, check=True)  # fmt: skip

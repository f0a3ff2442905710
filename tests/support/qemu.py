"""Boot real guests with QEMU (Debian's qemu-system-x86) for tests: the accelerator, the VM process, its console.

Accelerator: KVM only where it really runs a guest. `/dev/kvm` existing proves nothing (on these machines it is
PVM, under which a stock guest kernel hangs without a word), so `detect_accelerator` boots the tiny guest once with
`-accel kvm` and takes KVM only if the guest's init prints its first line within `PROBE_SECONDS`; otherwise plain
emulation, `-accel tcg -cpu max`. The answer is cached in `CACHE/accel/` keyed by the host kernel, QEMU's version
and the guest (one probe per machine, not per run); `CLOUDNET_TEST_ACCEL=kvm|tcg` forces one.

VM: `start_vm` runs `qemu-system-x86_64 -nodefaults` with the console (ttyS0) on a pipe (a `Console`), then the
caller's `extra_args` verbatim: NICs (`cloudnet instance qemu-args` prints them), a second serial port
(`-chardev socket,id=md,path=... -serial chardev:md` becomes ttyS1: ours is the first `-serial`), a config drive
(`-drive file=...,if=virtio,format=raw,readonly=on`). QEMU opens a tap device (`-netdev tap,ifname=...`) by name in
its own network namespace, so a tap that lives in another namespace (a cloudnet host namespace, a test's) needs
QEMU started in that namespace: `netns=` runs it under `ip netns exec <netns>`, which execs QEMU (the process's pid
is QEMU's). The VM is killed by pid when its `with` block ends, and with the thread that started it if that dies
(setpriv --pdeathsig); its `-name` carries a per-VM name that cannot clash.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO

from tests.support.console import Console, ConsoleError
from tests.support.guest_init import INIT_MARKER
from tests.support.guests import CACHE, TinyGuest, locked

QEMU = "qemu-system-x86_64"
PROBE_SECONDS = 15.0  # a KVM guest prints its init line in ~1 s; PVM hangs silently


@dataclass(frozen=True)
class Accelerator:
    name: str  # "kvm" or "tcg"
    reason: str  # why: what the probe saw, or that it was forced

    @property
    def args(self) -> list[str]:
        if self.name == "kvm":
            return ["-accel", "kvm", "-cpu", "host"]
        return ["-accel", "tcg", "-cpu", "max"]

    def __str__(self) -> str:
        return f"{self.name} ({self.reason})"


@cache
def qemu_version() -> str:
    first = subprocess.run([QEMU, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    return first.removeprefix("QEMU emulator version ").strip()


def _probe_file(guest: TinyGuest, cache_dir: Path) -> Path:
    uname = os.uname()
    key = hashlib.sha256("\0".join([uname.release, uname.version, qemu_version(), guest.key]).encode()).hexdigest()
    return cache_dir / "accel" / f"{key[:16]}.json"


def cached_accelerator(guest: TinyGuest, cache_dir: Path = CACHE) -> Accelerator | None:
    """The answer a previous probe left for this host, QEMU and guest (None: not probed yet)."""
    try:
        data = json.loads(_probe_file(guest, cache_dir).read_text())
    except (OSError, ValueError):
        return None
    return Accelerator(data["name"], data["reason"])


@cache
def detect_accelerator(guest: TinyGuest, cache_dir: Path = CACHE) -> Accelerator:
    forced = os.environ.get("CLOUDNET_TEST_ACCEL", "")
    if forced in ("kvm", "tcg"):
        return Accelerator(forced, "forced by CLOUDNET_TEST_ACCEL")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Accelerator("tcg", "no usable /dev/kvm")
    path = _probe_file(guest, cache_dir)
    with locked(cache_dir / "accel" / ".lock"):  # one probe at a time; the others read its answer
        found = cached_accelerator(guest, cache_dir)
        if found is not None:
            return found
        answer = _probe_kvm(guest)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"name": answer.name, "reason": answer.reason}) + "\n")
        tmp.rename(path)
    return answer


def _probe_kvm(guest: TinyGuest) -> Accelerator:
    started = time.monotonic()
    with running_vm(guest, Accelerator("kvm", "probe"), name=unique_name("kvm-probe"), cmdline="cloudnet.probe") as vm:
        try:
            vm.console.expect(INIT_MARKER, PROBE_SECONDS)
        except ConsoleError:
            if vm.process.poll() is None:
                return Accelerator("tcg", f"a guest under KVM did not reach its init in {PROBE_SECONDS:g} s (PVM?)")
            said = vm.stderr().strip().splitlines()
            return Accelerator("tcg", f"QEMU -accel kvm exited {vm.process.returncode}: {said[-1] if said else ''}")
    return Accelerator("kvm", f"a guest under KVM reached its init in {time.monotonic() - started:.1f} s")


@dataclass
class VM:
    name: str
    accelerator: Accelerator
    process: subprocess.Popen[bytes]
    console: Console
    started: float  # time.monotonic() just before QEMU was started
    _stderr: IO[bytes]  # a file, not a pipe: QEMU never blocks on it

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, log: Path | None = None) -> None:
        """Kill QEMU (by its pid) and reap it; `log` gets the console transcript and QEMU's stderr (what the reader
        of a failed test wants)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if log is not None:
            log.write_text(f"{self.console.transcript}\n--- qemu stderr ---\n{self.stderr()}")
        self._stderr.close()

    def stderr(self) -> str:
        """What QEMU wrote to stderr so far (its errors: a tap it could not open, a bad argument)."""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            return self._stderr.read().decode("utf-8", "replace")
        return ""

    def expect(self, pattern: str | re.Pattern[str], timeout: float) -> re.Match[str]:
        """`console.expect`, with QEMU's stderr in the failure when QEMU has exited."""
        try:
            return self.console.expect(pattern, timeout)
        except ConsoleError as e:
            if self.process.poll() is not None:
                raise ConsoleError(f"{e}\nQEMU exited {self.process.returncode}: {self.stderr()}") from None
            raise

    def run(self, command: str, timeout: float = 30, check: bool = True) -> str:
        return self.console.run(command, timeout, check)


def unique_name(label: str) -> str:
    """A VM name no other test or run shares (it is in QEMU's command line: findable with pgrep -f)."""
    return f"cnt-vm-{label}-{uuid.uuid4().hex[:8]}"


def qemu_command(
    guest: TinyGuest, accelerator: Accelerator, name: str, extra_args: Sequence[str] = (), memory_mb: int = 256,
    cmdline: str = "",
) -> list[str]:  # fmt: skip
    """The full command line (without `ip netns exec`); console on stdio, then `extra_args` as given."""
    return [QEMU, "-name", f"guest={name}", "-nodefaults", "-no-reboot", "-display", "none", *accelerator.args,
            "-m", str(memory_mb), "-smp", "1", "-chardev", "stdio,id=console,signal=off", "-serial", "chardev:console",
            *guest.boot_args(cmdline), *extra_args]  # fmt: skip


def start_vm(
    guest: TinyGuest, accelerator: Accelerator, name: str, extra_args: Sequence[str] = (), netns: str | None = None,
    memory_mb: int = 256, cmdline: str = "",
) -> VM:  # fmt: skip
    """Start QEMU (in `netns` if given) and return at once; wait for the guest with `vm.console.expect`."""
    command = qemu_command(guest, accelerator, name, extra_args, memory_mb, cmdline)
    if netns is not None:
        command = ["ip", "netns", "exec", netns, *command]
    # Killed with the thread that started it (a test worker killed -9 leaves no VM); setpriv and ip exec onwards.
    command = ["setpriv", "--pdeathsig", "KILL", *command]
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 -- the VM's to close, in stop()
    started = time.monotonic()
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                               start_new_session=True)  # fmt: skip
    assert process.stdout is not None
    return VM(name, accelerator, process, Console(process.stdout, process.stdin, name), started, stderr)


@contextlib.contextmanager
def running_vm(
    guest: TinyGuest, accelerator: Accelerator, name: str, extra_args: Sequence[str] = (), netns: str | None = None,
    memory_mb: int = 256, cmdline: str = "", log: Path | None = None,
) -> Iterator[VM]:  # fmt: skip
    """`start_vm` for the block, killed at its end even on failure (see `VM.stop` for `log`)."""
    vm = start_vm(guest, accelerator, name, extra_args, netns, memory_mb, cmdline)
    try:
        yield vm
    finally:
        vm.stop(log)

"""Boot the Debian guest (debian_guest.py) and read what cloud-init did from its serial console.

The launcher here is the least the Debian tests need (plain emulation, the console on a pipe, stop by PID): it is
meant to give way to tests/support/qemu.py (accelerator detection, expect/run helpers, a netns to run QEMU in)
when that lands; `Boot` is the one place that starts QEMU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support import guest_results
from tests.support.debian_guest import DebianGuest

QEMU = "qemu-system-x86_64"
# /dev/kvm here is PVM, which Debian's kernel does not boot under; qemu.py's detection replaces this.
ACCELERATOR = ("-accel", "tcg", "-cpu", "max")
CLOUD_INIT_TIMEOUT = 900.0  # TCG on a loaded 2-core machine: ~90 s alone, several times that beside other boots


class Boot:
    """A running guest whose first serial port is this process's pipe (read by a thread into `console`)."""

    def __init__(self, args: Sequence[str], log: Path | None = None) -> None:
        command = [QEMU, *ACCELERATOR, *args, "-serial", "stdio", "-monitor", "none"]
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        self._chunks: list[bytes] = []
        self._log = log  # the transcript as it comes, for whoever debugs a boot
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with open(self._log or os.devnull, "ab") as log:
            while chunk := self.proc.stdout.read1(65536):
                self._chunks.append(chunk)
                log.write(chunk)
                log.flush()

    @property
    def console(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def expect(self, text: str, timeout: float) -> str:
        """Wait until the console shows `text` (polling the transcript); the transcript so far."""
        deadline = time.monotonic() + timeout
        while text not in (seen := self.console):
            if self.proc.poll() is not None:
                raise AssertionError(f"QEMU exited ({self.proc.returncode}) before {text!r}:\n{seen[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} on the console within {timeout:.0f} s:\n{seen[-4000:]}")
            time.sleep(0.2)
        return seen

    def stop(self) -> None:
        """Kill QEMU by its PID (its own session: nothing else is signalled) and reap it."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._reader.join(timeout=5)


@contextmanager
def booted(guest: DebianGuest, *args: str, log: Path | None = None) -> Iterator[Boot]:
    """The guest booted with `args` (NICs, drives, SMBIOS) beside its own; stopped when the block ends."""
    boot = Boot([*guest.qemu_args(), *args], log)
    try:
        yield boot
    finally:
        boot.stop()


def cloud_init_results(boot: Boot, timeout: float = CLOUD_INIT_TIMEOUT) -> dict[str, Any]:
    """What the guest printed once cloud-init was done (guest_results.py)."""
    return guest_results.parse(boot.expect(guest_results.END, timeout))

"""The tiny guest's boot (issue 28): how long from QEMU's start until the guest's init runs, holds a DHCP lease and
offers its shell, under the accelerator the tests would use (KVM only where it really runs a guest). Prints figures;
asserts nothing.

Each boot attaches the guest to a LAN of the bench's own (tests/support/tap_lan.py: a namespace, a bridge, a tap,
a static-lease dnsmasq), with QEMU in that namespace. Also timed: building the tiny guest cold (a scratch cache:
download, unpack, depmod, initramfs) and finding it warm (what every test session pays).

The issue's target is "the tiny guest, KVM boot -> its metadata fetched": the metadata step is `--fetch URL` (the
guest's init fetches it after its lease; a cloudnet network's metadata service once the agent attaches VMs), left
out until then. Usage (root): .venv/bin/python bench/vm_boot.py [--boots 3] [--cold] [--fetch URL]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import machine_load, median, row
from tests.support import guests
from tests.support.guest_init import FETCH_END, INIT_MARKER, LEASE_RE, SHELL_MARKER
from tests.support.qemu import Accelerator, detect_accelerator, qemu_version, running_vm, unique_name
from tests.support.tap_lan import dhcp_server, nic_args, tap_lan

BOOT_TIMEOUT = 180.0
MAC = "52:54:00:be:00:02"


@dataclass(frozen=True)
class Step:
    label: str  # "QEMU start -> <label>"
    pattern: str  # what the console says when the step is done (guest_init's markers)
    target: str


def steps(fetch: str | None) -> list[Step]:
    found = [Step("init", INIT_MARKER, "reported"), Step("DHCP lease", LEASE_RE, "reported")]
    if fetch:
        found.append(Step("metadata fetched", FETCH_END + " 0", "reported (KVM boot -> metadata fetched)"))
    return [*found, Step("shell", SHELL_MARKER, "reported")]


def boot_once(guest: guests.TinyGuest, accel: Accelerator, fetch: str | None, workdir: Path) -> dict[str, float]:
    """One boot on a fresh LAN: seconds from QEMU's start to each step."""
    times: dict[str, float] = {}
    with tap_lan("10.88.0.0/24") as lan, dhcp_server(lan, {MAC: lan.address(2)}, workdir):
        cmdline = f"cloudnet.fetch={fetch}" if fetch else ""
        with running_vm(guest, accel, unique_name("bench"), nic_args(lan.tap(), MAC), lan.netns,
                        cmdline=cmdline, log=workdir / "console.log") as vm:  # fmt: skip
            for step in steps(fetch):
                vm.expect(step.pattern, BOOT_TIMEOUT)
                times[step.label] = time.monotonic() - vm.started
    return times


def build_times(cold: bool) -> None:
    if cold:
        with tempfile.TemporaryDirectory(prefix="cloudnet-bench-guests-") as scratch:
            guests.kernel_package.cache_clear()
            t0 = time.monotonic()
            guests.tiny_guest(Path(scratch))
            row("tiny guest built cold (incl. kernel download)", f"{time.monotonic() - t0:.2f} s", "reported")
    guests.kernel_package.cache_clear()
    t0 = time.monotonic()
    guests.tiny_guest()
    row("tiny guest found warm (apt-cache + manifest)", f"{time.monotonic() - t0:.2f} s", "reported")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boots", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also time a cold build in a scratch cache")
    parser.add_argument("--fetch", help="a URL the guest fetches after its lease (the metadata step)")
    args = parser.parse_args()
    machine_load()
    build_times(args.cold)
    guest = guests.tiny_guest()
    t0 = time.monotonic()
    accel = detect_accelerator(guest)
    print(f"tiny guest {guest.kernel_package} {guest.kernel_version}, QEMU {qemu_version()}, accelerator {accel}"
          f" (found in {time.monotonic() - t0:.2f} s)")  # fmt: skip
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="cloudnet-bench-vm-") as workdir:
        for _ in range(args.boots):
            runs.append(boot_once(guest, accel, args.fetch, Path(workdir)))
    for step in steps(args.fetch):
        values = [run[step.label] for run in runs]
        row(f"tiny guest ({accel.name}): QEMU start -> {step.label}", f"p50 {median(values):.2f} s", step.target)
    if not args.fetch:
        row(f"tiny guest ({accel.name}): QEMU start -> metadata fetched", "not yet", "KVM boot -> metadata fetched")


if __name__ == "__main__":
    main()

"""The Debian 12 cloud-init guest (issue 28): its build (cold, in a scratch cache, with --cold; warm: what every test
session pays) and its boot with a config drive from a live cloudnet API, timed from QEMU's start to each of
cloud-init's stages and to the results its unit prints; then where the guest's own boot time went
(systemd-analyze). Prints figures; asserts nothing. The issue measured ~90 s to cloud-init done under plain
emulation; the suite's budget is 20 minutes in all, the build included on a clean machine (CI).

Usage (root): .venv/bin/python bench/debian_boot.py [--boots 1] [--cold]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx
from common import cloudnet_server, machine_load, median, row
from tests.support import guests
from tests.support.debian_guest import MEMORY_MB, DebianGuest, debian_guest
from tests.support.debian_vm import config_drive, make_vm, unwired_nic
from tests.support.guest_results import CLOUD_INIT_TIMEOUT, RESULTS
from tests.support.qemu import Accelerator, detect_accelerator, running_vm, unique_name

# cloud-init's lines on the console as each stage starts and when it is done.
STAGES = [("init-local", "running 'init-local'"), ("init", "running 'init' "), ("config", "running 'modules:config'"),
          ("final", "running 'modules:final'"), ("cloud-init done", "finished at ")]  # fmt: skip


def build_times(cold: bool) -> None:
    if cold:
        with tempfile.TemporaryDirectory(prefix="cloudnet-bench-debian-") as scratch:
            t0 = time.monotonic()
            debian_guest(Path(scratch))
            row("Debian guest built cold (mmdebstrap + mke2fs)", f"{time.monotonic() - t0:.1f} s", "reported")
    t0 = time.monotonic()
    built = debian_guest()
    row("Debian guest found warm", f"{time.monotonic() - t0:.2f} s", "reported")
    row("Debian guest: its cache entry's own build", f"{built.build_seconds:.1f} s", "reported")


def boot_once(guest: DebianGuest, accel: Accelerator, api: httpx.Client, workdir: Path) -> dict[str, float]:
    vm = make_vm(api)
    times: dict[str, float] = {}
    with running_vm(guest, accel, unique_name("bench-debian"), [*unwired_nic(vm), *config_drive(api, vm, workdir)],
                    memory_mb=MEMORY_MB, log=workdir / "console.log") as qemu:  # fmt: skip
        for label, text in STAGES:
            qemu.expect(text, CLOUD_INIT_TIMEOUT)
            times[label] = time.monotonic() - qemu.started
        results = json.loads(qemu.expect(RESULTS, CLOUD_INIT_TIMEOUT)[1])
        times["results printed"] = time.monotonic() - qemu.started
    print(f"  guest: {results['boot_time'].strip()}")
    print("  guest's slowest units:", "; ".join(line.strip() for line in results["blame"][:8]))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boots", type=int, default=1)
    parser.add_argument("--cold", action="store_true", help="also time a cold build in a scratch cache")
    args = parser.parse_args()
    machine_load()
    build_times(args.cold)
    guest = debian_guest()
    accel = detect_accelerator(guests.tiny_guest())
    print(f"accelerator {accel}")
    runs: list[dict[str, float]] = []
    with cloudnet_server() as url, httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "admin"},
                                                timeout=30) as api:  # fmt: skip
        for _ in range(args.boots):
            with tempfile.TemporaryDirectory(prefix="cloudnet-bench-debian-vm-") as workdir:
                runs.append(boot_once(guest, accel, api, Path(workdir)))
    for label in [*(label for label, _ in STAGES), "results printed"]:
        target = "~90 s (issue 28, TCG)" if label == "cloud-init done" else "reported"
        row(f"Debian ({accel.name}): QEMU start -> {label}", f"p50 {median([r[label] for r in runs]):.1f} s", target)


if __name__ == "__main__":
    main()

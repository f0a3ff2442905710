"""The tiny guest's boot (issue 28): how long from QEMU's start until the guest's init runs, holds a DHCP lease and
offers its shell, under the accelerator the tests would use (KVM only where it really runs a guest). Prints figures;
asserts nothing.

Each boot is a VM instance of a `cloudnet up` of the bench's own (bench/vm_taps.py: server and agent, the Linux
dataplane, the metadata proxy), attached with the arguments `cloudnet instance qemu-args` prints (wire/qemu_args.py)
in its taps' namespace: the guest's init asks DHCP (the network's dnsmasq), then fetches its meta_data.json from
169.254.169.254 (the issue's "boot -> its metadata fetched"). With --lan, a LAN of the bench's own instead
(tests/support/tap_lan.py: a bridge, a tap, a static-lease dnsmasq; no metadata). Also timed: building the tiny guest
cold (a scratch cache: download, unpack, depmod, initramfs) and finding it warm (what every test session pays).

Usage (root): .venv/bin/python bench/vm_boot.py [--boots 3] [--cold] [--lan]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from common import machine_load, median, row
from tests.support import guests
from tests.support.guest_init import FETCH_END, INIT_MARKER, LEASE_RE, SHELL_MARKER
from tests.support.qemu import Accelerator, detect_accelerator, qemu_version, running_vm, unique_name
from tests.support.tap_lan import dhcp_server, nic_args, tap_lan
from vm_taps import _active, _network, _vm, cloudnet_up

from cloudnet.wire import qemu_args

BOOT_TIMEOUT = 180.0
MAC = "52:54:00:be:00:02"
METADATA = "http://169.254.169.254/openstack/latest/meta_data.json"


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


def boot_once(guest: guests.TinyGuest, accel: Accelerator, cloud: httpx.Client | None, workdir: Path
              ) -> dict[str, float]:  # fmt: skip
    """One boot, on a new VM instance of `cloud` (or a fresh LAN): seconds from QEMU's start to each step."""
    times: dict[str, float] = {}
    with attachment(cloud, workdir) as (args, netns):
        cmdline = f"cloudnet.fetch={METADATA}" if cloud is not None else ""
        with running_vm(guest, accel, unique_name("bench"), args, netns, cmdline=cmdline,
                        log=workdir / "console.log") as vm:  # fmt: skip
            for step in steps(METADATA if cloud is not None else None):
                vm.expect(step.pattern, BOOT_TIMEOUT)
                times[step.label] = time.monotonic() - vm.started
    return times


@contextmanager
def attachment(cloud: httpx.Client | None, workdir: Path) -> Iterator[tuple[list[str], str]]:
    """The QEMU arguments of a NIC and the namespace QEMU runs in: a VM instance's (deleted afterwards), or a tap
    on a LAN of the bench's own."""
    if cloud is None:
        with tap_lan("10.88.0.0/24") as lan, dhcp_server(lan, {MAC: lan.address(2)}, workdir):
            yield nic_args(lan.tap(), MAC), lan.netns
        return
    host = cloud.get("/hosts").json()["hosts"][0]["name"]
    network = cloud.get("/networks", params={"name": "bench-vm"}).json()["networks"][0]["id"]
    inst = _vm(cloud, host, network, f"boot-{uuid.uuid4().hex[:6]}")
    _active(cloud, inst["id"])
    inst = cloud.get(f"/instances/{inst['id']}").json()["instance"]
    ports = {n["port_id"]: cloud.get(f"/ports/{n['port_id']}").json()["port"] for n in inst["nets"]}
    try:
        yield qemu_args.qemu_args(inst, ports), str(qemu_args.netns_of(ports))
    finally:
        cloud.delete(f"/instances/{inst['id']}")


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
    parser.add_argument("--lan", action="store_true", help="a LAN of the bench's own instead of cloudnet (no metadata)")
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
        if args.lan:
            runs = [boot_once(guest, accel, None, Path(workdir)) for _ in range(args.boots)]
        else:
            with cloudnet_up(f"bench-boot-{uuid.uuid4().hex[:6]}") as url, httpx.Client(base_url=url, timeout=30) as c:
                _network(c)
                runs = [boot_once(guest, accel, c, Path(workdir)) for _ in range(args.boots)]
    for step in steps(None if args.lan else METADATA):
        values = [run[step.label] for run in runs]
        row(f"tiny guest ({accel.name}): QEMU start -> {step.label}", f"p50 {median(values):.2f} s", step.target)


if __name__ == "__main__":
    main()

"""pytest fixtures for tests that boot VMs (tests/integration/conftest.py re-exports them).

`vms` starts VMs of the tiny guest and kills them (by pid) when the test ends, pass or fail, leaving each console
transcript in the test's tmp_path; every test that boots one records the accelerator in its report
(`qemu_accelerator`), and tests/conftest.py's terminal summary prints which ones the run used.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import pytest

from tests.support import guests
from tests.support.qemu import VM, Accelerator, detect_accelerator, start_vm, unique_name

ACCEL_PROPERTY = "qemu_accelerator"


class StartVM(Protocol):
    def __call__(
        self, label: str, extra_args: Sequence[str] = (), netns: str | None = None, cmdline: str = "",
        memory_mb: int = 256,
    ) -> VM: ...  # fmt: skip


@pytest.fixture(scope="session")
def tiny_guest() -> guests.TinyGuest:
    return guests.tiny_guest()


@pytest.fixture(scope="session")
def accelerator(tiny_guest: guests.TinyGuest) -> Accelerator:
    return detect_accelerator(tiny_guest)


@pytest.fixture
def vms(
    tiny_guest: guests.TinyGuest, accelerator: Accelerator, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[StartVM]:
    """`vms(label, extra_args, netns=..., cmdline=...)` starts a VM named `cnt-vm-<label>-<random>`."""
    started: list[VM] = []
    request.node.user_properties.append((ACCEL_PROPERTY, str(accelerator)))

    def start(
        label: str, extra_args: Sequence[str] = (), netns: str | None = None, cmdline: str = "", memory_mb: int = 256
    ) -> VM:
        vm = start_vm(tiny_guest, accelerator, unique_name(label), extra_args, netns, memory_mb, cmdline)
        started.append(vm)
        return vm

    try:
        yield start
    finally:
        for vm in started:
            vm.stop(log=tmp_path / f"console-{vm.name}.log")

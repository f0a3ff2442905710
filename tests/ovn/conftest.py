"""OVN tests: real OVN daemons per sandbox (tests/support/ovn.py); they need root (namespaces, tap devices)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from cloudnet.northbound.sync import NorthboundSync
from tests.ovn.nb import by_name
from tests.ovn.vm_site import vm_api, vm_net, vm_rig  # noqa: F401 -- fixtures of the VM tests
from tests.support.ovn import OvnSandbox, ovn_sandbox
from tests.support.server import RunningServer
from tests.support.vm_fixtures import accelerator, tiny_guest, vms  # noqa: F401 -- fixtures of the VM tests


@pytest.fixture(autouse=True)
def _needs_ovn() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (OVN daemons, network namespaces)")
    if shutil.which("ovn-northd") is None:
        pytest.fail("OVN is not installed: `make deps` installs ovn-central, ovn-host and openvswitch-switch")


@pytest.fixture
def backend() -> str:
    """These tests exercise OVN, not the database: SQLite only."""
    return "sqlite"


@pytest.fixture(scope="module")
def ovn() -> Iterator[OvnSandbox]:
    """NB, SB and northd of the module's own (a module that needs a chassis, or a fresh one per test, has its own)."""
    with ovn_sandbox() as sandbox:
        yield sandbox


@pytest.fixture
def nb_sync(server: RunningServer, ovn: OvnSandbox, request: pytest.FixtureRequest) -> Iterator[NorthboundSync]:
    """The server's northbound writer on the module's NB (gateway chassis: the module's GATEWAY, else "gw-1"); what
    it wrote goes after the test, so that the next test's writer starts from an empty NB."""
    sync = NorthboundSync(server.store, ovn.nb_url, [getattr(request.module, "GATEWAY", "gw-1")], interval=0.1)
    sync.start()
    try:
        yield sync
    finally:
        sync.stop()
        for name in by_name(ovn, "Logical_Switch"):
            ovn.nbctl("ls-del", name)
        for name in by_name(ovn, "Logical_Router"):
            ovn.nbctl("lr-del", name)

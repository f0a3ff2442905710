"""OVN tests: real OVN daemons per sandbox (tests/support/ovn.py); they need root (namespaces, tap devices)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.support.ovn import OvnSandbox, ovn_sandbox


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

"""OVN tests: real OVN daemons per sandbox (tests/support/ovn.py); they need root (namespaces, tap devices)."""

from __future__ import annotations

import os
import shutil

import pytest


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

"""What `make deps` installs, required rather than skipped: a test that would run on one Debian release and skip
on another because a package is missing there is an installer bug, so it fails and names the package."""

from __future__ import annotations

import shutil
import subprocess

import pytest

DEBIAN_PYTHON = "/usr/bin/python3"


def require(present: bool, what: str, package: str) -> None:
    if not present:
        pytest.fail(f"{what} is missing: `make deps` installs the Debian package {package} (see the Makefile)")


def require_commands(package: str, *commands: str) -> None:
    missing = [c for c in commands if shutil.which(c) is None]
    require(not missing, f"{', '.join(missing)}", package)


def python_module(module: str) -> bool:
    """Whether Debian's python3 (not the venv's) imports `module`."""
    probe = subprocess.run([DEBIAN_PYTHON, "-c", f"import {module}"], capture_output=True)
    return probe.returncode == 0


def require_cloud_init() -> None:
    require(python_module("cloudinit.sources.DataSourceSmartOS"), "cloud-init for Debian's python3", "cloud-init")

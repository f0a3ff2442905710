"""scripts/install-debian-packages.sh: the releases it knows install; any other stops it in one line, before apt."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-debian-packages.sh"


def install(os_release: Path, *packages: str) -> subprocess.CompletedProcess[str]:
    env = {"OS_RELEASE": str(os_release), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    return subprocess.run([str(SCRIPT), *packages], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize(
    "release",
    ['ID=ubuntu\nVERSION_CODENAME=noble\nPRETTY_NAME="Ubuntu 24.04 LTS"\n', "ID=debian\nVERSION_CODENAME=bullseye\n",
     "ID=debian\nVERSION_CODENAME=forky\n", ""],
)  # fmt: skip
def test_a_release_it_does_not_know_stops_it_in_one_line(tmp_path: Path, release: str) -> None:
    (tmp_path / "os-release").write_text(release)
    run = install(tmp_path / "os-release", "no-such-package-cloudnet")
    assert run.returncode == 1
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cloudnet installs on Debian 12 (bookworm) and 13 (trixie)")


def test_this_release_with_its_packages_installed_has_nothing_to_do() -> None:
    """The machine running the suite is one the installer knows, and `make deps` left nothing missing."""
    run = install(Path("/etc/os-release"), "bash", "coreutils")
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")

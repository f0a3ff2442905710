"""A system's own ovn-controller (not started from cloudnet's state directory) is followed by its pidfile in OVN's run
directory: stopped and started again as a service manager does it, its restart is counted; a pidfile naming a process
that is not an ovn-controller (a stale pid, reused) is not taken. A real ovn-controller, in a run directory of the
test's own (OVN_RUNDIR, as ovn-ctl reads it)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudnet import metrics
from cloudnet.ovn import daemons
from cloudnet.ovn.restarts import Restarts

NAME = "cloudnet_ovn_daemon_restarts_total"


def restarts() -> float:
    return metrics.AGENT.get_sample_value(NAME, {"daemon": "ovn-controller"}) or 0.0


class SystemController:
    """ovn-controller as ovn-ctl runs it: detached, its pidfile and control socket in OVN's run directory."""

    def __init__(self, run: Path, ovsdb: Path) -> None:
        self.run, self.ovsdb = run, ovsdb
        self.pidfile = run / "ovn-controller.pid"
        self.started: list[int] = []

    def start(self) -> int:
        subprocess.run(["ovn-controller", f"unix:{self.ovsdb}", f"--pidfile={self.pidfile}", "--detach", "--no-chdir",
                        f"--log-file={self.run / 'ovn-controller.log'}", "-vconsole:off"],
                       env={**os.environ, "OVN_RUNDIR": str(self.run)}, check=True, timeout=60)  # fmt: skip
        pid = int(self.pidfile.read_text().strip())  # (--detach returns once the daemon wrote it)
        self.started.append(pid)
        return pid

    def stop(self, pid: int) -> None:
        if daemons.alive(pid):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while daemons.alive(pid):
            assert time.monotonic() < deadline, f"ovn-controller {pid} did not stop"
            time.sleep(0.02)


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[SystemController]:
    run = tmp_path / "ovn-run"
    run.mkdir()
    made = SystemController(run, tmp_path / "ovs" / "db.sock")  # (no OVSDB there: it keeps trying, and runs)
    try:
        yield made
    finally:
        for pid in made.started:
            made.stop(pid)


def test_a_system_ovn_controller_restarted_by_its_service_manager_is_counted(
    controller: SystemController, tmp_path: Path
) -> None:
    first = controller.start()
    # The agent's OVSDB is a unix socket whose directory holds no ovn-controller pidfile of cloudnet's.
    watcher = Restarts.of_chassis(f"unix:{controller.ovsdb}", ovn_run=controller.run)
    before = restarts()
    watcher.look()
    assert restarts() == before  # the same pid: nothing
    controller.stop(first)
    watcher.look()
    assert restarts() == before  # down: counted once it runs again
    second = controller.start()
    assert second != first
    watcher.look()
    assert restarts() == before + 1
    watcher.look()
    assert restarts() == before + 1  # once


def test_a_pidfile_naming_another_program_is_not_taken(controller: SystemController) -> None:
    pid = controller.start()
    watcher = Restarts.of_chassis(f"unix:{controller.ovsdb}", ovn_run=controller.run)
    before = restarts()
    with subprocess.Popen(["sleep", "300"]) as other:
        try:
            controller.pidfile.write_text(f"{other.pid}\n")  # as if the pid had been reused by another program
            watcher.look()
            assert restarts() == before
            controller.pidfile.write_text(f"{pid}\n")
            watcher.look()
            assert restarts() == before  # the same ovn-controller as before: no restart either
        finally:
            other.kill()


def test_cloudnet_s_own_run_directory_comes_first(controller: SystemController, tmp_path: Path) -> None:
    controller.start()
    own = tmp_path / "state-run"
    own.mkdir()
    (own / "ovn-controller.pid").write_text("999999999\n")  # cloudnet's own (down): the system's is not looked at
    watcher = Restarts.of_chassis(f"unix:{own / 'db.sock'}", ovn_run=controller.run)
    before = restarts()
    controller.stop(controller.started[-1])
    controller.start()
    watcher.look()
    assert restarts() == before and watcher._pids == {}

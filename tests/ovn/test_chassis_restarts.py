"""A chassis' ovn-controller killed and started again (a real OVN sandbox): the agent's next pass counts one restart
of it, and the count reaches the scrape with the host's name."""

from __future__ import annotations

import os
import signal
import time

from cloudnet import metrics
from cloudnet.ovn import daemons
from tests.ovn.test_chassis import Chassis, chassis, ovn  # noqa: F401 -- its fixtures
from tests.support.ovn import OvnSandbox
from tests.support.scrape import scrape
from tests.support.server import RunningServer

NAME = "cloudnet_ovn_daemon_restarts_total"


def restarts() -> float:
    return metrics.AGENT.get_sample_value(NAME, {"daemon": "ovn-controller"}) or 0.0


def test_a_restarted_ovn_controller_is_counted(chassis: Chassis, ovn: OvnSandbox, server: RunningServer) -> None:  # noqa: F811
    ch = ovn.chassis[0]
    before = restarts()
    pid = daemons.pids(ch.rundir)["ovn-controller"]
    os.kill(pid, signal.SIGKILL)
    chassis.cloud.wait_for(lambda: not daemons.alive(pid), what="ovn-controller gone")
    chassis.cloud.network("restarts", "10.98.0.0/24")  # a change: a pass that finds it down (not counted yet)
    daemons.start_controller(ch)
    chassis.cloud.network("again", "10.99.0.0/24")  # and a pass that finds it back
    chassis.cloud.wait_for(lambda: restarts() == before + 1, what="the restart counted")
    deadline = time.monotonic() + 15
    while scrape(server.url).value(NAME, host=ch.name, daemon="ovn-controller") < before + 1:  # (next heartbeat)
        assert time.monotonic() < deadline, "the count did not reach the scrape"
        time.sleep(0.1)

"""`cloudnet serve --dataplane ovn` starts OVN's central daemons in its state directory: one of them killed and started
again (as an operator or a service manager would) is counted once in the server's /metrics; the server's stop still
ends them all."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from cloudnet.ovn import daemons
from tests.support.process import serve
from tests.support.scrape import scrape

NAME = "cloudnet_ovn_central_restarts_total"


def test_a_restarted_ovn_northd_is_counted(tmp_path: Path) -> None:
    rundir = tmp_path / "ovn"
    with serve(tmp_path, "--dataplane", "ovn", "--metadata-listen", "off") as (proc, url):
        try:
            assert scrape(url).value(NAME, daemon="ovn-northd") == 0
            pid = daemons.pids(rundir)["ovn-northd"]
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 15
            while daemons.alive(pid):
                assert time.monotonic() < deadline, "ovn-northd did not die"
                time.sleep(0.05)
            daemons.start_northd(daemons.Central(rundir))
            deadline = time.monotonic() + 30  # (the writer looks every 0.5 s; a loaded machine may hold it a while)
            while scrape(url).value(NAME, daemon="ovn-northd") < 1:
                assert time.monotonic() < deadline, "the restart was not counted"
                time.sleep(0.1)
            assert scrape(url).value(NAME, daemon="ovn-northd") == 1
            assert scrape(url).value(NAME, daemon="ovnnb_db") == 0
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            daemons.stop(rundir)  # (nothing left, unless the stop above failed)
    assert not daemons.pids(rundir)

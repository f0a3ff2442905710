"""Restarts of a chassis' OVN daemons, as a pass of its agent sees them: a daemon of the chassis' run directory
running under another pid than at the last look was restarted (by whoever: its service manager, an operator, the
agent's own start). Only daemons cloudnet runs are found: their pidfiles and command lines name the run directory
(daemons.pids); a system's own ovn-controller is not followed."""

from __future__ import annotations

from pathlib import Path

from cloudnet import metrics
from cloudnet.ovn import daemons

WATCHED = ("ovn-controller", "ovs-vswitchd")


class Restarts:
    def __init__(self, ovs_url: str) -> None:
        """`ovs_url`: the chassis' OVSDB; a unix socket in a run directory (daemons.start_chassis) is followed."""
        self.rundir = Path(ovs_url.removeprefix("unix:")).parent if ovs_url.startswith("unix:") else None
        self._pids: dict[str, int] = {}

    def look(self) -> None:
        if self.rundir is None:
            return
        running = daemons.pids(self.rundir)
        for name in WATCHED:
            pid = running.get(name)
            if pid is None:  # (down now: counted once it runs again)
                continue
            if self._pids.get(name, pid) != pid:
                metrics.OVN_RESTARTS.labels(name).inc()
            self._pids[name] = pid

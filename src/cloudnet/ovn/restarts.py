"""Restarts of the OVN daemons cloudnet runs, as a periodic look sees them: a daemon of a run directory running under
another pid than at the last look was restarted (by whoever: its service manager, an operator, cloudnet's own
start). Only daemons cloudnet runs are found: their pidfiles and command lines name the run directory (daemons.pids);
a system's own ovn-controller or ovn-northd is not followed. A chassis' agent looks at each pass (ovn-controller,
ovs-vswitchd), the server's northbound writer at each of its looks (ovn-northd and the databases it started)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import Counter

from cloudnet import metrics
from cloudnet.ovn import daemons

CHASSIS = ("ovn-controller", "ovs-vswitchd")
CENTRAL = ("ovn-northd", "ovnnb_db", "ovnsb_db")


class Restarts:
    def __init__(self, rundir: Path | None, watched: tuple[str, ...], counter: Counter) -> None:
        self.rundir, self.watched, self.counter = rundir, watched, counter
        self._pids: dict[str, int] = {}
        self.look()  # (the pids they run under now: one that dies before the first periodic look counts too)

    @classmethod
    def of_chassis(cls, ovs_url: str) -> Restarts:
        """A chassis whose OVSDB is a unix socket in a run directory (daemons.start_chassis); others: nothing."""
        rundir = Path(ovs_url.removeprefix("unix:")).parent if ovs_url.startswith("unix:") else None
        return cls(rundir, CHASSIS, metrics.OVN_RESTARTS)

    @classmethod
    def of_central(cls, rundir: Path) -> Restarts:
        return cls(rundir, CENTRAL, metrics.OVN_CENTRAL_RESTARTS)

    def look(self) -> None:
        if self.rundir is None:
            return
        running = daemons.pids(self.rundir)
        for name in self.watched:
            pid = running.get(name)
            if pid is None:  # (down now: counted once it runs again)
                continue
            if self._pids.get(name, pid) != pid:
                self.counter.labels(name).inc()
            self._pids[name] = pid

"""Restarts of the OVN daemons a host runs, as a periodic look sees them: a daemon running under another pid than at
the last look was restarted (by whoever: its service manager, an operator, cloudnet's own start). The daemons cloudnet
runs are found in their run directory (their pidfiles and command lines name it: daemons.pids). A chassis' agent
looks at each pass (ovn-controller, ovs-vswitchd), the server's northbound writer at each of its looks (ovn-northd and
the databases it started).

A system's own ovn-controller (Debian's ovn-host: systemd runs it through ovn-ctl) is followed by its pidfile in OVN's
run directory ($OVN_RUNDIR, else /var/run/ovn, where ovn-ctl puts it), looked at only when cloudnet's run directory has
no ovn-controller pidfile of its own: the pid is taken only if that process is an ovn-controller (a stale pidfile's pid
reused by another program is not one). Why the pidfile: it is what ovn-ctl, systemd's unit and OVS's --monitor all
keep current across restarts, it needs no privilege beyond reading /run, and it does not depend on how the unit is
named or whether a service manager runs it at all. A system's ovs-vswitchd is found as before when the agent's OVSDB
URL is the system's unix socket (its command line names that run directory)."""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import Counter

from cloudnet import metrics
from cloudnet.ovn import daemons

CHASSIS = ("ovn-controller", "ovs-vswitchd")
CENTRAL = ("ovn-northd", "ovnnb_db", "ovnsb_db")


def ovn_rundir() -> Path:
    """Where OVN's own scripts (ovn-ctl) keep the system's daemons' pidfiles."""
    return Path(os.environ.get("OVN_RUNDIR") or "/var/run/ovn")


def program_pid(pidfile: Path, program: str) -> int | None:
    """The pid a pidfile names, if that process is alive and runs `program` (its comm: at most 15 characters)."""
    try:
        pid = int(pidfile.read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if comm == program[:15] and daemons.alive(pid) else None


class Restarts:
    def __init__(self, rundir: Path | None, watched: tuple[str, ...], counter: Counter,
                 system: dict[str, Path] | None = None) -> None:  # fmt: skip
        self.rundir, self.watched, self.counter = rundir, watched, counter
        self.system = system or {}  # daemon -> the system's pidfile of it, when cloudnet's run directory has none
        self._pids: dict[str, int] = {}
        self.look()  # (the pids they run under now: one that dies before the first periodic look counts too)

    @classmethod
    def of_chassis(cls, ovs_url: str, ovn_run: Path | None = None) -> Restarts:
        """A chassis whose OVSDB is a unix socket in a run directory (daemons.start_chassis, or the system's); its
        ovn-controller there, or else the system's (in `ovn_run`, default OVN's run directory)."""
        rundir = Path(ovs_url.removeprefix("unix:")).parent if ovs_url.startswith("unix:") else None
        system = {"ovn-controller": (ovn_run or ovn_rundir()) / "ovn-controller.pid"}
        return cls(rundir, CHASSIS, metrics.OVN_RESTARTS, system)

    @classmethod
    def of_central(cls, rundir: Path) -> Restarts:
        return cls(rundir, CENTRAL, metrics.OVN_CENTRAL_RESTARTS)

    def look(self) -> None:
        running = daemons.pids(self.rundir) if self.rundir is not None else {}
        for name in self.watched:
            pid = running.get(name)
            pidfile = self.system.get(name)
            if pid is None and pidfile is not None and not self._own_pidfile(name):
                pid = program_pid(pidfile, name)
            if pid is None:  # (down now: counted once it runs again)
                continue
            if self._pids.get(name, pid) != pid:
                self.counter.labels(name).inc()
            self._pids[name] = pid

    def _own_pidfile(self, name: str) -> bool:
        return self.rundir is not None and (self.rundir / f"{name}.pid").exists()

"""OVN's daemons as cloudnet starts them: a sandbox's central and a chassis come up, the chassis registers in SB,
and a stop leaves no process, pidfile owner or tap device behind."""

from __future__ import annotations

import subprocess

from cloudnet.ovn import daemons
from tests.support.ovn import ovn_sandbox


def test_central_and_chassis_start_register_and_stop_cleanly() -> None:
    with ovn_sandbox() as ovn:
        chassis = ovn.add_chassis()
        assert ovn.sbctl("--bare", "--columns=name", "list", "Chassis").split() == [chassis.name]
        assert ovn.nbctl("--bare", "--columns=name", "list", "Logical_Switch") == ""
        central_pids, chassis_pids = daemons.pids(ovn.root), daemons.pids(chassis.rundir)
        assert set(central_pids) == {"ovnnb_db", "ovnsb_db", "ovn-northd"}
        assert set(chassis_pids) == {"ovsdb-server", "ovs-vswitchd", "ovn-controller"}
        links = subprocess.run(["ip", "-n", str(chassis.netns), "-o", "link"], capture_output=True, text=True).stdout
        assert "br-int" in links
        daemons.stop(chassis.rundir, chassis.netns, chassis.bridges)
        links = subprocess.run(["ip", "-n", str(chassis.netns), "-o", "link"], capture_output=True, text=True).stdout
        assert "br-int" not in links and "ovs-netdev" not in links
        assert daemons.pids(chassis.rundir) == {}
    for pid in [*central_pids.values(), *chassis_pids.values()]:
        assert not daemons.alive(pid)

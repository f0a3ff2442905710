"""OVN's daemons as cloudnet starts them: a sandbox's central and a chassis come up, the chassis registers in SB,
and a stop leaves no process, pidfile owner or tap device behind."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from cloudnet.dataplane.kernel import netns
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


def test_listen_serves_nb_and_sb_on_the_given_address_only_or_says_why(tmp_path: Path) -> None:
    ns = f"cn-listen-{uuid.uuid4().hex[:8]}"  # (OVN's fixed ports: in a namespace of the test's own)
    rundir = Path(tempfile.mkdtemp(prefix="cn-lst-", dir="/tmp"))  # (short: unix socket paths)
    netns.create(ns)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        central = daemons.start_central(rundir, netns=ns)
        assert daemons.listen(central, "127.0.0.1", ns) == ("tcp:127.0.0.1:6641", "tcp:127.0.0.1:6642")
        sb = daemons.run(rundir, ["ovn-sbctl", "--db=tcp:127.0.0.1:6642", "--timeout=5", "get-connection"], ns)
        assert sb == ""  # (answers over TCP; no connection rows: the remote is the server's own option)
        ss = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn"], capture_output=True, text=True, check=True)
        assert sorted(line.split()[3] for line in ss.stdout.splitlines()) == ["127.0.0.1:6641", "127.0.0.1:6642"]
        with pytest.raises(daemons.OvnError, match=r"is 192\.0\.2\.1 an address of this host"):
            daemons.listen(central, "192.0.2.1", ns, timeout=0.5)
        listed = daemons.run(rundir, ["ovs-appctl", "-t", str(rundir / "ovnsb_db.ctl"), "ovsdb-server/list-remotes"],
                             ns)  # fmt: skip
        assert "192.0.2.1" not in listed and "ptcp:6642:127.0.0.1" in listed  # (the failed one taken back)
        assert daemons.tcp_remotes(6642, "2001:db8::1") == ("ptcp:6642:[2001:db8::1]", "tcp:[2001:db8::1]:6642")
    finally:
        daemons.stop(rundir, ns)
        netns.remove(ns)
        shutil.rmtree(rundir, ignore_errors=True)

"""`cloudnet up --dataplane ovn` as a user runs it, in a network namespace of the test's own (its chassis' bridges are
tap devices of the namespace it runs in): OVN's sockets are under <state-dir>/ovn/, ovn-nbctl works there, a
network created through the CLI shows up in NB, and a SIGTERM stops every OVN daemon it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudnet.ovn import daemons

CLOUDNET = str(Path(sys.executable).parent / "cloudnet")


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"cn-up-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _until(what: str, check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _query(rundir: Path, argv: list[str]) -> str:
    """The command's output, or "" while the database is not there yet."""
    try:
        return daemons.run(rundir, argv)
    except daemons.OvnError:
        return ""


def test_up_with_ovn_runs_and_stops_its_daemons(netns: str, tmp_path: Path) -> None:
    state = Path("/tmp") / f"cn-up-{uuid.uuid4().hex[:8]}"  # (short: unix socket paths)
    host = f"ch-{netns}"
    # An uplink (a veth whose other end stands for the wire): the chassis' bridge for physnet1 takes it.
    subprocess.run(["ip", "-n", netns, "link", "add", "upl0", "type", "veth", "peer", "name", "wire0"], check=True)
    cmd = ["ip", "netns", "exec", netns, CLOUDNET, "up", "--dataplane", "ovn", "--state-dir", str(state),
           "--metadata-listen", "off", "--agent-host", host, "--uplink", "physnet1:upl0"]  # fmt: skip
    log = (tmp_path / "up.log").open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    rundir = state / "ovn"
    try:
        nbctl = ["ovn-nbctl", f"--db=unix:{rundir / 'ovnnb_db.sock'}", "--timeout=5"]
        sbctl = ["ovn-sbctl", f"--db=unix:{rundir / 'ovnsb_db.sock'}", "--timeout=5"]
        _until("the chassis registered", lambda: host in _query(rundir, [*sbctl, "--bare", "list", "Chassis"]))
        cli = ["ip", "netns", "exec", netns, CLOUDNET, "network", "create", "ovn-up-net", "-f", "json"]
        _until("the API answers", lambda: subprocess.run([*cli[:5], "network", "list"], capture_output=True)
               .returncode == 0)  # fmt: skip
        net_id = json.loads(subprocess.run(cli, check=True, capture_output=True, text=True).stdout)["id"]
        _until("the network reached NB", lambda: f"cloudnet-{net_id}" in _query(rundir, [*nbctl, "show"]))
        vsctl = ["ip", "netns", "exec", netns, "ovs-vsctl", f"--db=unix:{rundir / 'db.sock'}", "--timeout=5"]
        _until("the uplink on br-physnet1", lambda: "upl0" in _query(rundir, [*vsctl, "list-ports", "br-physnet1"]))
        mappings = _query(rundir, [*vsctl, "get", "Open_vSwitch", ".", "external_ids:ovn-bridge-mappings"])
        assert mappings.strip().strip('"') == "physnet1:br-physnet1"
        running = daemons.pids(rundir)
        assert set(running) == {"ovnnb_db", "ovnsb_db", "ovn-northd", "ovsdb-server", "ovs-vswitchd", "ovn-controller"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert daemons.pids(rundir) == {}
        assert not any(daemons.alive(pid) for pid in running.values())
        links = subprocess.run(["ip", "-n", netns, "-o", "link"], capture_output=True, text=True).stdout
        assert "br-int" not in links and "ovs-netdev" not in links and "br-physnet1" not in links
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        daemons.stop(rundir, netns)
        subprocess.run(["rm", "-rf", str(state)])
        log.close()

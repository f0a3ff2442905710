"""Two API servers on one database and one NB (issue 29): how long NB stays behind the cloud when the server holding
NB's writer lock dies. Prints figures beside targets; asserts nothing.

The rig of tests/ovn/test_writer_killed.py (tests/support/writer_pair.py): `cloudnet serve --dataplane ovn` twice on
one SQLite file and one NB/SB/northd sandbox. Each try, from a settled pair (one writing, the other's log saying it
stands by): kill -9 the writer, POST a port to the survivor at once, and time
  lock taken       until the survivor's log says it resynced (it had the lock and wrote a full pass)
  NB in step       until the port's Logical_Switch_Port is in NB (polled every 20 ms)
then start the killed one again (it now stands by) and swap roles for the next try.

Usage (root): .venv/bin/python bench/writer_failover.py [--tries 10]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from common import ROOT, machine_load, median, percentile, row  # noqa: F401  (ROOT: sys.path for tests.support)
from ovn_common import versions
from tests.support.api import create
from tests.support.ovn import ovn_sandbox
from tests.support.writer_pair import WriterPair, writer_pair, writer_then_standby

TARGET = 10.0
RESYNCED = "northbound resync"


def one_try(pair: WriterPair, writer: str, standby: str, network: str, n: int) -> tuple[float, float]:
    survivor = pair.servers[standby]
    resyncs = survivor.log_text().count(RESYNCED)  # (a survivor that wrote before has resynced before)
    pair.kill(writer)
    t0 = time.monotonic()
    with survivor.api() as api:
        port = create(api, "ports", "port", network_id=network, name=f"after-kill-{n}")
    pair.until("the survivor resynced", lambda: survivor.log_text().count(RESYNCED) > resyncs, step=0.02)
    locked = time.monotonic() - t0
    pair.until("the port in NB", lambda: port["id"] in pair.switch_ports(), step=0.02)
    in_step = time.monotonic() - t0
    restarted = pair.start(writer)
    pair.until(f"server {writer} stands by", restarted.standing_by)
    return locked, in_step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tries", type=int, default=10)
    args = parser.parse_args()
    print(f"writer_failover: the API server holding NB's writer lock killed -9 ({versions()}), {args.tries} tries")
    machine_load()
    root = Path(tempfile.mkdtemp(prefix="cn-wf-", dir="/tmp"))
    locks, steps = [], []
    try:
        with ovn_sandbox() as ovn, writer_pair(root, ovn) as pair:
            _, _, net = writer_then_standby(pair, "bench")
            writer, standby = "a", "b"
            for n in range(args.tries):
                locked, in_step = one_try(pair, writer, standby, net["id"], n)
                locks.append(locked)
                steps.append(in_step)
                print(f"    try {n + 1}: lock taken {locked:.2f} s, NB in step {in_step:.2f} s")
                writer, standby = standby, writer
    finally:
        shutil.rmtree(root, ignore_errors=True)
    row("writer killed -> survivor resynced p50", f"{median(locks):.2f} s", "(information)")
    row("API writer killed -> NB in step again p50", f"{median(steps):.2f} s", f"<= {TARGET:g} s",
        median(steps) <= TARGET)  # fmt: skip
    row("  max", f"{max(steps):.2f} s", "(information)")
    row("  p90", f"{percentile(steps, 90):.2f} s", "(information)")


if __name__ == "__main__":
    main()

"""Gateway failover on OVN (issue 29): how long an instance's SNAT is gone when the active gateway chassis dies.
Prints figures beside targets; asserts nothing.

The rig of tests/ovn/test_gateway_failover.py (tests/ovn/gateway_rig.py): three hosts joined from the command line,
each a network namespace with its own processes on one underlay (userspace datapath): A (`cloudnet up`, no uplink)
with an instance behind a router, B and C (`cloudnet agent --uplink ...`) its gateway chassis, B first. Each try,
from B holding the port and SNAT answering through it: kill -9 B's ovs-vswitchd and ovn-controller, then send a UDP
probe from the instance to the outside every 0.2 s (each waits 0.2 s for its answer) until one is answered from the
router's address: "active killed -> SNAT answers again". Also timed: until C's claim shows in SB, and the way back
(B's agent restarted, as after a reboot: from its chassis registered until B holds the port again and SNAT answers
through it). BFD on the tunnels runs at Open vSwitch's defaults (ovn-controller sets only enable and check_tnl_key,
printed): min_rx 1000 ms and 3 missed, so a dead peer is seen down after about 3 s, most of the figure.

Usage (root): .venv/bin/python bench/gateway_failover.py [--tries 10]
"""

from __future__ import annotations

import argparse
import json
import time

from common import machine_load, percentile, row
from tests.ovn.gateway_rig import (
    Edge,
    Gateways,
    edge,
    gateway_hosts,
    holder,
    kill_chassis,
    restart_host,
    snat_answers,
    snat_out,
)
from tests.ovn.test_join import chassis_dir, host_of, ns_of
from tests.support.netserve import Responder

from cloudnet.ovn import daemons

PROBE = 0.2  # seconds a probe waits for its answer (the figure's resolution)


def until(what: str, check: object, timeout: float = 60.0) -> float:
    """Seconds until `check()` holds."""
    start = time.monotonic()
    while not check():  # type: ignore[operator]
        if time.monotonic() - start > timeout:
            raise SystemExit(f"timed out: {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def bfd_settings(g: Gateways) -> str:
    """The BFD settings ovn-controller gave C's tunnel interfaces."""
    rundir = chassis_dir(g.h, "c")
    ctl = ["ovs-vsctl", f"--db=unix:{rundir / 'db.sock'}", "--format=json", "--columns=bfd", "list", "Interface"]
    rows = json.loads(daemons.run(rundir, ctl, ns_of(g.h, "c")))["data"]
    found = [dict(r[0][1]) for r in rows if r[0][1]]
    return ", ".join(f"{k}={v}" for k, v in sorted(found[0].items())) if found else "none"


def one_try(g: Gateways, e: Edge) -> tuple[float, float, float]:
    """(killed -> SNAT answers, killed -> C's claim in SB, B restarted -> back on B with SNAT through it)."""
    h, b, c = g.h, host_of(g.h, "b"), host_of(g.h, "c")
    until("B holds the port, SNAT through it", lambda: holder(h, e) == b and snat_out(h, e) == "o-upb")
    start = time.monotonic()
    kill_chassis(h, "b")
    claimed = None
    while not snat_answers(e, PROBE):
        if claimed is None and holder(h, e) == c:
            claimed = time.monotonic() - start
    answered = time.monotonic() - start
    if claimed is None:
        claimed = until("C's claim in SB", lambda: holder(h, e) == c) + answered
    restart_host(g, "b")  # (returns once B's agent is registered, its chassis with it)
    back = until("back on B", lambda: holder(h, e) == b and snat_out(h, e) == "o-upb")
    return answered, claimed, back


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=10)
    args = parser.parse_args()
    machine_load()
    with gateway_hosts() as g:
        e = edge(g.h, host_of(g.h, "a"), "physnet1", 1)
        responder = Responder.start(g.h.outside, "OUT", udp=(53,))
        try:
            print(f"BFD on the tunnels: {bfd_settings(g)}")
            results = [one_try(g, e) for _ in range(args.tries)]
        finally:
            responder.stop()
    answered, claimed, back = (sorted(r[i] for r in results) for i in range(3))
    n = len(results)
    print(f"gateway failover, {n} tries (userspace datapath, 3 hosts in namespaces):")
    p50 = percentile(answered, 50)
    row(f"gateway failover (active killed -> SNAT answers again) p50 over {n} tries", f"{p50:.2f} s", "<= 5 s",
        p50 <= 5.0)  # fmt: skip
    row("  the same, max", f"{answered[-1]:.2f} s", "(info)")
    row("  active killed -> the other's claim in SB, p50", f"{percentile(claimed, 50):.2f} s", "(info)")
    row("  back (B registered again -> B holds, SNAT through B) p50", f"{percentile(back, 50):.2f} s", "(info)")


if __name__ == "__main__":
    main()

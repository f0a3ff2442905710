"""A host removed -> a `cloudnet ovn join` member's TLS front closes its open SB connection (issue 29): the member
has no store, and learns of the revocation from the CA's CRL, which it fetches from the API every 2 s (pki/crl.py),
then its front's sweep (every second) closes the connection. Prints figures beside targets; asserts nothing.

The rig of tests/ovn/test_cluster_tls.py (tests/support/ovn_cluster.py, tls): host 1 `cloudnet serve --tls
--ovn-cluster`, hosts 2 and 3 `cloudnet ovn join` with join tokens; no chassis agent. Each try: a new host joins
with a token, opens `ovsdb-client monitor` on host 2's SB through its front (from the rig's fourth namespace), is
removed on host 1's API (`POST /hosts/NAME/remove`), and the time from the API's answer until the monitor's
connection is closed (its process exits) is taken, polled every 10 ms. Also the CRL endpoint's answer time over a
host certificate (cached: signed again only on a change).

Usage (root): .venv/bin/python bench/crl_revocation.py [--tries 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx
from common import ROOT, machine_load, median, percentile, row  # noqa: F401  (ROOT: sys.path for tests.support)
from ovn_common import versions
from tests.support.ovn_cluster import API_PORT, ClusterRig, cluster_rig

from cloudnet.dataplane.kernel import netns
from cloudnet.ovn import cluster
from cloudnet.pki import crl, join_token, tls

TARGET = crl.REFRESH + 1.0  # the fetch period and the front's sweep


def one_try(rig: ClusterRig, root: Path, n: int) -> float:
    name = f"bench-{rig.suffix}-{n}"
    gone = rig.join_host(name, root / name)
    monitor = rig.monitor(cluster.connect(6642, rig.addresses[1], ssl=True), gone)
    try:
        with rig.api() as api:
            assert api.post(f"/hosts/{name}/remove", json={}).status_code == 200
        t0 = time.monotonic()
        while monitor.poll() is None:
            assert time.monotonic() - t0 < 60, "the revoked host's connection stayed open for a minute"
            time.sleep(0.01)
        return time.monotonic() - t0
    finally:
        monitor.kill()
        monitor.wait()


def endpoint(rig: ClusterRig, root: Path, n: int = 200) -> list[float]:
    """Seconds per CRL read over a host certificate, from host 1's own namespace (loopback)."""
    ssl = rig.join_host(f"reader-{rig.suffix}", root / "reader")
    times = []
    with netns.entered(rig.ns(1)), httpx.Client(verify=tls.client_context(ssl.ca, ssl.cert, ssl.key)) as client:
        url = f"https://127.0.0.1:{API_PORT}{join_token.CRL_PATH}"
        for _ in range(n):
            t0 = time.monotonic()
            assert client.get(url).status_code == 200
            times.append(time.monotonic() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tries", type=int, default=10)
    args = parser.parse_args()
    print(f"crl_revocation: host removed -> a join member's front closes its connection ({versions()}), "
          f"{args.tries} tries")  # fmt: skip
    machine_load()
    with tempfile.TemporaryDirectory(prefix="cn-crl-", dir="/tmp") as tmp, cluster_rig(agent=False, tls=True) as rig:
        closes = []
        for n in range(args.tries):
            closes.append(one_try(rig, Path(tmp), n))
            print(f"    try {n + 1}: closed after {closes[-1]:.2f} s")
        reads = endpoint(rig, Path(tmp))
    row("host removed -> join member closed it p50", f"{median(closes):.2f} s", f"<= {TARGET:g} s",
        median(closes) <= TARGET)  # fmt: skip
    row("host removed -> join member closed it max", f"{max(closes):.2f} s", "(information)")
    row("GET /v2.0/host-join/crl p50 (keep-alive)", f"{median(reads) * 1000:.1f} ms", "(information)")
    row("  p90", f"{percentile(reads, 90) * 1000:.1f} ms", "(information)")


if __name__ == "__main__":
    main()

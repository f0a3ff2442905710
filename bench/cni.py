"""Containers started through podman on one cloudnet network with cloudnet-cni: seconds per container with port
pools off, on, and on with pre-plumbed (parked) devices, beside podman's own `--network none` start on this machine
(what cloudnet adds on top) and Kuryr-Kubernetes' published figures for 50 pods. The four run side by side (three
clouds of their own), one container of each in turn, so that others' load on a shared machine falls on all alike.

Needs root, podman, runc and busybox-static (`make deps`). Usage: .venv/bin/python bench/cni.py [-n 50]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import ROOT  # noqa: F401  (puts the project on sys.path)
from tests.support.cni import CniCloud, cni_cloud
from tests.support.podman import Podman

from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade

KURYR = "Kuryr-Kubernetes (published): 50 pods in 226 s without pools, 103 s with them (4.5 s -> 2.1 s a pod)"


@dataclass
class Mode:
    label: str
    network: str  # podman's network name ("none": no CNI at all)
    times: list[float] = field(default_factory=list)


def start(podman: Podman, name: str, network: str) -> float:
    """Seconds for one `podman run -d` (it returns once the network's ADD has answered)."""
    t0 = time.perf_counter()
    podman.run("run", "-d", "--name", name, "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
               "--network", network, podman.image, "/bin/sleep", "600")  # fmt: skip
    return time.perf_counter() - t0


def warm(podman: Podman, mode: Mode, rig: CniCloud, pools: bool, park: bool, n: int) -> None:
    """A first container (which makes the pool, when pools are on), then the pool's refill (parked: every ready
    port's device parked, so that the run measures taking pre-plumbed devices, not parking them meanwhile)."""
    start(podman, f"{rig.cloud.suffix}-warm", mode.network)
    if pools:
        rig.cloud.wait_for(lambda: pool_ready(rig, park) >= n, timeout=120, what="the pool's refill")


def pool_ready(rig: CniCloud, park: bool) -> int:
    """Ready ports of the network's pool (parked: 0 until every ready port's device is parked)."""
    pools = rig.api.get("/port-pools", params={"network_id": rig.network["id"]}).json()["port_pools"]
    if not pools:
        return 0
    ready = int(pools[0]["ready"])
    if not park:
        return ready
    ports = rig.api.get("/ports", params={"network_id": rig.network["id"], "status": "ACTIVE"}).json()["ports"]
    parked = [p for p in ports if (p.get("binding:vif_details") or {}).get("prepared_netns") and not p["device_id"]]
    return ready if len(parked) >= ready else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=50, help="containers per mode")
    n = parser.parse_args().n
    work = Path(tempfile.mkdtemp(prefix="cloudnet-bench-cni-"))
    template = work / "template.db"
    store = Store(f"sqlite:///{template}")
    upgrade(store)
    store.dispose()
    podman = Podman.make("bench")
    modes = [Mode("podman run --network none", "none")]
    start(podman, "raw-warm", "none")
    kinds = {"pools off": (False, False), "pools on": (True, False), "pools on, pre-plumbed": (True, True)}
    try:
        with contextlib.ExitStack() as stack:
            for i, (label, (pools, park)) in enumerate(kinds.items()):
                rig = stack.enter_context(cni_cloud(work / f"cloud{i}", template, instance_pools=pools, park=park,
                                                    pool_min=n + 1, pool_batch=n + 1))  # fmt: skip
                mode = Mode(f"cloudnet-cni, {label}", podman.network(rig.conf(name=f"bench{i}-{rig.cloud.suffix}",
                                                                              timeout=60)))  # fmt: skip
                warm(podman, mode, rig, pools, park, n)
                modes.append(mode)
            # One container of each mode in turn: every mode meets the same machine (others' load comes and goes).
            for i in range(n):
                for j, mode in enumerate(modes):
                    mode.times.append(start(podman, f"m{j}-{i}", mode.network))
            podman.run("rm", "-af", "-t", "0", timeout=600)
    finally:
        podman.close()
    print(f"\n{n} containers a mode started through podman (busybox, runc, CNI backend), the modes in turn; load "
          f"average {os.getloadavg()[0]:.1f} at the end:")  # fmt: skip
    raw = statistics.mean(modes[0].times)
    for mode in modes:
        per = statistics.mean(mode.times)
        extra = "" if mode is modes[0] else f"   (+{per - raw:.3f} s over podman alone)"
        print(f"  {mode.label:<36} {per:7.3f} s a container (median {statistics.median(mode.times):.3f}), "
              f"{per * n:7.1f} s for {n}{extra}")  # fmt: skip
    print(f"  {KURYR}")


if __name__ == "__main__":
    main()

"""Containers started through podman on one cloudnet network with cloudnet-cni: seconds per container with port
pools off, on, and on with pre-plumbed (parked) devices, beside podman's own `--network none` start on this machine
(what cloudnet adds on top) and Kuryr-Kubernetes' published figures for 50 pods.

Needs root, podman, runc and busybox-static (`make deps`). Usage: .venv/bin/python bench/cni.py [-n 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from common import ROOT  # noqa: F401  (puts the project on sys.path)
from tests.support.cni import CniCloud, cni_cloud
from tests.support.podman import Podman

from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade

KURYR = "Kuryr-Kubernetes (published): 50 pods in 226 s without pools, 103 s with them (4.5 s -> 2.1 s a pod)"


def start_all(
    podman: Podman, network: str, n: int, label: str, rig: CniCloud | None = None, park: bool = False
) -> list[float]:
    """Seconds for each `podman run -d` (it returns once the network's ADD has answered), after a first one (which
    makes the pool, when pools are on) and the pool's refill (parked: every ready port's device parked, so that the
    run measures taking pre-plumbed devices, not parking them meanwhile)."""
    podman.run("run", "-d", "--name", f"{label}-warm", "--ulimit", "nofile=4096:4096", "--ulimit",
               "nproc=4096:4096", "--network", network, podman.image, "/bin/sleep", "600")  # fmt: skip
    if rig is not None:
        rig.cloud.wait_for(lambda: pool_ready(rig, park) >= n, timeout=120, what="the pool's refill")
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        podman.run("run", "-d", "--name", f"{label}-{i}", "--ulimit", "nofile=4096:4096", "--ulimit",
                   "nproc=4096:4096", "--network", network, podman.image, "/bin/sleep", "600")  # fmt: skip
        times.append(time.perf_counter() - t0)
    podman.run("rm", "-af", "-t", "0", timeout=600)
    return times


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
    figures: dict[str, list[float]] = {}
    podman = Podman.make("bench")
    try:
        figures["podman run --network none"] = start_all(podman, "none", n, "raw")
        modes = {"pools off": (False, False), "pools on": (True, False), "pools on, pre-plumbed": (True, True)}
        for i, (mode, (pools, park)) in enumerate(modes.items()):
            with cni_cloud(work / f"cloud{i}", template, instance_pools=pools, park=park, pool_min=n + 1,
                           pool_batch=n + 1) as rig:  # fmt: skip
                network = podman.network(rig.conf(name=f"bench{i}-{rig.cloud.suffix}", timeout=60))
                rig_or_none = rig if pools else None
                figures[f"cloudnet-cni, {mode}"] = start_all(podman, network, n, f"m{i}", rig_or_none, park)
    finally:
        podman.close()
    print(f"\n{n} containers started one after another through podman (busybox, runc, CNI backend); load average "
          f"{os.getloadavg()[0]:.1f} at the end:")  # fmt: skip
    raw = statistics.mean(figures["podman run --network none"])
    for label, times in figures.items():
        per = statistics.mean(times)
        extra = "" if label.startswith("podman") else f"   (+{per - raw:.3f} s over podman alone)"
        print(f"  {label:<36} {per:7.3f} s a container (median {statistics.median(times):.3f}), {per * n:7.1f} s for "
              f"{n}{extra}")  # fmt: skip
    print(f"  {KURYR}")


if __name__ == "__main__":
    main()

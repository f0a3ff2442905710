"""Containers started through podman on one cloudnet network with cloudnet's plugin for the installed podman
(tests/support/podman.py: cloudnet-cni on podman 4, cloudnet-netavark on podman 5): seconds per container with port
pools off, on, and on with pre-plumbed (parked) devices, beside podman's own `--network none` start on this machine
(what cloudnet adds on top) and Kuryr-Kubernetes' published figures for 50 pods; also pre-plumbed with a small pool,
refilled (and parked) while containers keep coming. The modes run side by side (a cloud each, in a process of its
own), one container of each in turn, so that others' load on a shared machine falls on all alike; the containers of
all modes stay until the end (podman's own start slows a little as they add up, for every mode).

Needs root, podman, runc and busybox-static (`make deps`). Usage: .venv/bin/python bench/cni.py [-n 50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import ROOT  # noqa: F401  (puts the project on sys.path)
from tests.support.cni import CniCloud, cni_cloud
from tests.support.podman import DRIVER, Podman, describe

from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade

REFILL = 10
KURYR = "Kuryr-Kubernetes (published): 50 pods in 226 s without pools, 103 s with them (4.5 s -> 2.1 s a pod)"


@dataclass
class Mode:
    label: str
    network: str  # podman's network name ("none": no plugin at all)
    times: list[float] = field(default_factory=list)


def start(podman: Podman, name: str, network: str) -> float:
    """Seconds for one `podman run -d` (it returns once the plugin's ADD or setup has answered)."""
    t0 = time.perf_counter()
    podman.run("run", "-d", "--name", name, "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
               "--network", network, podman.image, "/bin/sleep", "600")  # fmt: skip
    return time.perf_counter() - t0


def serve_cloud(work: Path, template: Path, pools: bool, park: bool, size: int) -> None:
    """One cloud (server, agent) in this process, for the bench's main process: prints the plugin's configuration;
    on "warm" (a first container has been started) waits for the pool's refill (parked: every ready port's device
    parked, so that the run measures taking pre-plumbed devices, not parking them meanwhile) and says "ready"; ends
    when its input does."""
    with cni_cloud(work, template, instance_pools=pools, park=park, pool_min=size or 2, pool_batch=size or 4) as rig:
        print(json.dumps(rig.conf(name=f"bench-{rig.cloud.suffix}", timeout=60)), flush=True)
        for line in sys.stdin:
            if line.strip() == "warm" and pools:
                rig.cloud.wait_for(lambda: pool_ready(rig, park) >= size, timeout=120, what="the pool's refill")
            print("ready", flush=True)


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
    # (one cloud of a run, in a process of its own: work dir, database template, pools, park, pool size)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        work, template, pools, park, size = args.serve.split(",")
        serve_cloud(Path(work), Path(template), pools == "1", park == "1", int(size))
        return
    n = args.n
    work = Path(tempfile.mkdtemp(prefix="cloudnet-bench-cni-"))
    template = work / "template.db"
    store = Store(f"sqlite:///{template}")
    upgrade(store)
    store.dispose()
    podman = Podman.make("bench")
    modes = [Mode("podman run --network none", "none")]
    start(podman, "raw-warm", "none")
    # label -> (pools, park, pool min = batch): a pool of n + 1 is never refilled during the run; one of REFILL
    # is, every REFILL containers, and with parking the agent parks the refill while containers keep coming.
    kinds = {
        "pools off": (False, False, 0),
        "pools on": (True, False, n + 1),
        "pools on, pre-plumbed": (True, True, n + 1),
        f"pre-plumbed, refills of {REFILL}": (True, True, REFILL),
    }
    clouds: list[subprocess.Popen[str]] = []
    try:
        # A process a cloud: one cloud's threads never wait for another's on the interpreter lock.
        for i, (label, (pools, park, size)) in enumerate(kinds.items()):
            spec = f"{work / f'cloud{i}'},{template},{int(pools)},{int(park)},{size if pools else 0}"
            cloud = subprocess.Popen([sys.executable, __file__, "--serve", spec], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip
            clouds.append(cloud)
            assert cloud.stdin is not None and cloud.stdout is not None
            mode = Mode(f"{DRIVER}, {label}", podman.network(json.loads(cloud.stdout.readline())))
            start(podman, f"m{i}-warm", mode.network)  # (makes the pool, when pools are on)
            cloud.stdin.write("warm\n")
            cloud.stdin.flush()
            if cloud.stdout.readline().strip() != "ready":
                raise SystemExit(f"the cloud of {label} failed")
            modes.append(mode)
        # One container of each mode in turn: every mode meets the same machine (others' load comes and goes).
        for i in range(n):
            for j, mode in enumerate(modes):
                mode.times.append(start(podman, f"m{j}-{i}", mode.network))
        podman.run("rm", "-af", "-t", "0", timeout=600)
    finally:
        for cloud in clouds:
            if cloud.stdin is not None:
                cloud.stdin.close()
            cloud.wait(timeout=120)
        podman.close()
    print(f"\n{n} containers a mode started through {describe()} (busybox, runc), the modes in turn; load "
          f"average {os.getloadavg()[0]:.1f} at the end:")  # fmt: skip
    raw = statistics.mean(modes[0].times)
    for mode in modes:
        per = statistics.mean(mode.times)
        extra = "" if mode is modes[0] else f"   (+{per - raw:.3f} s over podman alone)"
        print(f"  {mode.label:<47} {per:7.3f} s a container (median {statistics.median(mode.times):.3f}), "
              f"{per * n:7.1f} s for {n}{extra}")  # fmt: skip
    print(f"  {KURYR}")


if __name__ == "__main__":
    main()

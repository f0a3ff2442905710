"""VM taps on the Linux dataplane (issue 28): how long a VM's NIC takes to be plugged. Prints figures; asserts nothing.

Two figures, each over N VM instances with one NIC on one network (a warm-up VM first: the network's bridge,
metadata namespace and DHCP server exist before the timed ones):

  pass   the dataplane's own work: `cloudnet serve` holds the state, this process runs the Linux driver and, after
         each POST /v2.0/instances, fetches the host's desired state and times one incremental pass
         (LinuxDataplane.apply: the tap made, marked, on its bridge, its filter in the same pass) until the
         pass's report says the port is ACTIVE. This is the "tap plugged -> ACTIVE" figure of the target.
  api    end to end: `cloudnet up` (server and agent in one process), from the POST until GET /v2.0/instances/{id}
         (?wait: the server answers once the instance settled) shows the instance ACTIVE, which includes the
         agent noticing the change, its pass, its report, and the metadata proxy answering on that network.

Usage (root): .venv/bin/python bench/vm_taps.py [--instances 50]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from common import (
    ROOT,
    UNLIMITED,
    cloudnet_server,
    free_port,
    machine_load,
    ms,
    percentile,
    pin_client,
    row,
    stop,
    wait_registered,
)

from cloudnet.dataplane.linux.driver import LinuxDataplane

TARGET = 0.050


def _vm(c: httpx.Client, host: str, network_id: str, name: str) -> dict[str, Any]:
    r = c.post("/instances", json={"instance": {"name": name, "host": host, "kind": "vm",
                                                "nets": [{"network": network_id}]}})  # fmt: skip
    r.raise_for_status()
    return dict(r.json()["instance"])


def _network(c: httpx.Client) -> str:
    net = c.post("/networks", json={"network": {"name": "bench-vm"}}).json()["network"]
    c.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.201.0.0/22"}}).raise_for_status()
    return str(net["id"])


def measure_pass(instances: int) -> list[float]:
    host = f"bench-vm-{uuid.uuid4().hex[:6]}"
    dataplane = LinuxDataplane(host)
    with cloudnet_server() as url, httpx.Client(base_url=url + "/v2.0", timeout=30) as c:
        c.put(f"/hosts/{host}", json={"host": {"agent_version": "bench"}}).raise_for_status()
        pin_client(1)
        try:
            network_id = _network(c)
            _vm(c, host, network_id, "warm")
            dataplane.apply(c.get(f"/hosts/{host}/state").json(), full=True)
            times = []
            for i in range(instances):
                port_id = _vm(c, host, network_id, f"vm{i}")["nets"][0]["port_id"]
                state = c.get(f"/hosts/{host}/state").json()
                t0 = time.perf_counter()
                reports = dataplane.apply(state, full=False)
                times.append(time.perf_counter() - t0)
                status = {r.port_id: r.status for r in reports}.get(port_id)
                if status != "ACTIVE":
                    raise SystemExit(f"vm{i}'s port is {status} after its pass: {dataplane.failures()}")
            return times
        finally:
            dataplane.close()
            dataplane.teardown()


@contextmanager
def cloudnet_up(host: str) -> Iterator[str]:
    state = Path(tempfile.mkdtemp(prefix="cloudnet-vmtaps-"))
    port = free_port()
    cmd = ["taskset", "-c", "0", str(ROOT / ".venv/bin/cloudnet"), "up", "--state-dir", str(state), "--port",
           str(port), "--agent-host", host, "--metadata-listen", f"127.0.0.1:{free_port()}", *UNLIMITED]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(state / "log", "w"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}/v2.0"
    try:
        with httpx.Client(base_url=url, timeout=30) as c:
            wait_registered(c, host, proc, state / "log")
        yield url
    finally:
        stop(proc)
        LinuxDataplane(host).teardown()
        shutil.rmtree(state, ignore_errors=True)


def _active(c: httpx.Client, instance_id: str, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while c.get(f"/instances/{instance_id}", params={"wait": "5"}).json()["instance"]["status"] != "ACTIVE":
        if time.monotonic() > deadline:
            raise SystemExit(f"instance {instance_id} not ACTIVE after {limit} s")


def measure_api(instances: int) -> list[float]:
    host = f"bench-vmapi-{uuid.uuid4().hex[:6]}"
    with cloudnet_up(host) as url, httpx.Client(base_url=url, timeout=30) as c:
        pin_client(1)
        network_id = _network(c)
        _active(c, _vm(c, host, network_id, "warm")["id"])
        times = []
        for i in range(instances):
            t0 = time.perf_counter()
            _active(c, _vm(c, host, network_id, f"vm{i}")["id"])
            times.append(time.perf_counter() - t0)
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=50)
    args = parser.parse_args()
    machine_load()
    passes = measure_pass(args.instances)
    api = measure_api(args.instances)
    print(f"VM taps, Linux dataplane, {args.instances} VMs with one NIC each (SQLite):")
    p50 = percentile(passes, 50)
    row("tap plugged -> ACTIVE p50 (agent pass)", ms(p50), "<= 50 ms, Linux", p50 <= TARGET)
    row("tap plugged -> ACTIVE p99 (agent pass)", ms(percentile(passes, 99)), "(no target)")
    row("POST instance -> ACTIVE via the API, p50", ms(percentile(api, 50)), "(no target: end to end)")
    row("POST instance -> ACTIVE via the API, p99", ms(percentile(api, 99)), "(no target)")


if __name__ == "__main__":
    main()

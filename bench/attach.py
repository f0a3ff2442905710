"""Instance attach benchmark (issue: host agent and Linux dataplane). Prints figures; asserts nothing.

Runs `cloudnet up` (server + agent in one process, SQLite) and measures, over N instances with one
`network` net each: the time from POST /v2.0/instances until the instance can ping its gateway, and
the time to delete them all until their devices are gone.

Usage (root): .venv/bin/python bench/attach.py [--instances 50]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from common import ROOT, free_port, median, ms, percentile, pin_client, row

from cloudnet.dataplane.linux import names, netns


def _pingable(ns: str, address: str) -> bool:
    cmd = ["ip", "netns", "exec", ns, "ping", "-n", "-c1", "-W0.2", address]
    return subprocess.run(cmd, capture_output=True).returncode == 0


def _host_links(host_ns: str) -> str:
    return subprocess.run(["ip", "-n", host_ns, "-o", "link"], capture_output=True, text=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=50)
    args = parser.parse_args()
    suffix = uuid.uuid4().hex[:6]
    host = f"bench-{suffix}"
    state = Path(tempfile.mkdtemp(prefix="cloudnet-attach-"))
    port = free_port()
    cmd = ["taskset", "-c", "0", str(ROOT / ".venv/bin/cloudnet"), "up", "--state-dir", str(state),
           "--port", str(port), "--agent-host", host]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(state / "log", "w"))  # noqa: SIM115
    pin_client(1)
    namespaces: list[str] = []
    url = f"http://127.0.0.1:{port}/v2.0"
    try:
        with httpx.Client(base_url=url, timeout=30) as c:
            deadline = time.monotonic() + 60
            while True:  # the agent registered its host: server and agent are up
                try:
                    if c.get(f"/hosts/{host}").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit((state / "log").read_text())
                time.sleep(0.05)
            net = c.post("/networks", json={"network": {"name": "bench"}}).json()["network"]
            sub = c.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.200.0.0/22"}}).json()
            gateway = sub["subnet"]["gateway_ip"]
            router = c.post("/routers", json={"router": {"name": "bench"}}).json()["router"]
            c.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["subnet"]["id"]})
            attach, api_times, ids = [], [], []
            for i in range(args.instances):
                ns = f"cnbench-{suffix}-{i}"
                netns.ensure(ns)
                namespaces.append(ns)
                t0 = time.perf_counter()
                r = c.post("/instances", json={"instance": {"name": f"i{i}", "host": host, "netns": ns,
                                                            "nets": [{"network": net["id"]}]}})  # fmt: skip
                api_times.append(time.perf_counter() - t0)
                r.raise_for_status()
                ids.append(r.json()["instance"]["id"])
                while not _pingable(ns, gateway):
                    if time.perf_counter() - t0 > 30:
                        raise SystemExit(f"instance {i} never reached its gateway")
                attach.append(time.perf_counter() - t0)
            host_ns = names.host_ns(host)
            t0 = time.perf_counter()
            for iid in ids:
                c.delete(f"/instances/{iid}").raise_for_status()
            while names.TAP in _host_links(host_ns):
                if time.perf_counter() - t0 > 60:
                    raise SystemExit("devices were not removed")
                time.sleep(0.005)
            delete_all = time.perf_counter() - t0
        p50, p99 = percentile(attach, 50), percentile(attach, 99)
        print(f"Instance attach, {args.instances} instances, one network port each (cloudnet up, SQLite):")
        row("POST /v2.0/instances -> ping gateway, p50", ms(p50), "< 150 ms", p50 < 0.150)
        row("POST /v2.0/instances -> ping gateway, p99", ms(p99), "(no target)")
        row("POST /v2.0/instances API answer, median", ms(median(api_times)), "(no target)")
        row(f"delete all {args.instances} until their devices are gone", ms(delete_all), "(no target)")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for ns in namespaces:
            netns.remove(ns)
        from cloudnet.dataplane.linux.driver import LinuxDataplane

        LinuxDataplane(host).teardown()


if __name__ == "__main__":
    main()

"""Instance attach benchmark (issues: host agent and Linux dataplane; port pools). Prints figures; asserts nothing.

Runs `cloudnet up` (server + agent in one process, SQLite) and measures, over N instances with one
`network` net each: the time from POST /v2.0/instances until the instance can ping its gateway, and
the time to delete them all until their devices are gone. Modes, each in a fresh `cloudnet up`:

  unpooled  no pool on the host: each instance creates its port (IPAM, MAC) and the agent plugs a new veth
  pool      a warm pool (filled before the run, no refill during it): each instance claims a ready port
  park      the same with --park-pool-devices: every ready port's device is parked, configured, in a
            namespace of its own, and attach is a move of the parked device into the instance's namespace

The namespace is the caller's (made before the POST, as a container runtime does), or, with `+made` after the
mode, cloudnet's: the POST names none and the answer says which. `unpooled+made`: the agent makes it and plugs
a new veth; `park+made`: the instance takes over a parked device's namespace, nothing left to plug. The target
compares `park+made` with `unpooled+made`: the same request, with and without a warm pool.

Usage (root): .venv/bin/python bench/attach.py [--instances 50] [--modes unpooled,pool,park,unpooled+made,park+made]
"""

from __future__ import annotations

import argparse
import itertools
import os
import select
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from common import ROOT, UNLIMITED, free_port, median, ms, percentile, pin_client, row, wait_registered

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.driver import LinuxDataplane


def _checksum(data: bytes) -> int:
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF


def _wait_pingable(ns: str, address: str, limit: float) -> None:
    """ICMP echo requests from inside the instance every 0.5 ms until the first reply, from a raw socket
    opened in its namespace (no process per attempt: starting `ip netns exec ping` costs several ms,
    which would blur the figures). Sending fails at once while the instance has no route yet; a namespace
    cloudnet makes is waited for."""
    deadline = time.perf_counter() + limit
    while True:
        try:
            with netns.entered(ns):
                sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            break
        except (netns.NamespaceMissing, OSError):  # not there yet, or its name made but not yet mounted
            if time.perf_counter() > deadline:
                raise SystemExit(f"{ns} never appeared") from None
            time.sleep(0.0005)
    ident = os.getpid() & 0xFFFF
    try:
        sock.setblocking(False)
        for seq in itertools.count():
            if time.perf_counter() > deadline:
                raise SystemExit(f"{ns} never reached {address}")
            head = struct.pack("!BBHHH", 8, 0, 0, ident, seq & 0xFFFF)
            packet = struct.pack("!BBHHH", 8, 0, _checksum(head), ident, seq & 0xFFFF)
            try:
                sock.sendto(packet, (address, 0))
            except OSError:  # no interface, address or route yet
                time.sleep(0.0005)
                continue
            until = time.perf_counter() + 0.0005
            while (left := until - time.perf_counter()) > 0:
                if not select.select([sock], [], [], left)[0]:
                    break
                reply, (source, _port) = sock.recvfrom(1500)
                icmp = reply[(reply[0] & 0x0F) * 4 :]  # past the IP header
                if source == address and icmp[0] == 0 and struct.unpack("!H", icmp[4:6])[0] == ident:
                    return
    finally:
        sock.close()


def _host_links(host_ns: str) -> str:
    return subprocess.run(["ip", "-n", host_ns, "-o", "link"], capture_output=True, text=True).stdout


def _fill_pool(c: httpx.Client, host: str, network_id: str, size: int) -> None:
    """Create the host's pool with `size` ready ports, then stop it refilling during the run."""
    claim = {"claim": {"host": host, "network_id": network_id}}
    r = c.post("/port-pools/claim", json=claim)
    r.raise_for_status()
    pool = next(p for p in c.get("/port-pools").json()["port_pools"] if p["network_id"] == network_id)
    c.put(f"/port-pools/{pool['id']}", json={"port_pool": {"min": size, "batch": size}}).raise_for_status()
    c.post("/port-pools/release", json={"port_id": r.json()["port"]["id"]}).raise_for_status()
    c.post("/port-pools/claim", json=claim).raise_for_status()  # below min now: one bulk refill to `size`
    deadline = time.monotonic() + 60
    while c.get(f"/port-pools/{pool['id']}").json()["port_pool"]["ready"] < size:
        if time.monotonic() > deadline:
            raise SystemExit("the pool did not fill")
        time.sleep(0.05)
    c.put(f"/port-pools/{pool['id']}", json={"port_pool": {"min": 0}}).raise_for_status()


def _wait_parked(c: httpx.Client, network_id: str, size: int) -> None:
    """Until the agent has parked a device for every ready port (each offers its namespace)."""
    deadline = time.monotonic() + 60
    params = {"network_id": network_id, "device_owner": "compute:cloudnet-pool"}
    while (
        sum("prepared_netns" in p["binding:vif_details"] for p in c.get("/ports", params=params).json()["ports"]) < size
    ):
        if time.monotonic() > deadline:
            raise SystemExit("the pool's devices were not parked")
        time.sleep(0.05)


def run(mode: str, instances: int, cleanups: list[Callable[[], None]]) -> dict[str, float]:
    """One mode in a fresh `cloudnet up`; what it leaves in the kernel is removed by `cleanups`, after every
    mode has run (namespace teardown runs in the kernel's background and would slow the next mode)."""
    suffix = uuid.uuid4().hex[:6]
    host = f"bench-{suffix}"
    pooling, _plus, made = mode.partition("+")
    made_ns = made == "made"  # the POST names no namespace: cloudnet provides it
    state = Path(tempfile.mkdtemp(prefix="cloudnet-attach-"))
    port = free_port()
    cmd = ["taskset", "-c", "0", str(ROOT / ".venv/bin/cloudnet"), "up", "--state-dir", str(state),
           "--port", str(port), "--agent-host", host, "--metadata-listen", f"127.0.0.1:{free_port()}",
           *UNLIMITED]  # fmt: skip
    if pooling == "park":
        cmd.append("--park-pool-devices")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(state / "log", "w"))  # noqa: SIM115
    pin_client(1)
    namespaces: list[str] = []

    def cleanup() -> None:
        for ns in namespaces:
            netns.remove(ns)
        LinuxDataplane(host).teardown()
        shutil.rmtree(state, ignore_errors=True)

    cleanups.append(cleanup)
    url = f"http://127.0.0.1:{port}/v2.0"
    try:
        with httpx.Client(base_url=url, timeout=30) as c:
            wait_registered(c, host, proc, state / "log")
            net = c.post("/networks", json={"network": {"name": "bench"}}).json()["network"]
            sub = c.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.200.0.0/22"}}).json()
            gateway = sub["subnet"]["gateway_ip"]
            router = c.post("/routers", json={"router": {"name": "bench"}}).json()["router"]
            c.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["subnet"]["id"]})
            if pooling != "unpooled":
                _fill_pool(c, host, net["id"], instances + 2)
                if pooling == "park":
                    _wait_parked(c, net["id"], instances + 2)

            def body(name: str) -> dict[str, Any]:
                made = {} if made_ns else {"netns": f"cnbench-{suffix}-{name}"}
                if not made_ns:
                    netns.ensure(made["netns"])
                    namespaces.append(made["netns"])
                return {"instance": {"name": name, "host": host, "nets": [{"network": net["id"]}], **made}}

            # Warm-up: the network's first instance on the host also brings up its metadata proxy.
            r = c.post("/instances", json=body("warm"))
            r.raise_for_status()
            ids = [r.json()["instance"]["id"]]
            _wait_pingable(r.json()["instance"]["netns"], gateway, 30)
            attach, api_times = [], []
            for i in range(instances):
                request = body(f"i{i}")
                t0 = time.perf_counter()
                r = c.post("/instances", json=request)
                api_times.append(time.perf_counter() - t0)
                r.raise_for_status()
                ids.append(r.json()["instance"]["id"])
                _wait_pingable(r.json()["instance"]["netns"], gateway, 30)
                attach.append(time.perf_counter() - t0)
            host_ns = names.host_ns(host)
            t0 = time.perf_counter()
            for iid in ids:
                c.delete(f"/instances/{iid}").raise_for_status()
            if pooling == "unpooled":  # pooled ports go back to the pool (and, parked, keep their devices)
                while names.TAP in _host_links(host_ns):
                    if time.perf_counter() - t0 > 60:
                        raise SystemExit("devices were not removed")
                    time.sleep(0.005)
            delete_all = time.perf_counter() - t0
        return {"p50": percentile(attach, 50), "p99": percentile(attach, 99), "api": median(api_times),
                "delete": delete_all}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def measure(modes: Sequence[str], instances: int) -> dict[str, dict[str, float]]:
    """Every mode in turn; the kernel objects of all are removed at the end."""
    cleanups: list[Callable[[], None]] = []
    try:
        return {mode: run(mode, instances, cleanups) for mode in modes}
    finally:
        for cleanup in cleanups:
            cleanup()


LABELS = {
    "unpooled": "pools disabled",
    "pool": "warm pool",
    "park": "warm pool, parked devices",
    "unpooled+made": "pools disabled, namespace made by cloudnet",
    "pool+made": "warm pool, namespace made by cloudnet",
    "park+made": "warm pool, parked namespace taken over",
}
# (pooled mode, the unpooled mode it is compared with, whether the target applies)
RATIOS = [("pool", "unpooled", False), ("park", "unpooled", False), ("pool+made", "unpooled+made", False),
          ("park+made", "unpooled+made", True)]  # fmt: skip


def report(results: dict[str, dict[str, float]], instances: int) -> None:
    labels = LABELS
    print(f"Instance attach, {instances} instances, one network port each (cloudnet up, SQLite):")
    for mode, fig in results.items():
        row(f"{labels[mode]}: POST -> ping gateway, p50", ms(fig["p50"]), "< 150 ms", fig["p50"] < 0.150)
        row(f"{labels[mode]}: POST -> ping gateway, p99", ms(fig["p99"]), "(no target)")
        row(f"{labels[mode]}: POST /v2.0/instances answer, median", ms(fig["api"]), "(no target)")
        what = "until their devices are gone" if mode.startswith("unpooled") else "(ports back to the pool)"
        row(f"{labels[mode]}: delete all {instances} {what}", ms(fig["delete"]), "(no target)")
    for mode, base, target in RATIOS:
        if mode in results and base in results:
            ratio = results[base]["p50"] / results[mode]["p50"]
            label = f"{labels[mode]} p50 speed-up over {labels[base]}"
            row(label, f"{ratio:.2f}x", ">= 3x" if target else "(info)", ratio >= 3 if target else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=50)
    parser.add_argument("--modes", default="unpooled,pool,park,unpooled+made,park+made")
    args = parser.parse_args()
    results = measure(args.modes.split(","), args.instances)
    report(results, args.instances)


if __name__ == "__main__":
    main()

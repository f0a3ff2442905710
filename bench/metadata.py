"""Metadata benchmark (issue 5: instance metadata). Prints figures beside their targets; asserts nothing.

  GET /openstack/latest/meta_data.json against the metadata API alone, at 1 and 32 connections
  the same from inside an instance namespace, through the proxy (the whole chain), at 1 and 32 connections
  a full cloud-init OpenStack crawl (Debian cloud-init's own reader, its EC2 crawl included)
  a boot storm: 100 instances x 50 requests within 6 s (a new connection per request, as cloud-init makes)
  proxy memory per extra network

`cloudnet serve` and the proxy run pinned to core 0, the load generator (wrk if installed, else a Python
client) to core 1. Needs root (namespaces). Usage: .venv/bin/python bench/metadata.py [--duration 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
from common import ROOT, UNLIMITED, free_port, median, ms, percentile, row

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import names
from cloudnet.wire import signing

PYTHON = str(ROOT / ".venv/bin/python")
PATH = "/openstack/latest/meta_data.json"
STORM_INSTANCES, STORM_REQUESTS, STORM_WINDOW = 100, 50, 6.0
EXTRA_NETWORKS = 50
# What a cloud-init OpenStack boot asks, in its order (reference/metadata.md §1.4); the storm cycles through it.
BOOT_PATHS = [
    "/openstack", "/openstack", PATH, "/openstack/latest/user_data", "/openstack/latest/vendor_data.json",
    "/openstack/latest/vendor_data2.json", "/openstack/latest/network_data.json", "/latest/meta-data/",
    "/latest/meta-data/block-device-mapping/", "/latest/meta-data/block-device-mapping/ami",
    "/latest/meta-data/block-device-mapping/root", "/latest/meta-data/placement/",
    "/latest/meta-data/placement/availability-zone", "/latest/meta-data/public-keys/",
    "/latest/meta-data/public-keys/0/openssh-key", "/latest/meta-data/ami-id", "/latest/meta-data/hostname",
    "/latest/meta-data/instance-id", "/latest/meta-data/instance-type", "/latest/meta-data/local-hostname",
    "/latest/meta-data/local-ipv4", "/latest/meta-data/public-ipv4", "/latest/meta-data/reservation-id",
    "/latest/meta-data/security-groups", "/latest/user-data",
]  # fmt: skip
CRAWL = """
import json, logging, sys, time
logging.disable(logging.CRITICAL)
from cloudinit.sources.helpers import openstack
times = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    res = openstack.MetadataReader("http://169.254.169.254", timeout=5, retries=0).read_v2()
    times.append(time.perf_counter() - t0)
    assert res["metadata"]["uuid"] and res["ec2-metadata"]["instance-id"], res
print(json.dumps(times))
"""


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- child processes ------------------------------------------------------------------------------------


def proxy_child(args: argparse.Namespace) -> None:
    """A metadata proxy on its own (as in an agent): one JSON desired state per stdin line, a status line back."""
    from cloudnet.agent.metadata.proxy import MetadataProxy

    proxy = MetadataProxy(args.host, args.upstream, args.secret, burst=args.burst, rate=args.rate)
    for line in sys.stdin:
        state = json.loads(line)
        proxy.update(state)
        networks = {p["network_id"] for p in state["ports"].values()}
        serving = sum(proxy.serving(n) for n in networks)
        print(json.dumps({"rss_kb": rss_kb(os.getpid()), "serving": serving}), flush=True)
    proxy.close()


async def _one(source: str, path: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("169.254.169.254", 80, local_addr=(source, 0))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 169.254.169.254\r\nConnection: close\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    await reader.readexactly(length)
    writer.close()
    return int(head.split(b" ", 2)[1]), time.perf_counter() - t0


def storm_child(args: argparse.Namespace) -> None:
    """Inside the instance namespace: every address is one booting instance, paced to finish in the window."""
    sources = args.sources.split(",")

    async def boot(source: str, start: float) -> list[tuple[int, float]]:
        await asyncio.sleep(start)
        gap = (STORM_WINDOW - 1.0 - 0.2) / (STORM_REQUESTS - 1)
        out = []
        t0 = time.perf_counter()
        for k in range(STORM_REQUESTS):
            delay = t0 + k * gap - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                out.append(await asyncio.wait_for(_one(source, BOOT_PATHS[k % len(BOOT_PATHS)]), 10))
            except (OSError, TimeoutError, asyncio.IncompleteReadError):
                out.append((0, 10.0))
        return out

    async def main() -> dict[str, Any]:
        rnd = random.Random(5)
        t0 = time.perf_counter()
        results = await asyncio.gather(*(boot(s, rnd.random()) for s in sources))
        flat = [r for per in results for r in per]
        latencies = [lat for _s, lat in flat]
        return {"elapsed": time.perf_counter() - t0, "count": len(flat),
                "statuses": dict(Counter(s for s, _l in flat)), "max": max(latencies),
                "p50": percentile(latencies, 50), "p99": percentile(latencies, 99)}  # fmt: skip

    print(json.dumps(asyncio.run(main())))


# -- the load generator -----------------------------------------------------------------------------------


_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def _seconds(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * _UNIT[unit]


def wrk(url: str, headers: dict[str, str], connections: int, duration: float, ns: str | None) -> dict[str, float]:
    cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{duration:g}s", "--latency", url]
    for name, value in headers.items():
        cmd += ["-H", f"{name}: {value}"]
    if ns:
        cmd = ["ip", "netns", "exec", ns, *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _seconds(re.search(r"\s50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p99 = _seconds(re.search(r"\s99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50": p50, "p99": p99, "errors": float(non2xx.group(1)) if non2xx else 0.0}


def python_load(
    url: str, headers: dict[str, str], connections: int, duration: float, ns: str | None
) -> dict[str, float]:
    """The fallback without wrk: keep-alive connections from one pinned Python process."""
    code = f"""
import asyncio, json, time, sys
sys.path.insert(0, {str(ROOT / "bench")!r})
from common import percentile
host, port, path, conns, duration, hdrs = {url.split("/")[2].split(":")[0]!r}, \
{int(url.split("/")[2].split(":")[1]) if ":" in url.split("/")[2] else 80}, {PATH!r}, {connections}, {duration}, \
{json.dumps(headers)!r}
req = ("GET " + path + " HTTP/1.1\\r\\nHost: x\\r\\n" + "".join(k + ": " + v + "\\r\\n"
       for k, v in json.loads(hdrs).items()) + "\\r\\n").encode()
async def worker(end, lat, bad):
    r, w = await asyncio.open_connection(host, port)
    while time.perf_counter() < end:
        t0 = time.perf_counter(); w.write(req)
        head = await r.readuntil(b"\\r\\n\\r\\n")
        n = int(head.lower().split(b"content-length:")[1].split(b"\\r\\n")[0])
        await r.readexactly(n); lat.append(time.perf_counter() - t0)
        bad[0] += not head.startswith(b"HTTP/1.1 200")
async def main():
    lat, bad = [], [0]
    end = time.perf_counter() + duration
    await asyncio.gather(*(worker(end, lat, bad) for _ in range(conns)))
    print(json.dumps({{"rps": len(lat) / duration, "p50": percentile(lat, 50), "p99": percentile(lat, 99),
                      "errors": bad[0]}}))
asyncio.run(main())
"""
    cmd = ["taskset", "-c", "1", PYTHON, "-c", code]
    if ns:
        cmd = ["ip", "netns", "exec", ns, *cmd]
    return dict(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))


# -- the setup ---------------------------------------------------------------------------------------------


@contextmanager
def server(state: Path) -> Any:
    port, md_port = free_port(), free_port()
    cmd = ["taskset", "-c", "0", str(ROOT / ".venv/bin/cloudnet"), "serve", "--state-dir", str(state), "--port",
           str(port), "--metadata-listen", f"127.0.0.1:{md_port}", *UNLIMITED]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(state / "server.log", "w"))  # noqa: SIM115
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit((state / "server.log").read_text()) from None
                time.sleep(0.05)  # waiting for the child to bind: polled, with a deadline
        yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{md_port}", proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@contextmanager
def proxy(host: str, upstream: str, secret: str, burst: float, rate: float) -> Any:
    cmd = ["taskset", "-c", "0", PYTHON, __file__, "--proxy-child", "--host", host, "--upstream", upstream,
           "--secret", secret, "--burst", str(burst), "--rate", str(rate)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def update(state: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(state) + "\n")
        proc.stdin.flush()
        return dict(json.loads(proc.stdout.readline()))

    try:
        yield proc, update
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--proxy-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--storm-child", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--host", "--upstream", "--secret", "--sources"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--burst", type=float, default=32, help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=4.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.proxy_child:
        return proxy_child(args)
    if args.storm_child:
        return storm_child(args)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark builds network namespaces")
    load = wrk if shutil.which("wrk") else python_load
    print(f"metadata benchmark (load generator: {'wrk' if load is wrk else 'python'}, {args.duration:g} s per run, "
          f"load average {_load()})")  # fmt: skip
    suffix = uuid.uuid4().hex[:6]
    host = f"bench-{suffix}"
    state_dir = Path(tempfile.mkdtemp(prefix="cloudnet-mdbench-"))
    namespaces: list[str] = []
    try:
        with server(state_dir) as (api_url, md_url, server_pid):
            run(args, load, host, suffix, state_dir, api_url, md_url, server_pid, namespaces)
    finally:
        for ns in namespaces:
            with suppress(Exception):
                netns.remove(ns)
        shutil.rmtree(state_dir, ignore_errors=True)
    print(f"load average at the end: {_load()} (other work on the machine skews the figures)")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(
    args: argparse.Namespace, load: Any, host: str, suffix: str, state_dir: Path, api_url: str, md_url: str,
    server_pid: int, namespaces: list[str],
) -> None:  # fmt: skip
    secret = signing.read_secret(state_dir / "metadata_secret")
    c = httpx.Client(base_url=api_url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60)
    c.put(f"/hosts/{host}", json={"host": {}}).raise_for_status()
    net = c.post("/networks", json={"network": {"name": "bench"}}).json()["network"]
    c.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.201.0.0/24"}}).raise_for_status()
    addresses = [f"10.201.0.{10 + i}" for i in range(STORM_INSTANCES)]
    instances = []
    for i, ip in enumerate(addresses):
        r = c.post("/instances", json={"instance": {
            "name": f"vm{i}", "netns": f"cnbench-{suffix}-{i}", "host": host, "user_data": "#cloud-config\n",
            "ssh_keys": [{"name": "k", "key": "ssh-ed25519 AAAA bench"}], "nets": [{"network": net["id"],
                                                                                   "v4-fixed-ip": ip}],
        }})  # fmt: skip
        r.raise_for_status()
        instances.append(r.json()["instance"])
    first = instances[0]
    signed = {"X-Instance-ID": first["id"], "X-Tenant-ID": first["project_id"],
              "X-Instance-ID-Signature": signing.sign(secret, first["id"])}  # fmt: skip

    print("metadata API alone (GET /openstack/latest/meta_data.json, signed as a proxy does):")
    load(md_url + PATH, signed, 1, 1.0, None)  # warm-up: views loaded, connections made
    alone1 = load(md_url + PATH, signed, 1, args.duration, None)
    used = cpu_seconds(server_pid)
    alone32 = load(md_url + PATH, signed, 32, args.duration, None)
    server_cpu = (cpu_seconds(server_pid) - used) / (alone32["rps"] * args.duration)
    row("1 connection: p50", ms(alone1["p50"]), "<= 0.2 ms (T9)", alone1["p50"] <= 0.0002)
    row("1 connection: p99", ms(alone1["p99"]), "<= 1 ms (T9)", alone1["p99"] <= 0.001)
    row("1 connection: requests/s", f"{alone1['rps']:,.0f}", "(info)")
    row("32 connections: requests/s", f"{alone32['rps']:,.0f}", ">= 8,000", alone32["rps"] >= 8000)
    row("32 connections: p99", ms(alone32["p99"]), "<= 2 ms", alone32["p99"] <= 0.002)
    row("server CPU per request", f"{server_cpu * 1e6:.0f} us", "(info: 125 us = 8,000/s on one core)")

    # The topology the driver builds: metadata namespace on the network, the instance with a route to it.
    meta_ns, inst_ns = names.metadata_ns(host, net["id"]), f"cnbench-{suffix}"
    for ns in (meta_ns, inst_ns):
        netns.ensure(ns)
        namespaces.append(ns)
    sh("ip", "-n", inst_ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", meta_ns)
    for ip in addresses:
        sh("ip", "-n", inst_ns, "addr", "add", f"{ip}/24", "dev", "eth0")
    sh("ip", "-n", inst_ns, "link", "set", "eth0", "up")
    sh("ip", "-n", inst_ns, "route", "add", "169.254.169.254/32", "via", "10.201.0.2")
    sh("ip", "-n", meta_ns, "addr", "add", "10.201.0.2/24", "dev", "eth0")
    sh("ip", "-n", meta_ns, "addr", "add", "169.254.169.254/32", "dev", "eth0")
    sh("ip", "-n", meta_ns, "link", "set", "eth0", "up")
    desired = c.get(f"/hosts/{host}/state").json()

    print("through the proxy, from inside the instance namespace (rate limit lifted for the load runs):")
    with proxy(host, md_url, secret, burst=1e12, rate=1e12) as (proc, update):
        assert update(desired)["serving"] == 1
        url = "http://169.254.169.254" + PATH
        load(url, {}, 1, 1.0, inst_ns)
        chain1 = load(url, {}, 1, args.duration, inst_ns)
        used = cpu_seconds(proc.pid)
        chain32 = load(url, {}, 32, args.duration, inst_ns)
        proxy_cpu = (cpu_seconds(proc.pid) - used) / (chain32["rps"] * args.duration)
        row("1 connection: p50", ms(chain1["p50"]), "(info)")
        row("1 connection: p99", ms(chain1["p99"]), "(info)")
        row("1 connection: requests/s", f"{chain1['rps']:,.0f}", "(info)")
        row("32 connections: requests/s", f"{chain32['rps']:,.0f}", ">= 3,000", chain32["rps"] >= 3000)
        row("32 connections: p99", ms(chain32["p99"]), "<= 10 ms", chain32["p99"] <= 0.010)
        row("proxy CPU per request", f"{proxy_cpu * 1e6:.0f} us", "(info)")
        if chain32["errors"] or alone32["errors"]:
            row("non-2xx answers under load", f"{chain32['errors'] + alone32['errors']:.0f}", "0", False)

        if subprocess.run(["/usr/bin/python3", "-c", "import cloudinit"], capture_output=True).returncode == 0:
            out = subprocess.run(["ip", "netns", "exec", inst_ns, "taskset", "-c", "1", "/usr/bin/python3", "-c",
                                  CRAWL, "11"], capture_output=True, text=True, check=True).stdout  # fmt: skip
            crawls = json.loads(out)[1:]  # the first one pays for imports and connection set-up
            crawl = median(crawls)
            row("cloud-init OpenStack crawl, median of 10", ms(crawl), "<= 100 ms", crawl <= 0.1)
            row("cloud-init OpenStack crawl, slowest", ms(max(crawls)), "(info)")
        else:
            print("  (cloud-init crawl skipped: Debian package cloud-init is not installed)")

        # Memory: the same proxy, serving 50 more networks.
        before = rss_kb(proc.pid)
        extra_state = json.loads(json.dumps(desired))
        for n in range(EXTRA_NETWORKS):
            net_id = str(uuid.uuid4())
            ns = names.metadata_ns(host, net_id)
            netns.ensure(ns)
            namespaces.append(ns)
            sh("ip", "-n", ns, "addr", "add", "169.254.169.254/32", "dev", "lo")
            port_id = f"bench-port-{n}"
            mac = f"fa:16:3e:00:{n // 256:02x}:{n % 256:02x}"
            fixed = [{"ip_address": "10.202.0.10"}]
            extra_state["ports"][port_id] = {"network_id": net_id, "mac_address": mac, "fixed_ips": fixed}
            extra_state["instances"].append({"id": f"bench-instance-{n}", "project_id": "p", "ports": [port_id]})
        status = update(extra_state)
        per_network_kb = (status["rss_kb"] - before) / EXTRA_NETWORKS
        row(f"proxy RSS: 1 network -> {status['serving']} networks", f"{before / 1024:.1f} -> "
            f"{status['rss_kb'] / 1024:.1f} MB", "(info)")  # fmt: skip
        row("proxy memory per extra network", f"{per_network_kb:.0f} kB", "<= 2 MB", per_network_kb <= 2048)

    print(f"boot storm ({STORM_INSTANCES} instances x {STORM_REQUESTS} requests within {STORM_WINDOW:g} s, "
          "default rate limit, one connection per request):")  # fmt: skip
    with proxy(host, md_url, secret, burst=32, rate=4.0) as (_proc, update):
        update(desired)
        cmd = ["ip", "netns", "exec", inst_ns, "taskset", "-c", "1", PYTHON, __file__, "--storm-child",
               "--sources", ",".join(addresses)]  # fmt: skip
        storm = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    statuses = {int(k): v for k, v in storm["statuses"].items()}
    fivexx = sum(v for k, v in statuses.items() if k >= 500 or k == 0)
    row("requests answered / sent", f"{statuses.get(200, 0)} / {storm['count']}", "all 200")
    row("slowest request", ms(storm["max"]), "<= 1 s", storm["max"] <= 1.0)
    row("p50 / p99", f"{ms(storm['p50'])} / {ms(storm['p99'])}", "(info)")
    row("5xx or failed", str(fivexx), "0", fivexx == 0)
    row("429 (rate limited)", str(statuses.get(429, 0)), "0 with the defaults", statuses.get(429, 0) == 0)
    row("whole storm took", f"{storm['elapsed']:.2f} s", f"<= {STORM_WINDOW:g} s", storm["elapsed"] <= STORM_WINDOW)
    c.close()


if __name__ == "__main__":
    main()

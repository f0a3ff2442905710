"""SmartOS metadata socket benchmark (issue: instance metadata). Prints figures beside targets; asserts nothing.

  GET of one key over one socket (one connection, one request at a time, protocol v2 frames with CRC and
  request ids): p50/p99 latency and GETs per second
  a slow 1 MiB line (sent in 64-byte pieces, then a GET): the service's CPU time for it (issue 15: it was 1.8 s)

The metadata service (MdataService, fed the desired state of a real `cloudnet serve`) runs in its own
process pinned to one core; this client runs pinned to the other, as T11 of reference/performance.md asks.

Usage: .venv/bin/python bench/mdata.py [--requests N]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from common import ROOT, cloudnet_server, percentile, pin_client, row

from cloudnet.wire.mdata_protocol import new_reqid, v2_request

HOST = "bench-host"
FRAMES = 1024  # distinct request ids, prepared before timing


def _serve(url: str, state_dir: str) -> None:
    """Child process: the agent's MdataService, following the API's desired state of HOST (a VM instance is served
    on its serial socket: bench/mdata_serial.py)."""
    from cloudnet.agent.client import ApiClient
    from cloudnet.agent.metadata.mdata_service import MdataService

    client = ApiClient(url, HOST, "admin")
    service = MdataService(Path(state_dir), client)
    service.update(client.desired_state())
    print("ready", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    service.close()
    client.close()


def _instance(url: str, vm: bool = False) -> str:
    with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as c:
        c.put(f"/hosts/{HOST}", json={"host": {"agent_version": "bench"}}).raise_for_status()
        net = c.post("/networks", json={"network": {"name": "bench"}}).json()["network"]["id"]
        body = {"network_id": net, "cidr": "10.77.0.0/24", "dns_nameservers": ["10.77.0.2"]}
        c.post("/subnets", json={"subnet": body}).raise_for_status()
        inst = {"name": "vm", "host": HOST, "nets": [{"network": net}],
                "metadata": {"user-script": "#!/bin/sh\necho hello\n", "role": "web"},
                **({"kind": "vm"} if vm else {"netns": "bench-vm"})}  # fmt: skip
        r = c.post("/instances", json={"instance": inst})
        r.raise_for_status()
        return str(r.json()["instance"]["id"])


def _get_loop(path: str, key: str, n: int) -> list[float]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        return get_loop(s.sendall, s.recv, key, n)


def get_loop(send: Callable[[bytes], object], recv: Callable[[int], bytes], key: str, n: int) -> list[float]:
    """Seconds of each of `n` sequential GETs of `key` over a stream, after NEGOTIATE V2."""
    frames = [(rid, v2_request(rid, "GET", key.encode())) for rid in (new_reqid() for _ in range(FRAMES))]
    times: list[float] = []
    send(b"NEGOTIATE V2\n")
    assert recv(64) == b"V2_OK\n"
    clock = time.perf_counter
    for i in range(n):
        rid, frame = frames[i % FRAMES]
        t0 = clock()
        send(frame)
        reply = recv(65536)
        while not reply.endswith(b"\n"):
            reply += recv(65536)
        times.append(clock() - t0)
        if rid not in reply or b"SUCCESS" not in reply:
            raise RuntimeError(f"unexpected reply {reply!r}")
    return times


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _slow_line_cpu(path: str, pid: int, size: int = 1 << 20, piece: int = 64) -> float:
    """The service's CPU seconds for one `size`-byte line that arrives `piece` bytes at a time."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        before = _cpu_seconds(pid)
        chunk = b"x" * piece
        for _ in range(size // piece):
            s.sendall(chunk)
        rid = new_reqid()
        s.sendall(b"\n" + v2_request(rid, "GET", b"sdc:uuid"))
        reply = b""
        while not reply.endswith(b"\n"):
            reply += s.recv(65536)
        if rid not in reply:
            raise RuntimeError(f"unexpected reply {reply!r}")
        return _cpu_seconds(pid) - before


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--serve", nargs=2, metavar=("URL", "STATE_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(*args.serve)
        return
    with cloudnet_server() as url:
        instance_id = _instance(url)
        with metadata_service(url) as (child, state_dir):
            path = f"{state_dir}/zonecontrol/{instance_id}/metadata.sock"
            _get_loop(path, "sdc:uuid", 2_000)  # warm-up
            print(f"mdata GET over one Unix socket ({args.requests:,} sequential requests, v2 frames):")
            for key in ("sdc:uuid", "user-script", "sdc:nics"):
                t0 = time.perf_counter()
                times = _get_loop(path, key, args.requests)
                rate = len(times) / (time.perf_counter() - t0)
                p50, p99 = percentile(times, 50), percentile(times, 99)
                row(f"GET {key} p50", us(p50), "<= 100 µs (T11: <= 50 µs)", p50 <= 100e-6)
                row(f"GET {key} p99", us(p99), "T11: <= 200 µs", p99 <= 200e-6)
                row(f"GET {key} rate", f"{rate:,.0f}/s", ">= 10,000/s (T11: >= 20,000/s)", rate >= 10_000)
            cpu = _slow_line_cpu(path, child.pid)
            row(
                "slow 1 MiB line (64-byte pieces): service CPU", f"{cpu * 1000:.0f} ms", "linear (was 1.8 s)", cpu < 0.5
            )


@contextmanager
def metadata_service(url: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The MdataService in a child process pinned to core 0 (and this process to core 1), and its state dir."""
    state_dir = tempfile.mkdtemp(prefix="cloudnet-mdata-bench-")
    cmd = [sys.executable, __file__, "--serve", url, state_dir]
    if (os.cpu_count() or 1) > 1:
        cmd = ["taskset", "-c", "0", *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        pin_client(1)
        yield child, state_dir
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
        subprocess.run(["rm", "-rf", state_dir], check=False)


if __name__ == "__main__":
    main()

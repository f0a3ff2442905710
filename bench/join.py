"""Join and TLS benchmark (issue 29: a cloud CA, join tokens, mutual TLS on the API). Prints figures beside their
targets; asserts nothing.

  join         `cloudnet host join-token` -> `cloudnet agent --join URL TOKEN` started -> the host registered, and
               -> an instance on it ACTIVE (Linux dataplane agents on this machine, a fresh host name each, against
               `cloudnet serve --tls` on loopback): p50 over --tries
  port create  POST /v2.0/ports p50 over HTTPS (certificate verified against the cloud's CA) beside plain HTTP, each
               on a fresh `cloudnet serve` (SQLite) in this run: on a kept-alive connection (TLS's record cost) and
               on a new connection per request (the handshake too)

Usage (root): .venv/bin/python bench/join.py [--tries 5] [--ports 300]
"""

from __future__ import annotations

import argparse
import json
import shutil
import ssl
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from common import ROOT, UNLIMITED, free_port, machine_load, ms, percentile, pin_client, row

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.pki import tls

CLOUDNET = str(ROOT / ".venv/bin/cloudnet")
ADMIN = "bench-admin"
WAYS = ("kept-alive", "new connection")


@contextmanager
def server(state: Path, with_tls: bool) -> Iterator[tuple[str, httpx.Client, ssl.SSLContext | bool]]:
    """`cloudnet serve` (pinned to core 0) with an admin token; (URL, a kept-alive admin client, what verifies the
    server) once it answers."""
    state.mkdir(mode=0o700)
    (state / "tokens.json").write_text(json.dumps({"tokens": {ADMIN: {"project_id": "admin", "role": "admin"}}}))
    port = free_port()
    cmd = ["taskset", "-c", "0", CLOUDNET, "serve", "--state-dir", str(state), "--port", str(port),
           "--metadata-listen", f"127.0.0.1:{free_port()}", *UNLIMITED, *(["--tls"] if with_tls else [])]  # fmt: skip
    log = (state / "server.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"{'https' if with_tls else 'http'}://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # readiness: the API answers (over TLS verified against the CA it made)
            try:
                verify = tls.client_context(state / "pki" / "ca.crt") if with_tls else True
                client = httpx.Client(base_url=url + "/v2.0", verify=verify, headers={"X-Auth-Token": ADMIN},
                                      timeout=60)  # fmt: skip
                client.get("/networks").raise_for_status()
                break
            except (httpx.TransportError, FileNotFoundError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit((state / "server.log").read_text()) from None
                time.sleep(0.05)  # waiting for the child to bind: polled, with a deadline
        try:
            yield url, client, verify
        finally:
            client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def port_creates(servers: dict[str, tuple[httpx.Client, ssl.SSLContext | bool]], n: int) -> dict[str, list[float]]:
    """POST /v2.0/ports timings per server and way ("kept-alive": the server's client; "new connection": a client
    each), the servers' requests interleaved so that the machine's load falls on them alike."""
    bodies = {}
    for name, (client, _verify) in servers.items():
        net = client.post("/networks", json={"network": {"name": "bench"}}).json()["network"]
        subnet = {"subnet": {"network_id": net["id"], "cidr": "10.210.0.0/16"}}
        client.post("/subnets", json=subnet).raise_for_status()
        bodies[name] = {"port": {"network_id": net["id"]}}
    times: dict[str, list[float]] = {f"{name}, {way}": [] for name in servers for way in WAYS}
    for _ in range(n):
        for name, (client, verify) in servers.items():
            t0 = time.perf_counter()
            client.post("/ports", json=bodies[name]).raise_for_status()
            times[f"{name}, {WAYS[0]}"].append(time.perf_counter() - t0)
            with httpx.Client(base_url=client.base_url, verify=verify, headers=client.headers) as one:
                t0 = time.perf_counter()
                one.post("/ports", json=bodies[name]).raise_for_status()
                times[f"{name}, {WAYS[1]}"].append(time.perf_counter() - t0)
    return times


def _until(what: str, check: object, proc: subprocess.Popen[bytes], log: Path, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"{what}: {log.read_text()[-3000:]}")
        time.sleep(0.01)  # polled, with a deadline


def joins(url: str, client: httpx.Client, root: Path, tries: int) -> list[tuple[float, float]]:
    """(token -> registered, token -> instance ACTIVE) of `tries` hosts joining one after another."""
    suffix = uuid.uuid4().hex[:6]
    agents: list[subprocess.Popen[bytes]] = []
    hosts, namespaces, figures = [], [], []
    try:
        for i in range(tries):
            host, ns = f"bj-{suffix}-{i}", f"cnbj-{suffix}-{i}"
            hosts.append(host)
            netns.ensure(ns)
            namespaces.append(ns)
            # A network each: on the Linux dataplane a network lives on one host (services/single_host.py).
            net = client.post("/networks", json={"network": {"name": host}}).json()["network"]
            subnet = {"subnet": {"network_id": net["id"], "cidr": f"10.211.{i}.0/24"}}
            client.post("/subnets", json=subnet).raise_for_status()
            t0 = time.perf_counter()
            r = client.post(f"/hosts/{host}/join-tokens", json={"join_token": {}})
            r.raise_for_status()
            log = root / f"{host}.log"
            with log.open("wb") as out:
                agents.append(subprocess.Popen([CLOUDNET, "agent", "--join", url, r.json()["join_token"]["token"],
                                                "--host", host, "--state-dir", str(root / host)],
                                               stdout=out, stderr=subprocess.STDOUT))  # fmt: skip

            def registered(host: str = host) -> bool:
                return client.get(f"/hosts/{host}").status_code == 200

            _until(f"{host} never registered", registered, agents[-1], log)
            t_registered = time.perf_counter() - t0
            inst = client.post("/instances", json={"instance": {"name": host, "host": host, "netns": ns,
                                                                "nets": [{"network": net["id"]}]}})  # fmt: skip
            inst.raise_for_status()
            iid = inst.json()["instance"]["id"]

            def active(iid: str = iid) -> bool:
                return bool(client.get(f"/instances/{iid}").json()["instance"]["status"] == "ACTIVE")

            _until(f"{host}'s instance never went ACTIVE", active, agents[-1], log)
            figures.append((t_registered, time.perf_counter() - t0))
        return figures
    finally:
        for agent in agents:  # all at once: each stops when its long poll of the API answers
            agent.terminate()
        for agent in agents:
            try:
                agent.wait(timeout=40)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        for host in hosts:
            LinuxDataplane(host).teardown()
        for ns in namespaces:
            netns.remove(ns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--ports", type=int, default=300)
    args = parser.parse_args()
    pin_client(1)
    machine_load()
    root = Path(tempfile.mkdtemp(prefix="cloudnet-join-"))
    try:
        with server(root / "plain", False) as plain, server(root / "tls", True) as secure:
            creates = port_creates({"plain HTTP": plain[1:], "HTTPS": secure[1:]}, args.ports)
        with server(root / "join-server", True) as (url, client, _verify):
            figures = joins(url, client, root, args.tries)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    registered = percentile([f[0] for f in figures], 50)
    active = percentile([f[1] for f in figures], 50)
    print(f"Join with a token ({args.tries} hosts, Linux dataplane agents, serve --tls on loopback, SQLite):")
    row("join (token -> host registered) p50", ms(registered), "(no target)")
    row("join (token -> instance ACTIVE) p50", ms(active), "<= 10 s", active <= 10)
    print(f"Port create, {args.ports} each, interleaved (cloudnet serve, SQLite, one run):")
    p50 = {key: percentile(values, 50) for key, values in creates.items()}
    for key, value in p50.items():
        row(f"{key}: POST /v2.0/ports p50", ms(value), "(no target)")
    for way in WAYS:
        row(f"TLS's cost on a port create p50, {way}", ms(p50[f"HTTPS, {way}"] - p50[f"plain HTTP, {way}"]),
            "(report)")  # fmt: skip


if __name__ == "__main__":
    main()

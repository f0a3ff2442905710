"""Join and TLS benchmark (issue 29: a cloud CA, join tokens, mutual TLS on the API). Prints figures beside their
targets; asserts nothing.

  join         `cloudnet host join-token` -> `cloudnet agent --join URL TOKEN` started -> the host registered, and
               -> an instance on it ACTIVE (Linux dataplane agents on this machine, a fresh host name each, against
               `cloudnet serve --tls` on loopback): p50 over --tries
  port create  POST /v2.0/ports p50 over HTTPS (certificate verified against the cloud's CA) beside plain HTTP, each
               on a fresh `cloudnet serve` (SQLite) in this run: on a kept-alive connection (TLS's record cost) and
               on a new connection per request (the handshake too)
  metadata     a guest's GET of meta_data.json through the agent's relay (agent/metadata/proxy.py, in this process;
               the guest and the metadata namespace plumbed as a driver does) p50: to the TLS metadata listener with
               a joined host's certificate beside plain HTTP, each on the same fresh servers, interleaved

Usage (root): .venv/bin/python bench/join.py [--tries 5] [--ports 300] [--reads 300]
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
from tests.support.relay_guest import guest_get, plumb_guest

from cloudnet.agent import join
from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.pki import tls
from cloudnet.wire import signing

CLOUDNET = str(ROOT / ".venv/bin/cloudnet")
ADMIN = "bench-admin"
WAYS = ("kept-alive", "new connection")


@contextmanager
def server(state: Path, with_tls: bool) -> Iterator[tuple[str, httpx.Client, ssl.SSLContext | bool, int]]:
    """`cloudnet serve` (pinned to core 0) with an admin token; (URL, a kept-alive admin client, what verifies the
    server, the metadata API's port) once it answers."""
    state.mkdir(mode=0o700)
    (state / "tokens.json").write_text(json.dumps({"tokens": {ADMIN: {"project_id": "admin", "role": "admin"}}}))
    port, metadata_port = free_port(), free_port()
    cmd = ["taskset", "-c", "0", CLOUDNET, "serve", "--state-dir", str(state), "--port", str(port),
           "--metadata-listen", f"127.0.0.1:{metadata_port}", *UNLIMITED, *(["--tls"] if with_tls else [])]  # fmt: skip
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
            yield url, client, verify, metadata_port
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


@contextmanager
def relay(url: str, client: httpx.Client, metadata_port: int, state: Path, root: Path) -> Iterator[str]:
    """A host with an instance, its guest plumbed, and the agent's relay for it (a joined host's, over TLS, when
    the server has TLS); yields the guest's namespace once the relay serves its network."""
    host = f"bmd-{uuid.uuid4().hex[:6]}"
    secure = url.startswith("https://")
    if secure:
        r = client.post(f"/hosts/{host}/join-tokens", json={"join_token": {}})
        r.raise_for_status()
        joined = join.join(url, r.json()["join_token"]["token"], host, root / host)
        ca, crt, key, secret_file = join.Joined.files(root / host)
        context, upstream = tls.client_context(ca, crt, key), str(joined.metadata_url)
    else:
        context, secret_file, upstream = None, state / "metadata_secret", f"http://127.0.0.1:{metadata_port}"
    client.put(f"/hosts/{host}", json={"host": {}}).raise_for_status()
    net = client.post("/networks", json={"network": {"name": host}}).json()["network"]
    client.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.212.0.0/24"}}).raise_for_status()
    ns = f"cnbm-{host}"
    nets = [{"network": net["id"], "v4-fixed-ip": "10.212.0.10"}]
    inst = client.post("/instances", json={"instance": {"name": host, "host": host, "netns": ns, "nets": nets}})
    inst.raise_for_status()
    mac = inst.json()["instance"]["nets"][0]["mac_address"]
    api = ApiClient(url, host, "" if secure else ADMIN, tls=context)
    namespaces = plumb_guest(host, net["id"], ns, mac, "10.212.0.10/24", "10.212.0.2/24", f"v{host[4:]}")
    proxy = MetadataProxy(host, upstream, signing.read_secret(secret_file), burst=1e9, rate=1e9, tls=context)
    try:
        proxy.update(api.desired_state())
        _until("the relay never served", lambda: proxy.serving(net["id"]), None, root / "none")
        yield ns
    finally:
        proxy.close()
        api.close()
        for name in namespaces:
            netns.remove(name)


def relay_fetches(guests: dict[str, str], n: int) -> dict[str, list[float]]:
    """A guest's GET of meta_data.json through each relay (a fresh guest connection each), interleaved."""
    times: dict[str, list[float]] = {name: [] for name in guests}
    for _ in range(n):
        for name, ns in guests.items():
            t0 = time.perf_counter()
            status, _body = guest_get(ns, "/openstack/latest/meta_data.json")
            times[name].append(time.perf_counter() - t0)
            if status != 200:
                raise SystemExit(f"{name}: a guest's read through the relay answered {status}")
    return times


def _until(what: str, check: object, proc: subprocess.Popen[bytes] | None, log: Path, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
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
            # A network each: on the Linux dataplane a network lives on one host (services/networks/single_host.py).
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
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args()
    pin_client(1)
    machine_load()
    root = Path(tempfile.mkdtemp(prefix="cloudnet-join-"))
    try:
        with server(root / "plain", False) as plain, server(root / "tls", True) as secure:
            creates = port_creates({"plain HTTP": plain[1:3], "HTTPS": secure[1:3]}, args.ports)
            with relay(*plain[:2], plain[3], root / "plain", root) as plain_ns, \
                    relay(*secure[:2], secure[3], root / "tls", root) as tls_ns:  # fmt: skip
                reads = relay_fetches({"plain HTTP": plain_ns, "TLS": tls_ns}, args.reads)
        with server(root / "join-server", True) as (url, client, _verify, _port):
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
    print(f"Metadata read through the relay, {args.reads} each, interleaved (guest -> relay -> metadata API):")
    read_p50 = {key: percentile(values, 50) for key, values in reads.items()}
    for key, value in read_p50.items():
        row(f"relay -> metadata API over {key}: GET meta_data.json p50", ms(value), "(no target)")
    row("TLS's cost on a metadata read through the relay p50", ms(read_p50["TLS"] - read_p50["plain HTTP"]),
        "(report)")  # fmt: skip


if __name__ == "__main__":
    main()

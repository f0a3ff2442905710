"""DHCP benchmark of the Linux dataplane (issue 28). Prints figures beside the targets; asserts nothing.

  a new port's lease answerable: from the desired state with one more port (1,000 and 10,000 ports on the network)
    handed to the DHCP job (dataplane/linux/dhcp.py: the job's rendering, the port's hosts file, dnsmasq reading
    it) to the first DHCPOFFER for the new port's MAC; the API and agent in front of it are measured by
    bench/desired_state.py and bench/attach.py
  a DHCP answer with 10,000 hosts: DISCOVER -> OFFER round trips for known MACs, one at a time

The server is the job's real dnsmasq in a namespace of the bench's own, named as the driver names a metadata
namespace (for a host name of the bench's), on a veth whose other end a client namespace asks from.

Usage: .venv/bin/python bench/dhcp.py [--sizes 1000,10000] [--asks N]
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import random
import secrets
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ms, percentile, row

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import dhcp_conf, names
from cloudnet.dataplane.linux.dhcp import DhcpServers

NET, SUBNET, META = "bench-net", "bench-subnet", "bench-meta"
CIDR = ipaddress.ip_network("10.96.0.0/16")


def port(i: int) -> dict[str, Any]:
    return {"id": f"p{i}", "network_id": NET, "mac_address": f"fa:16:3e:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:"
            f"{i & 255:02x}", "fixed_ips": [{"subnet_id": SUBNET, "ip_address": str(CIDR[i + 10])}]}  # fmt: skip


def state(n: int) -> dict[str, Any]:
    meta = {"id": META, "fixed_ips": [{"subnet_id": SUBNET, "ip_address": str(CIDR[2])}]}
    subnet = {"id": SUBNET, "network_id": NET, "cidr": str(CIDR), "ip_version": 4, "gateway_ip": str(CIDR[1]),
              "host_routes": [], "dns_nameservers": [], "enable_dhcp": True}  # fmt: skip
    return {"networks": {NET: {"id": NET, "mtu": 1500, "metadata_port": meta}}, "subnets": {SUBNET: subnet},
            "ports": {f"p{i}": port(i) for i in range(n)}, "pool_ports": {}, "routers": []}  # fmt: skip


def apply(servers: DhcpServers, desired: dict[str, Any]) -> None:
    """What the job's step does for the network (DhcpServers.apply without a driver pass around it)."""
    subnets = dhcp_conf.dhcp_subnets(desired)[NET]
    config = servers._wanted(desired, NET, subnets, list(desired["ports"].values()))
    servers._apply_network(NET, config, full=False)


def client(ns: str) -> socket.socket:
    with netns.entered(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"eth0")
    sock.bind(("0.0.0.0", 68))
    return sock


def offered(sock: socket.socket, mac: str, timeout: float) -> str | None:
    """DISCOVER for `mac`; the address offered (None: none within `timeout`)."""
    xid = os.urandom(4)
    chaddr = bytes.fromhex(mac.replace(":", ""))
    head = struct.pack("!BBBB4sHH16s16s", 1, 1, 6, 0, xid, 0, 0x8000, bytes(16), chaddr + bytes(10))
    sock.sendto(head + bytes(192) + bytes([99, 130, 83, 99, 53, 1, 1, 255]), ("255.255.255.255", 67))
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(2048)
        except TimeoutError:
            return None
        if data[0] == 2 and data[4:8] == xid:
            return socket.inet_ntoa(data[16:20])
    return None


def lease_after_create(servers: DhcpServers, sock: socket.socket, n: int, rounds: int) -> list[float]:
    times = []
    for r in range(rounds):
        desired = state(n)
        apply(servers, desired)
        # (settled: an answer comes after dnsmasq has done with the last change; the new port's change is timed)
        assert offered(sock, port(r)["mac_address"], 10) == port(r)["fixed_ips"][0]["ip_address"]
        new = port(n + r + 1)
        desired["ports"][new["id"]] = new
        started = time.perf_counter()
        apply(servers, desired)
        while offered(sock, new["mac_address"], 0.05) != new["fixed_ips"][0]["ip_address"]:
            if time.perf_counter() - started > 10:
                raise RuntimeError(f"no offer for {new['mac_address']}")
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--asks", type=int, default=2000)
    args = parser.parse_args()
    host = f"bench-dhcp-{secrets.token_hex(3)}"
    server_ns, client_ns = names.metadata_ns(host, NET), f"bench-dhcp-client-{secrets.token_hex(3)}"
    iface = names.metadata_iface(META)
    root = Path(tempfile.mkdtemp(prefix="cloudnet-bench-dhcp-"))
    root.chmod(0o755)  # (dnsmasq rereads its files after dropping its privileges)
    servers = DhcpServers(host, root=root)
    for ns in (server_ns, client_ns):
        netns.create(ns)
    try:
        run = ["ip", "-n", client_ns]
        subprocess.run([*run, "link", "add", "eth0", "type", "veth", "peer", "name", iface, "netns", server_ns],
                       check=True)  # fmt: skip
        subprocess.run([*run, "link", "set", "eth0", "up"], check=True)
        # (an address of its own: the kernel takes the broadcast offers in on a configured interface only)
        subprocess.run([*run, "addr", "add", f"{CIDR[-2]}/{CIDR.prefixlen}", "dev", "eth0"], check=True)
        subprocess.run(["ip", "-n", server_ns, "addr", "add", f"{CIDR[2]}/{CIDR.prefixlen}", "dev", iface], check=True)
        subprocess.run(["ip", "-n", server_ns, "link", "set", iface, "up"], check=True)
        sock = client(client_ns)
        print("DHCP on the Linux dataplane (a real dnsmasq, static leases)")
        for n in [int(s) for s in args.sizes.split(",")]:
            times = lease_after_create(servers, sock, n, args.rounds)
            p50 = percentile(times, 50)
            row(f"{n} ports: new port -> its lease answerable p50", ms(p50), "<= 200 ms", p50 <= 0.200)
        n = max(int(s) for s in args.sizes.split(","))
        apply(servers, state(n))
        macs = [port(i)["mac_address"] for i in range(n)]
        answers = []
        for mac in random.sample(macs, min(args.asks, n)):
            started = time.perf_counter()
            if offered(sock, mac, 2.0) is None:
                raise RuntimeError(f"no offer for {mac}")
            answers.append(time.perf_counter() - started)
        p99 = percentile(answers, 99)
        row(f"{n} hosts: DISCOVER -> OFFER p99 ({len(answers)} asks)", ms(p99), "<= 5 ms", p99 <= 0.005)
        row("p50", ms(percentile(answers, 50)), "(reported)")
    finally:
        servers.teardown()
        for ns in (server_ns, client_ns):
            netns.remove(ns)


if __name__ == "__main__":
    main()

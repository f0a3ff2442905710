"""Security group benchmark (issue 16). Prints figures beside targets; asserts nothing.

A throwaway host namespace with a bridge and 1,000 instance ports (veths named as the driver names them;
the firewall keys everything by interface name), converged by the Linux firewall (linux/firewall.py) from
desired states built here, as the agent would hand them over:

- from nothing: 1,000 ports x 10 rules, each port in a group of its own (10,000 rules, 1,000 remote groups:
  every group lets its own members in, as a default group does), and all ports sharing one group;
- one rule added to the group all 1,000 ports share: the kernel transaction (p99 of 100), and the whole pass;
- one port joining a remote group (its addresses become members of the set other groups let in): a port of
  another host (elements only), and a port of this host (its own chain too);
- a new TCP connection (connect + answer, through br_netfilter, conntrack and the rules) to a port whose group
  has 1 rule, and 1,000 rules (each its own port and source prefix; the connection matches the last one).

Usage (root): .venv/bin/python bench/security_groups.py [--ports 1000] [--connections 300]
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import machine_load, ms, percentile, row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.netserve import Responder, tcp_ask

from cloudnet.dataplane.linux import firewall, names, netns, nft
from cloudnet.dataplane.steps import Steps

NET = "6a1f0000-0000-4000-8000-000000000001"


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def rule(direction: str, protocol: int | None = None, lo: int | None = None, hi: int | None = None,
         prefix: str | None = None, group: str | None = None, ethertype: str = "IPv4") -> dict[str, Any]:  # fmt: skip
    return {"id": str(uuid.uuid4()), "direction": direction, "ethertype": ethertype, "protocol": protocol,
            "port_range_min": lo, "port_range_max": hi if hi is not None else lo, "remote_ip_prefix": prefix,
            "remote_group_id": group, "remote_address_group_id": None}  # fmt: skip


def ten_rules(group: str) -> list[dict[str, Any]]:
    """What a group typically says: open egress, ssh/web/db ingress, ICMP, its own members, a DNS range."""
    return [rule("egress"), rule("egress", ethertype="IPv6"), rule("ingress", 6, 22, prefix="10.0.0.0/8"),
            rule("ingress", 6, 80), rule("ingress", 6, 443), rule("ingress", 6, 5432, prefix="10.20.0.0/16"),
            rule("ingress", 6, 8000, 8100), rule("ingress", 1, 8), rule("ingress", group=group),
            rule("ingress", 17, 53, prefix="192.168.0.0/16")]  # fmt: skip


def port(i: int, groups: list[str]) -> dict[str, Any]:
    pid = str(uuid.uuid5(uuid.NAMESPACE_OID, f"cloudnet-bench-{i}"))
    mac = f"fa:16:3e:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"
    return {"id": pid, "network_id": NET, "mac_address": mac,
            "admin_state_up": True, "binding:vnic_type": "normal", "port_security_enabled": True,
            "fixed_ips": [{"subnet_id": "s4", "ip_address": f"10.{100 + (i >> 16)}.{i >> 8 & 255}.{i & 255}",
                           "prefixlen": 8}], "security_groups": groups, "allowed_address_pairs": []}  # fmt: skip


def desired(ports: dict[str, dict[str, Any]], groups: dict[str, list[dict[str, Any]]],
            members: dict[str, list[str]], revision: int = 1) -> dict[str, Any]:  # fmt: skip
    return {"revision": revision, "ports": ports, "pool_ports": {}, "networks": {NET: {"id": NET}},
            "security_groups": {g: {"id": g, "stateful": True, "rules": r} for g, r in groups.items()},
            "remote_groups": members}  # fmt: skip


class Host:
    """A throwaway host namespace with the bridge and a firewall of its own (its steps run inside it)."""

    def __init__(self, count: int) -> None:
        self.ns = f"cnbench-sg-{uuid.uuid4().hex[:6]}"
        netns.ensure(self.ns)
        self.bridge = names.bridge(NET)
        sh("ip", "-n", self.ns, "link", "add", self.bridge, "type", "bridge")
        sh("ip", "-n", self.ns, "link", "set", self.bridge, "up")
        batch = "".join(f"link add {names.tap(port(i, [])['id'])} master {self.bridge} type veth peer name cnx{i}\n"
                        for i in range(count))  # fmt: skip
        subprocess.run(["ip", "-n", self.ns, "-batch", "-"], input=batch, text=True, check=True)
        self.steps = Steps(60.0, thread_init=lambda: netns.enter_for_good(self.ns))
        self.fw = firewall.NftFirewall(self.ns)
        self.kernel: list[float] = []  # time spent in each nft transaction of the last apply

    def apply(self, state: dict[str, Any]) -> float:
        self.kernel.clear()
        t0 = time.perf_counter()
        failed = self.fw.apply(state, self.steps, full=False)
        elapsed = time.perf_counter() - t0
        assert not failed, list(failed.items())[:3]
        return elapsed

    def fresh(self) -> None:
        """Back to nothing: no tables, no memory of them."""
        for family in ("bridge", "inet"):
            subprocess.run(["ip", "netns", "exec", self.ns, "nft", "delete", "table", family, "cloudnet"],
                           capture_output=True)  # fmt: skip
        self.fw = firewall.NftFirewall(self.ns)

    def close(self) -> None:
        nft.forget(self.ns)
        netns.remove(self.ns)


@contextmanager
def timed_transactions(host: Host) -> Iterator[None]:
    real = nft.commit

    def commit(namespace: str, script: str) -> tuple[int, int]:
        t0 = time.perf_counter()
        try:
            return real(namespace, script)
        finally:
            host.kernel.append(time.perf_counter() - t0)

    nft.commit = commit  # type: ignore[assignment]
    try:
        yield
    finally:
        nft.commit = real  # type: ignore[assignment]


def from_nothing(host: Host, count: int) -> dict[str, Any]:
    own = {f"sg-{i}": ten_rules(f"sg-{i}") for i in range(count)}
    ports = {p["id"]: p for p in (port(i, [f"sg-{i}"]) for i in range(count))}
    members = {f"sg-{i}": [f"{p['fixed_ips'][0]['ip_address']}/32"] for i, p in enumerate(ports.values())}
    host.fresh()
    elapsed = host.apply(desired(ports, own, members))
    print(f"{count:,} ports x 10 rules, from nothing (no tables, no shadow):")
    row("a group each (10,000 rules), whole pass", f"{elapsed:.3f} s", "<= 1 s", elapsed <= 1.0)
    row("  of which the nft transaction", f"{sum(host.kernel):.3f} s", "")
    shared = {p["id"]: port(i, ["web"]) for i, p in enumerate(ports.values())}
    everyone = {"web": [f"{p['fixed_ips'][0]['ip_address']}/32" for p in shared.values()]}
    host.fresh()
    elapsed = host.apply(desired(shared, {"web": ten_rules("web")}, everyone))
    row("one group shared by all, whole pass", f"{elapsed:.3f} s", "<= 1 s", elapsed <= 1.0)
    return desired(shared, {"web": ten_rules("web")}, everyone)


def both(values: list[float]) -> str:
    return f"{percentile(values, 50) * 1000:.1f} / {percentile(values, 99) * 1000:.1f} ms"


def samples(n: int, change: Callable[[int], dict[str, Any]], host: Host) -> tuple[list[float], list[float]]:
    kernel, whole = [], []
    for k in range(n):
        whole.append(host.apply(change(k)))
        kernel.append(sum(host.kernel))
    return kernel, whole


def rule_added(host: Host, state: dict[str, Any], n: int) -> None:
    base = state["security_groups"]["web"]["rules"]

    def change(k: int) -> dict[str, Any]:
        s = dict(state, revision=state["revision"] + k + 1)
        extra = [rule("ingress", 6, 30000 + k // 2)] if k % 2 == 0 else []  # added, then removed again
        s["security_groups"] = {"web": {"id": "web", "stateful": True, "rules": base + extra}}
        return s

    kernel, whole = samples(2 * n, change, host)
    adds_k, adds_w = kernel[0::2], whole[0::2]
    print(f"one rule added to the group of all {len(state['ports']):,} ports ({n} times):")
    row("kernel transaction, p50 / p99", both(adds_k), "p99 <= 50 ms", percentile(adds_k, 99) <= 0.050)
    row("whole pass (agent side too), p50 / p99", both(adds_w), "")
    row("rule removed again: whole pass, p50 / p99", both(whole[1::2]), "(connections judged again)")


def member_joins(host: Host, state: dict[str, Any], n: int) -> None:
    """`db` lets members of `clients` in; ports join `clients` and leave it again."""
    ports = copy.deepcopy(state["ports"])
    order = list(ports)
    for pid in order[:10]:
        ports[pid]["security_groups"] = ["web", "db"]
    groups = {"web": state["security_groups"]["web"]["rules"], "db": [rule("ingress", 6, 5432, group="clients")]}
    members: dict[str, list[str]] = {"web": state["remote_groups"]["web"], "clients": []}
    host.apply(desired(ports, groups, members, 10_000))

    def remote(k: int) -> dict[str, Any]:  # an address of another host joins (k even) and leaves
        joined = [f"10.250.{k // 2 >> 8 & 255}.{k // 2 & 255}/32"] if k % 2 == 0 else []
        return desired(ports, groups, {**members, "clients": joined}, 10_001 + k)

    kernel, _whole = samples(2 * n, remote, host)
    local_ports = copy.deepcopy(ports)

    def local(k: int) -> dict[str, Any]:  # a port of this host joins (its groups and the members change)
        pid = order[-1 - (k // 2) % max(1, len(order) - 10)]  # (not one of the first ten: they are db's)
        local_ports[pid]["security_groups"] = ["clients", "web"] if k % 2 == 0 else ["web"]
        ip = local_ports[pid]["fixed_ips"][0]["ip_address"]
        joined = [f"{ip}/32"] if k % 2 == 0 else []
        return desired(local_ports, {**groups, "clients": []}, {**members, "clients": joined}, 20_000 + k)

    local_kernel, local_whole = samples(2 * n, local, host)
    print(f"one port joining a remote group, with {len(ports):,} ports ({n} times):")
    row("a port of another host: kernel, p50 / p99", both(kernel[0::2]), "p99 <= 10 ms",
        percentile(kernel[0::2], 99) <= 0.010)  # fmt: skip
    row("a port of this host: kernel, p50 / p99", both(local_kernel[0::2]), "p99 <= 10 ms",
        percentile(local_kernel[0::2], 99) <= 0.010)  # fmt: skip
    row("a port of this host: whole pass, p50 / p99", both(local_whole[0::2]), "")


def connection_cost(connections: int) -> None:
    """Two real instance ports; the server's group has 1 or 1,000 rules, the connection matching the last."""
    host = Host(0)
    client_ns, server_ns = (f"cnbench-sg{x}-{uuid.uuid4().hex[:6]}" for x in "cs")
    client, server = port(1, ["out"]), port(2, ["many"])
    for ns, p in ((client_ns, client), (server_ns, server)):
        netns.ensure(ns)
        sh("ip", "-n", host.ns, "link", "add", names.tap(p["id"]), "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", host.ns, "link", "set", names.tap(p["id"]), "master", host.bridge, "up")
        sh("ip", "-n", ns, "link", "set", "eth0", "address", p["mac_address"], "up")
        sh("ip", "-n", ns, "addr", "add", f"{p['fixed_ips'][0]['ip_address']}/8", "dev", "eth0")
    client_ip, server_ip = client["fixed_ips"][0]["ip_address"], server["fixed_ips"][0]["ip_address"]
    responder = Responder.start(server_ns, "S", tcp=(20999,))
    ports = {client["id"]: client, server["id"]: server}
    try:
        results = []
        for count in (1, 1000, 1):  # (1 rule again: how far two runs of the same apart are, the noise)
            # Rules 20000+i from 172.16.x.y/32 each; the last one is the client's (port 20999 is the last rule's).
            many = [rule("ingress", 6, 20000 + i, prefix=f"172.16.{i >> 8}.{i & 255}/32") for i in range(count - 1)]
            many.append(rule("ingress", 6, 20999, prefix=f"{client_ip}/32"))
            host.apply(desired(ports, {"out": [rule("egress")], "many": many}, {}, count))
            assert tcp_ask(client_ns, server_ip, 20999).startswith("S ")
            times = []
            for _ in range(connections):
                t0 = time.perf_counter()
                answer = tcp_ask(client_ns, server_ip, 20999)
                times.append(time.perf_counter() - t0)
                assert answer.startswith("S "), answer
            results.append((count, percentile(times, 50), percentile(times, 90)))
        print(f"a new TCP connection (connect + answer), {connections} of them:")
        for i, (count, p50, p90) in enumerate(results):
            label = f"server's group with {count:,} rule(s){' again' if i == 2 else ''}: p50 / p90"
            row(label, f"{ms(p50)} / {ms(p90)}", "the same (noise)")
    finally:
        responder.stop()
        host.close()
        for ns in (client_ns, server_ns):
            netns.remove(ns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ports", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--connections", type=int, default=300)
    args = parser.parse_args()
    machine_load()
    host = Host(args.ports)
    try:
        with timed_transactions(host):
            shared = from_nothing(host, args.ports)
            rule_added(host, shared, args.samples)
            member_joins(host, shared, args.samples)
    finally:
        host.close()
    connection_cost(args.connections)


if __name__ == "__main__":
    main()

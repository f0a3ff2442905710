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
  has 1 rule, and 1,000 rules (each its own port and source prefix; the connection matches the last one);
- an agent's start with connections open: every port's connections judged again (20,000 entries in the ports'
  conntrack zone, 50,000 in another network's), beside a read of the whole table (what a sweep used to do);
- a pass in which the kernel refuses one port's part (as a bug would make it): the refused part found among all.

Steps run under the agent's own time limit (steps.DEFAULT_TIMEOUT): a pass that would exceed it fails here too.

Usage (root): .venv/bin/python bench/security_groups.py [--ports 1000] [--connections 300]
"""

from __future__ import annotations

import argparse
import copy
import logging
import socket
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
from pyroute2 import NFCTSocket
from tests.support import frames
from tests.support.netserve import Responder, tcp_ask

from cloudnet.dataplane import security
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import conntrack, firewall, fw_check, fw_render, fw_script, names, nft
from cloudnet.dataplane.steps import DEFAULT_TIMEOUT, Steps

NET = "6a1f0000-0000-4000-8000-000000000001"
OTHER_NET = "7b2e0000-0000-4000-8000-000000000002"


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
        self.steps = Steps(DEFAULT_TIMEOUT, thread_init=lambda: netns.enter_for_good(self.ns))
        self.fw = firewall.NftFirewall(self.ns)
        self.kernel: list[float] = []  # time spent in each nft transaction of the last apply

    def apply(self, state: dict[str, Any], failing: frozenset[str] = frozenset()) -> float:
        """One pass (its time); every port but `failing` must be enforced, and no step may fail."""
        self.kernel.clear()
        t0 = time.perf_counter()
        failed = self.fw.apply(state, self.steps, full=False)
        elapsed = time.perf_counter() - t0
        assert failed.keys() == failing, list(failed.items())[:3]
        assert all(f["object"].startswith("firewall:") for f in self.steps.report()), self.steps.report()[:3]
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


@contextmanager
def timed(fn_owner: Any, name: str, spent: list[float]) -> Iterator[None]:
    """Time every call of `fn_owner.name` into `spent`."""
    real = getattr(fn_owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t0)

    setattr(fn_owner, name, wrapper)
    try:
        yield
    finally:
        setattr(fn_owner, name, real)


def _senders(host: Host, peers: list[str]) -> dict[str, socket.socket]:
    with netns.entered(host.ns):
        out = {p: socket.socket(socket.AF_PACKET, socket.SOCK_RAW) for p in peers}
    for peer, sock in out.items():
        sock.bind((peer, 0))
    return out


def _syns(sock: socket.socket, src_mac: str, dst_mac: str, src: str, dst: str, sports: range) -> None:
    """A TCP SYN to port 80 from each source port: a conntrack entry each."""
    for sport in sports:
        sock.send(frames.ethernet(dst_mac, src_mac, 0x0800, frames.ipv4_tcp(src, dst, sport, 80, b"")))


def _entries(host: Host, zone: int | None) -> int:
    """How many conntrack entries the zone (None: the namespace) holds, read as a sweep reads them."""
    with netns.entered(host.ns):  # (pyroute2 opens its socket on first use, where the thread is then)
        ct = NFCTSocket(nfgen_family=socket.AF_UNSPEC)
        try:
            return sum(1 for _msg in ct.dump(zone=zone))
        finally:
            ct.close()


def startup_sweep(host: Host, state: dict[str, Any], own: int, others: int) -> None:
    """The ports' network gets `own` connections (from 20 of its ports to port 0's tcp/80, which its rules let in),
    another network (two ports without port security) `others`; then an agent starts (a new firewall, every port's
    connections judged again, zone by zone)."""
    ports = list(state["ports"].values())
    senders = ports[:20]
    sh("ip", "-n", host.ns, "link", "add", names.bridge(OTHER_NET), "type", "bridge")
    sh("ip", "-n", host.ns, "link", "set", names.bridge(OTHER_NET), "up")
    unfiltered = [dict(port(100_000 + k, []), network_id=OTHER_NET, port_security_enabled=False) for k in range(2)]
    for k, p in enumerate(unfiltered):
        sh("ip", "-n", host.ns, "link", "add", names.tap(p["id"]), "master", names.bridge(OTHER_NET), "type", "veth",
           "peer", "name", f"cny{k}")  # fmt: skip
    peers = {p["id"]: f"cnx{i}" for i, p in enumerate(senders)} | {p["id"]: f"cny{k}" for k, p in enumerate(unfiltered)}
    for pid, peer in peers.items():
        sh("ip", "-n", host.ns, "link", "set", names.tap(pid), "up")
        sh("ip", "-n", host.ns, "link", "set", peer, "up")
    both = dict(state, ports={**state["ports"], **{p["id"]: p for p in unfiltered}},
                networks={NET: {"id": NET}, OTHER_NET: {"id": OTHER_NET}})  # fmt: skip
    host.apply(both)
    sockets = _senders(host, list(peers.values()))
    try:
        ip = [p["fixed_ips"][0]["ip_address"] for p in ports]
        target, a, b = ports[0], *unfiltered
        _syns(sockets["cnx0"], target["mac_address"], "ff:ff:ff:ff:ff:ff", ip[0], ip[1], range(1, 2))  # (learnt)
        _syns(sockets["cny1"], b["mac_address"], "ff:ff:ff:ff:ff:ff", "10.250.0.2", "10.250.0.1", range(1, 2))
        per = own // (len(senders) - 1)
        for i, p in enumerate(senders[1:], start=1):
            _syns(sockets[peers[p["id"]]], p["mac_address"], target["mac_address"], ip[i], ip[0],
                  range(1024, 1024 + per))  # fmt: skip
        _syns(sockets["cny0"], a["mac_address"], b["mac_address"], "10.250.0.1", "10.250.0.2",
              range(1024, 1024 + others))  # fmt: skip
    finally:
        for sock in sockets.values():
            sock.close()
    zones = dict(fw_script.listed(host.ns, "map inet", "zones"))
    in_zone = _entries(host, int(zones[names.bridge(NET)]))
    t0 = time.perf_counter()
    total = _entries(host, None)
    whole_read = time.perf_counter() - t0
    host.fw = firewall.NftFirewall(host.ns)  # an agent's start: every port's connections judged again
    judged: list[float] = []
    with timed(conntrack, "sweep", judged):
        t0 = time.perf_counter()
        failed = host.fw.apply(both, host.steps, full=False)
        elapsed = time.perf_counter() - t0
    assert not failed, list(failed.items())[:3]
    late = [f["reason"] for f in host.steps.report() if f["object"].startswith(firewall.ZONE_STEP)]
    budget = DEFAULT_TIMEOUT * firewall.ZONE_BUDGET
    print(f"an agent's start with connections open ({in_zone:,} in the ports' zone, {total:,} in all):")
    row("whole pass", f"{elapsed:.3f} s", f"<= {DEFAULT_TIMEOUT:g} s (step limit)", elapsed <= DEFAULT_TIMEOUT)
    row("  of which judging connections again (zone by zone)", f"{sum(judged):.3f} s",
        f"<= {budget:g} s (a zone's budget)", not late and sum(judged) <= budget)  # fmt: skip
    row("  (reading the whole table, as a sweep used to)", f"{whole_read:.3f} s", "")
    for reason in late:
        print(f"  not judged in time: {reason}")


def refused_part(host: Host, state: dict[str, Any]) -> None:
    """A port's part refused by the kernel (a jump to no chain): found among all the parts after the tables were
    refused whole, on an agent's start."""
    bad = next(iter(state["ports"]))
    real = fw_render.port_part

    def port_part(policy: security.PortPolicy, tap: str, ident: str, number: int, stateful: bool,
                  groups: list[int]) -> fw_render.Part:  # fmt: skip
        made = real(policy, tap, ident, number, stateful, groups)
        if policy.id != bad:
            return made
        return fw_render.Part(made.chains, made.elements | {("inet", "ingress_ports", f"{number} : jump nowhere")})

    searched: list[float] = []
    fw_render.port_part = port_part  # type: ignore[assignment]
    quiet = logging.getLogger("cloudnet")
    level, quiet.level = quiet.level, logging.CRITICAL  # (the refusal's warnings)
    try:
        host.fw = firewall.NftFirewall(host.ns)
        with timed(fw_check, "refused", searched):
            elapsed = host.apply(state, failing=frozenset({bad}))
    finally:
        fw_render.port_part = real  # type: ignore[assignment]
        quiet.setLevel(level)
    parts = len(host.fw._applied or {}) + 1
    host.fw = firewall.NftFirewall(host.ns)  # (its cache holds the refused part)
    print(f"one part of {parts:,} refused by the kernel, on an agent's start:")
    row("whole pass", f"{elapsed:.3f} s", f"<= {DEFAULT_TIMEOUT:g} s (step limit)", elapsed <= DEFAULT_TIMEOUT)
    row("  of which finding the refused part (bisection)", f"{sum(searched):.3f} s", "")
    host.steps.keep_only([])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ports", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--other-entries", type=int, default=50_000)
    args = parser.parse_args()
    machine_load()
    host = Host(args.ports)
    try:
        with timed_transactions(host):
            shared = from_nothing(host, args.ports)
            rule_added(host, shared, args.samples)
            member_joins(host, shared, args.samples)
            refused_part(host, shared)
            startup_sweep(host, shared, args.entries, args.other_entries)
    finally:
        host.close()
    connection_cost(args.connections)


if __name__ == "__main__":
    main()

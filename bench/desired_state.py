"""A host's desired state with security groups (issue 16, control plane). Prints figures beside their targets;
asserts nothing.

  GET /v2.0/hosts/{host}/state as the service builds it (services/hosts/host_state.py: desired_state, in process,
  no HTTP): one host with 1,000 instance ports in 10 security groups of 10 rules each (two of them naming remote
  groups), and 1,000 more member ports of those groups on another host. Every agent reads it on every event, so the
  target is well under 50 ms on SQLite.

Usage: .venv/bin/python bench/desired_state.py [--backend sqlite|postgresql|both] [--ports N] [--runs N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import analyze, machine_load, median, ms, percentile, postgres_url, row
from sqlalchemy import event

from cloudnet.services import instances, quotas
from cloudnet.services.context import Context
from cloudnet.services.hosts import host_state, hosts
from cloudnet.services.networks import networks, subnets
from cloudnet.services.ports import ports
from cloudnet.services.security import security_group_rules as rules
from cloudnet.services.security import security_groups as groups
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade

GROUPS = 10
RULES = 10  # per group, its two egress rules included
TARGET = 0.050


def _fill(store: Store, n_ports: int) -> None:
    ctx = Context.admin("bench")
    quotas.configure(store, {r: -1 for r in quotas.DEFAULTS})
    net = networks.create_networks(store, ctx, [{"name": "bench"}], 1500)[0]["id"]
    subnets.create_subnets(store, ctx, [{"network_id": net, "cidr": "10.64.0.0/14", "ip_version": 4}])
    sgs = [g["id"] for g in groups.create_groups(store, ctx, [{"name": f"g{i}"} for i in range(GROUPS)])]
    bodies = []
    for i, sg in enumerate(sgs):
        bodies.append({"security_group_id": sg, "direction": "ingress", "remote_group_id": sgs[(i + 1) % GROUPS]})
        bodies.append({"security_group_id": sg, "direction": "ingress", "ethertype": "IPv6", "remote_group_id": sg})
        for k in range(RULES - 4):
            bodies.append({"security_group_id": sg, "direction": "ingress", "protocol": "tcp",
                           "port_range_min": 1000 + k, "port_range_max": 1000 + k,
                           "remote_ip_prefix": f"192.0.2.{k}/32"})  # fmt: skip
    rules.create_rules(store, ctx, bodies)
    for host in ("bench-a", "bench-b"):
        hosts.heartbeat(store, ctx, host, {"agent_version": "bench"}, 60)
        made = ports.create_ports(store, ctx, [
            {"network_id": net, "security_groups": [sgs[i % GROUPS], sgs[(i + 3) % GROUPS]],
             "allowed_address_pairs": [{"ip_address": f"172.16.{i // 250}.{i % 250}"}] if i % 10 == 0 else []}
            for i in range(n_ports)
        ])  # fmt: skip
        instances.create_instances(store, ctx, [
            {"name": f"{host}-{i}", "host": host, "netns": f"bench-{i}", "nets": [{"port": p["id"]}]}
            for i, p in enumerate(made)
        ])  # fmt: skip


def run(store: Store, n_ports: int, runs: int, pg_url: str | None = None) -> None:
    t0 = time.perf_counter()
    _fill(store, n_ports)
    if pg_url:
        analyze(pg_url)
    print(f"  (setup {time.perf_counter() - t0:.1f} s)")
    ctx = Context.admin()
    statements: list[str] = []
    listen = (store.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    event.listen(*listen)
    state = host_state.desired_state(store, ctx, "bench-a")
    event.remove(*listen)
    remote = sum(len(v) for v in state["remote_groups"].values())
    print(f"  ports {len(state['ports'])}, groups {len(state['security_groups'])}, "
          f"rules {sum(len(g['rules']) for g in state['security_groups'].values())}, "
          f"remote group addresses {remote}; {len(statements)} SQL statements per call")  # fmt: skip
    times, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        host_state.desired_state(store, ctx, "bench-a")
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    p50, p99 = median(times), percentile(times, 99)
    guide = "guide < 50 ms (no issue target)"
    row(f"desired state, {n_ports} ports x {RULES} rules, p50", ms(p50), guide, p50 < TARGET)
    row(f"desired state, {n_ports} ports x {RULES} rules, p99", ms(p99), guide, p99 < TARGET)
    # CPU time of this process: what the figure is without the other work on this shared machine.
    row(f"desired state, {n_ports} ports x {RULES} rules, CPU p50", ms(median(cpu)), guide, median(cpu) < TARGET)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--ports", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    machine_load()
    if args.backend in ("sqlite", "both"):
        print("SQLite")
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(f"sqlite:///{Path(tmp) / 'bench.db'}")
            upgrade(store)
            run(store, args.ports, args.runs)
            store.dispose()
    if args.backend in ("postgresql", "both"):
        print("PostgreSQL")
        with postgres_url() as url:
            store = Store(url)
            upgrade(store)
            run(store, args.ports, args.runs, url)
            store.dispose()


if __name__ == "__main__":
    main()

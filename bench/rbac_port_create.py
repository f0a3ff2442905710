"""RBAC policies and port creates (issue 31). Prints figures beside their targets; asserts nothing.

  port create p50 with 100 RBAC policies in place no worse than 10 % over without: two servers in one run, a
    member's single port creates alternated between them in rounds:
    - with: the member's ports go on another project's network shared with it by one of 100 policies on that
      network (99 to other projects), and 100 more policies share 100 other networks with projects of their own;
    - without: the member's ports go on another project's network shared the way there was before RBAC,
      `shared: true` (now its one wildcard policy, read from the network's row), and no other policy exists.
    Both are a member's creates on someone else's network: what differs is only how the network is shared.
    Beside it, the RBAC check's own cost in-process (the network's visibility and the right to a port on it, from
    the per-process cache), granted by one of 100 policies vs `shared: true`: steady however loaded the machine.

Usage: .venv/bin/python bench/rbac_port_create.py [--creates N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import httpx
from common import alternate, cloudnet_server, machine_load, median, ms, percentile, pin_client, row, timed_creates

from cloudnet.services.context import Context
from cloudnet.services.networks import networks
from cloudnet.services.rbac import policies
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade

TOKENS = {"bench-admin": {"project_id": "ops", "role": "admin"}, "bench-member": {"project_id": "member"}}
POLICIES = 100


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": token}, timeout=120)


def network(api: httpx.Client, project: str, name: str, shared: bool = False) -> str:
    r = api.post("/networks", json={"network": {"name": name, "project_id": project, "shared": shared}})
    r.raise_for_status()
    net = str(r.json()["network"]["id"])
    api.post("/subnets", json={"subnet": {"network_id": net, "cidr": "10.128.0.0/14", "project_id": project}}
             ).raise_for_status()  # fmt: skip
    return net


def share(api: httpx.Client, net: str, target: str) -> None:
    body = {"object_type": "network", "object_id": net, "action": "access_as_shared", "target_tenant": target}
    api.post("/rbac-policies", json={"rbac_policy": body}).raise_for_status()


def own_cost(n: int = 20000) -> tuple[float, float]:
    """Seconds one member's check of a network for a port takes (visible, then usable): (granted by one of 100
    policies, shared: true)."""
    with tempfile.TemporaryDirectory(prefix="cloudnet-bench-") as tmp:
        store = Store(f"sqlite:///{tmp}/bench.db")
        upgrade(store)
        admin, member = Context.admin(), Context(project_id="member")
        made = networks.create_networks(store, admin, [{"name": "granted", "project_id": "owner"},
                                                       {"name": "everyone's", "project_id": "owner", "shared": True}],
                                        1500)  # fmt: skip
        granted, everyone = made[0]["id"], made[1]["id"]
        targets = [f"project-{i}" for i in range(POLICIES - 1)] + ["member"]
        share = {"object_type": "network", "object_id": granted, "action": "access_as_shared"}
        policies.create_policies(store, admin, [{**share, "target_tenant": t} for t in targets])

        def per_check(net: str) -> float:
            with store.write() as tx:
                networks.usable_in_tx(tx, networks.visible_in_tx(tx, member, net), "member")  # (the cache filled)
                t0 = time.perf_counter()
                for _ in range(n):
                    if not networks.usable_in_tx(tx, networks.visible_in_tx(tx, member, net), "member"):
                        raise SystemExit("the member may not use the network")
                return (time.perf_counter() - t0) / n

        try:
            return per_check(granted), per_check(everyone)
        finally:
            store.dispose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--creates", type=int, default=1000)
    args = parser.parse_args()
    pin_client()
    machine_load()
    with (cloudnet_server(tokens=TOKENS, extra=("--metadata-listen", "off")) as on_url,
          cloudnet_server(tokens=TOKENS, extra=("--metadata-listen", "off")) as off_url,
          client(on_url, "bench-admin") as on_admin, client(off_url, "bench-admin") as off_admin,
          client(on_url, "bench-member") as on, client(off_url, "bench-member") as off):  # fmt: skip
        shared = network(on_admin, "owner", "shared")
        for i in range(POLICIES - 1):
            share(on_admin, shared, f"project-{i}")
        share(on_admin, shared, "member")
        for i in range(POLICIES):
            share(on_admin, network(on_admin, "owner", f"other-{i}"), f"other-project-{i}")
        own = network(off_admin, "owner", "everyone's", shared=True)
        for api, net in ((on, shared), (off, own)):
            timed_creates(api, net, 100)  # warm-up: connections, caches, the default security group
        on_times, off_times, ratios = alternate({"on": (on, shared), "off": (off, own)}, args.creates)
    p50_on, p50_off, per_round = percentile(on_times, 50), percentile(off_times, 50), median(ratios)
    ratio = p50_on / p50_off - 1
    print(f"RBAC: {args.creates} port creates by a member on each server, alternated in rounds")
    row(f"port create p50, {2 * POLICIES} policies in place", ms(p50_on), "-")
    row("port create p50, shared: true, no policy", ms(p50_off), "-")
    row("overhead of the policies (p50s)", f"{ratio * 100:+.1f} %", "<= 10 %", ratio <= 0.10)
    row("  (median of the rounds' p50 ratios)", f"{(per_round - 1) * 100:+.1f} %", "<= 10 %", per_round <= 1.10)
    row("port create p99, policies in place", ms(percentile(on_times, 99)), "-")
    row("port create p99, shared: true, no policy", ms(percentile(off_times, 99)), "-")
    granted, everyone = own_cost()
    row("the check, granted by a policy (in-process)", f"{granted * 1e6:.1f} us", "-")
    row("the check, shared: true (in-process)", f"{everyone * 1e6:.1f} us", "-")
    extra = (granted - everyone) / p50_off
    row("  its extra cost, share of a create's p50", f"{extra * 100:+.2f} %", "<= 10 %", extra <= 0.10)
    print(f"(client on CPU 1, servers on CPU 0; {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()

"""OVN at scale (issue 20): 100 simulated chassis registering, 10,000 ports bound, the server's NB resync time.
Prints figures beside targets; asserts nothing.

Real NB/SB databases and ovn-northd (an OvnSandbox), the cloudnet API and the server's northbound writer in this
process (bench/ovn_common.py). The chassis are simulated: no ovn-controller runs; this process writes to SB what
ovn-controller writes, through ovsdbapp, one transaction per chassis as ovn-controller's first one: a Chassis row
(hostname, other_config as 23.03 writes it, port-up-notif on), its Geneve Encap and its Chassis_Private row. Then:
  ports    `--networks` networks with a subnet each, `--ports` ports over them created through the API (bulk POSTs)
           while the writer is stopped; a started writer's first pass writes them to NB (its own timing); ovn-northd
           makes their Port_Binding rows
  bind     each simulated chassis claims its share of the Port_Binding rows as ovn-controller does (chassis, up),
           one transaction per chassis; ovn-northd then sets the ports `up` in NB
  resync   the writer restarted, as after a server restart or an NB reconnect: connecting (the IDL's first copy of
           NB) and its first pass, a full diff of every row cloudnet owns, which finds nothing to change; then the
           same after 1% of the ports were deleted from NB behind its back (the pass repairs them)
  one more `--samples` times, one port created through the API: its pass (start -> NB commit), and how it read
           the database (Status.read: "log" when only what the change touched)

Usage (root): .venv/bin/python bench/ovn_scale.py [--chassis 100] [--ports 10000] [--networks 10]
"""

from __future__ import annotations

import argparse
import ipaddress
import time
import uuid
from typing import Any

from common import machine_load, ms, percentile, row
from ovn_common import OvnCloud, cpu_seconds, cpu_used, ovn_cloud, wait_for
from ovsdbapp.backend.ovs_idl.command import BaseCommand

from cloudnet.ovn import idl

SB_TABLES = ("Chassis", "Chassis_Private", "Encap", "Port_Binding", "SB_Global")
BULK = 500  # ports a POST


class RegisterChassis(BaseCommand):  # type: ignore[misc]
    """What ovn-controller writes to SB when it starts on a new chassis, in one transaction."""

    def __init__(self, api: Any, name: str, encap_ip: str) -> None:
        super().__init__(api)
        self.name, self.encap_ip = name, encap_ip

    def run_idl(self, txn: Any) -> None:
        encap = txn.insert(self.api.tables["Encap"])
        encap.type, encap.ip, encap.chassis_name = "geneve", self.encap_ip, self.name
        encap.options = {"csum": "true"}
        chassis = txn.insert(self.api.tables["Chassis"])
        chassis.name, chassis.hostname, chassis.encaps = self.name, self.name, [encap]
        chassis.other_config = {"datapath-type": "netdev", "iface-types": "geneve,internal,tap,system",
                                "is-interconnect": "false", "ovn-bridge-mappings": "", "ovn-chassis-mac-mappings": "",
                                "ovn-cms-options": "", "ovn-ct-no-masked-label": "true",
                                "ovn-enable-lflow-cache": "true", "port-up-notif": "true",
                                "mac-binding-timestamp": "true", "fdb-timestamp": "true"}  # fmt: skip
        private = txn.insert(self.api.tables["Chassis_Private"])
        private.name, private.chassis = self.name, chassis


class BindingsByPort(BaseCommand):  # type: ignore[misc]
    """{logical port: Port_Binding uuid}, read on the IDL's thread."""

    def run_idl(self, txn: Any) -> None:
        self.result = {b.logical_port: b.uuid for b in self.api.tables["Port_Binding"].rows.values()}


class ClaimPorts(BaseCommand):  # type: ignore[misc]
    """A chassis claiming its ports, as ovn-controller does once their interfaces appear: chassis, then up."""

    def __init__(self, api: Any, chassis: str, bindings: list[Any]) -> None:
        super().__init__(api)
        self.chassis, self.bindings = chassis, bindings

    def run_idl(self, txn: Any) -> None:
        chassis = next(c for c in self.api.tables["Chassis"].rows.values() if c.name == self.chassis)
        rows = self.api.tables["Port_Binding"].rows
        for binding_id in self.bindings:
            rows[binding_id].chassis = [chassis]
            rows[binding_id].up = [True]


def binding_count(sb: Any) -> int:
    """Port_Binding rows in this IDL's copy of SB (the networks here have no router or localnet ports; len() of the
    table is safe to read while the IDL's thread updates it, iterating it is not)."""
    return len(sb.tables["Port_Binding"].rows)


def create_ports(cloud: OvnCloud, networks: int, ports: int) -> list[str]:
    ids: list[str] = []
    per = ports // networks
    size = max(20, min(24, 32 - (2 * per).bit_length()))
    for n in range(networks):
        net = cloud.create("networks", "network", name=f"scale-{n}")
        cidr = ipaddress.ip_network(f"10.{64 + n // 16}.{(n % 16) * 16}.0/{size}")
        cloud.create("subnets", "subnet", network_id=net["id"], cidr=str(cidr))
        for start in range(0, per, BULK):
            body = {
                "ports": [{"network_id": net["id"], "name": f"p{n}-{i}"} for i in range(start, min(per, start + BULK))]
            }
            r = cloud.api.post("/ports", json=body)
            if r.status_code != 201:
                raise SystemExit(f"bulk ports: {r.status_code} {r.text[:300]}")
            ids += [p["id"] for p in r.json()["ports"]]
    return ids


def resync(cloud: OvnCloud, label: str) -> None:
    cpu = cpu_seconds(cloud)
    sync = cloud.restart_sync()
    t0 = time.monotonic()
    sync.start()
    status = sync.wait_synced(timeout=600)
    total = time.monotonic() - t0
    print(f"{label}: the pass found [{status.last_report[:100]}]")
    row("  server start of the writer -> resync pass done", f"{total:.3f} s", "(report)")
    connecting = status.committed_at - t0 - status.took
    row("  of which connecting (the IDL's first copy of NB)", f"{connecting:.3f} s", "(info)")
    row("  of which the pass (start -> NB commit)", f"{status.took:.3f} s", "(report)")
    row("    of which reading cloudnet's database", f"{status.read_took:.3f} s", "(info)")
    print(f"    OVN daemons meanwhile: {cpu_used(cpu, cpu_seconds(cloud))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chassis", type=int, default=100)
    parser.add_argument("--ports", type=int, default=10_000)
    parser.add_argument("--networks", type=int, default=10)
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    machine_load()
    suffix = uuid.uuid4().hex[:6]
    with ovn_cloud(chassis=0, start_sync=False) as cloud:
        print(f"OVN scale: {args.chassis} simulated chassis (SB rows written as ovn-controller writes them, "
              f"no ovn-controller), {args.ports:,} ports on {args.networks} networks, real NB/SB/northd")  # fmt: skip
        sb = idl.connect_southbound(cloud.ovn.sb_url, SB_TABLES, [])
        try:
            names = [f"sim-{suffix}-{i:03d}" for i in range(args.chassis)]
            t0 = time.monotonic()
            for i, name in enumerate(names):
                with sb.transaction(check_error=True) as txn:
                    txn.add(RegisterChassis(sb, name, str(ipaddress.ip_address("198.18.0.1") + i)))
            registered = time.monotonic() - t0
            row(f"{args.chassis} chassis registered (one SB transaction each)", f"{registered:.3f} s", "(report)")

            t0 = time.monotonic()
            ports = create_ports(cloud, args.networks, args.ports)
            row(f"{len(ports):,} ports created through the API", f"{time.monotonic() - t0:.1f} s", "(info)")
            cpu = cpu_seconds(cloud)
            t0 = time.monotonic()
            cloud.sync.start()
            status = cloud.sync.wait_synced(timeout=600)
            print(f"first pass of the writer: [{status.last_report[:100]}]")
            row("  the pass (start -> NB commit)", f"{status.took:.3f} s", "(report)")
            done = wait_for(lambda: binding_count(sb) >= len(ports), 600, "Port_Binding rows", step=0.05)
            row("  writer start -> ovn-northd's Port_Binding rows all in SB", f"{done - t0:.3f} s", "(info)")
            print(f"    OVN daemons meanwhile: {cpu_used(cpu, cpu_seconds(cloud))}")

            with sb.transaction(check_error=True) as txn:
                lookup = txn.add(BindingsByPort(sb))
            share = [[lookup.result[p] for p in ports[i :: len(names)]] for i in range(len(names))]
            cpu = cpu_seconds(cloud)
            t0 = time.monotonic()
            for name, mine in zip(names, share, strict=True):
                with sb.transaction(check_error=True) as txn:
                    txn.add(ClaimPorts(sb, name, mine))
            claimed = time.monotonic() - t0
            bound = len(cloud.ovn.sbctl("--bare", "--columns=chassis", "find", "Port_Binding", "chassis!=[]").split())
            row(f"{bound:,} ports bound (one SB transaction a chassis)", f"{claimed:.3f} s", "(report)")
            down = ("--bare", "--columns=name", "find", "Logical_Switch_Port", "up=false")
            up = wait_for(lambda: cloud.ovn.nbctl(*down).strip() == "", 600, "ports up in NB", step=0.2)
            row("  claims -> every port up in NB (ovn-northd)", f"{up - t0:.3f} s", "(info)")
            print(f"    OVN daemons meanwhile: {cpu_used(cpu, cpu_seconds(cloud))}")
            cloud.sync.wait_synced(timeout=600)

            resync(cloud, f"resync, {len(ports):,} ports bound on {args.chassis} chassis, NB already right")
            gone = ports[::100]
            cloud.sync.stop()
            for start in range(0, len(gone), 50):
                args_ = [a for p in gone[start : start + 50] for a in ("--", "lsp-del", p)]
                cloud.ovn.nbctl(*args_[1:])
            resync(cloud, f"resync after {len(gone)} ports were deleted from NB behind the server's back")

            net = cloud.api.get("/networks", params={"name": "scale-0"}).json()["networks"][0]["id"]
            took, reads, ends, how = [], [], [], []
            for k in range(args.samples):
                t0 = time.monotonic()
                cloud.create("ports", "port", network_id=net, name=f"one-more-{k}")
                status = cloud.sync.wait_synced(timeout=120)
                took.append(status.took)
                reads.append(status.read_took)
                ends.append(status.committed_at - t0)
                how.append(status.read)
            print(f"one more port beside the {len(ports):,}, {args.samples} samples (read: "
                  f"{', '.join(sorted(set(how)))}; log = only what the change touched):")  # fmt: skip
            row("  its pass (start -> NB commit), p50", ms(percentile(took, 50)), "(report)")
            row("    of which reading cloudnet's database, p50", ms(percentile(reads, 50)), "(info)")
            row("  POST -> in NB, p50", ms(percentile(ends, 50)), "(info)")
        finally:
            sb.ovsdb_connection.stop(timeout=5)


if __name__ == "__main__":
    main()

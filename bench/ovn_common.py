"""What the OVN benchmarks share: real OVN daemons (an OvnSandbox: NB, SB, ovn-northd, chassis in namespaces of their
own), the cloudnet API in this process on a SQLite database with every quota off, and the server's northbound
writer (NorthboundSync) beside it, as `cloudnet serve --dataplane ovn --ovn-nb/--ovn-sb` runs them. In process so
that a pass's own timing (Status.took: pass start to NB commit) can be read."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from common import ROOT  # noqa: F401  (puts the repository on sys.path for tests.support)
from tests.support.ovn import OvnSandbox, ovn_sandbox
from tests.support.server import RunningServer

from cloudnet.config import ServerConfig
from cloudnet.heap import freeze_startup
from cloudnet.northbound.sync import NorthboundSync
from cloudnet.ovn import daemons
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade

RESOURCES = ("network", "subnet", "port", "router", "security_group", "security_group_rule", "floatingip", "forward")


def versions() -> str:
    """The OVN and OVS releases the daemons are (figures differ by release: Debian 12 has 23.03, Debian 13 25.03)."""
    out = []
    for name, command in (("OVN", "ovn-northd"), ("OVS", "ovs-vswitchd")):
        first = daemons.run(Path(tempfile.gettempdir()), [command, "--version"]).splitlines()[0]
        out.append(f"{name} {first.split()[-1]}")
    return ", ".join(out)


@dataclass
class OvnCloud:
    ovn: OvnSandbox
    server: RunningServer
    api: httpx.Client
    sync: NorthboundSync
    gateways: tuple[str, ...]
    waited: str = ""

    def create(self, collection: str, member: str, **body: Any) -> dict[str, Any]:
        r = self.api.post(f"/{collection}", json={member: body})
        if r.status_code != 201:
            raise SystemExit(f"POST /{collection}: {r.status_code} {r.text[:300]}")
        return dict(r.json()[member])

    def restart_sync(self) -> NorthboundSync:
        """A new writer, as after a server restart: its first pass is a full resync."""
        self.sync.stop()
        self.sync = NorthboundSync(self.server.store, self.ovn.nb_url, self.gateways)
        return self.sync

    def wait_hv(self, timeout: float = 120) -> float:
        """`ovn-nbctl --wait=hv sync`: returns once every chassis' ovn-controller has installed the flows of all NB
        holds now (its Chassis_Private.nb_cfg caught up); the monotonic time it returned. `self.waited` keeps what
        ovn-nbctl printed of the time ovn-northd and the ovn-controllers took."""
        out = daemons.run(self.ovn.root, ["ovn-nbctl", f"--db={self.ovn.nb_url}", f"--timeout={timeout:g}",
                                          "--print-wait-time", "--wait=hv", "sync"], timeout=timeout + 5)  # fmt: skip
        self.waited = " ".join(out.split())
        return time.monotonic()

    def ofctl(self, chassis: daemons.Chassis, *args: str) -> str:
        return daemons.run(chassis.rundir, ["ovs-ofctl", *args], chassis.netns, timeout=60)

    def flows_to(self, address: str, chassis: int = 0) -> int:
        """How many OpenFlow flows of the chassis' br-int match IPv4 destination `address` exactly (what
        ovn-controller installs per load-balancer VIP): `ovs-ofctl dump-aggregate`, which visits every flow."""
        out = self.ofctl(self.ovn.chassis[chassis], "dump-aggregate", "br-int", f"ip,nw_dst={address}")
        return int(out.split("flow_count=")[1].split()[0])

    def flow_total(self, chassis: int = 0) -> int:
        """All OpenFlow flows of the chassis' br-int, from its tables' counters (`ovs-ofctl dump-tables`: cheap
        enough to poll while ovs-vswitchd installs flows, unlike a dump that visits every flow)."""
        out = self.ofctl(self.ovn.chassis[chassis], "dump-tables", "br-int")
        return sum(int(part.split("=")[1]) for part in out.replace(",", " ").split() if part.startswith("active="))


@contextmanager
def ovn_cloud(chassis: int = 1, start_sync: bool = True) -> Iterator[OvnCloud]:
    """OVN with `chassis` real chassis (the first is the routers' gateway), the API and the NB writer."""
    state = Path(tempfile.mkdtemp(prefix="cloudnet-ovnbench-"))
    with ovn_sandbox() as ovn:
        for _ in range(chassis):
            ovn.add_chassis()
        store = Store(f"sqlite:///{state / 'cloudnet.db'}")
        upgrade(store)
        config = ServerConfig(state_dir=state, quotas={r: -1 for r in RESOURCES})
        config.dataplane = "ovn"
        server = RunningServer.start(config, store)
        gateways = tuple(c.name for c in ovn.chassis[:1])
        sync = NorthboundSync(store, ovn.nb_url, gateways)
        if start_sync:
            sync.start()
        freeze_startup()  # (as `cloudnet serve` does once it started)
        api = httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=120)
        cloud = OvnCloud(ovn, server, api, sync, gateways)
        try:
            yield cloud
        finally:
            api.close()
            cloud.sync.stop()
            server.stop()
            store.dispose()
            shutil.rmtree(state, ignore_errors=True)


def router_site(cloud: OvnCloud, external: str = "192.0.2.0/24", inside: str = "10.0.0.0/22") -> dict[str, Any]:
    """An external flat network, a tenant network behind a router whose gateway is on the external one."""
    ext = cloud.create("networks", "network", name="ext", **{"router:external": True,
                       "provider:network_type": "flat", "provider:physical_network": "physnet1"})  # fmt: skip
    cloud.create("subnets", "subnet", network_id=ext["id"], cidr=external, enable_dhcp=False)
    net = cloud.create("networks", "network", name="inside")
    sub = cloud.create("subnets", "subnet", network_id=net["id"], cidr=inside)
    router = cloud.create("routers", "router", name="r", external_gateway_info={"network_id": ext["id"]})
    r = cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    r.raise_for_status()
    return {"ext": ext, "net": net, "subnet": sub, "router": router}


def plug(cloud: OvnCloud, chassis: daemons.Chassis, port_id: str, name: str) -> None:
    """An OVS internal port on the chassis' br-int for the logical port (what an agent plugs; here nobody answers
    behind it): ovn-controller binds the port and so computes flows for its switch and router."""
    daemons.run(chassis.rundir, ["ovs-vsctl", f"--db={chassis.ovs_url}", "add-port", "br-int", name, "--", "set",
                                 "Interface", name, "type=internal", f"external_ids:iface-id={port_id}"],
                chassis.netns)  # fmt: skip


def cpu_seconds(cloud: OvnCloud) -> dict[str, float]:
    """CPU time (user + system) each OVN daemon has used so far, by its pidfile name: what the daemons cost,
    whatever else this shared machine runs at the same time (their wall-clock times are not comparable)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    dirs = [cloud.ovn.root, *(c.rundir for c in cloud.ovn.chassis)]
    for index, rundir in enumerate(dirs):
        for name, pid in daemons.pids(rundir).items():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            label = name if index == 0 else f"{name}[{index}]"
            out[label] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def settled_flows(cloud: OvnCloud, done: Callable[[int], bool], quiet: float, timeout: float = 180
                  ) -> tuple[float, int]:  # fmt: skip
    """Poll br-int's flow count until `done(count)` holds and the count has not changed for `quiet` seconds; the
    monotonic time of its last change and the count."""
    deadline = time.monotonic() + timeout
    last, changed = cloud.flow_total(), time.monotonic()
    while not done(last) or time.monotonic() - changed < quiet:
        if time.monotonic() > deadline:
            raise SystemExit(f"br-int flows did not settle in {timeout:g} s (last {last})")
        time.sleep(0.02)  # (polled: the flow count has no event to wait on)
        now = cloud.flow_total()
        if now != last:
            last, changed = now, time.monotonic()
    return changed, last


def wait_quiet(cloud: OvnCloud, quiet: float = 0.25, timeout: float = 60) -> float:
    """Poll until OVN's central daemons and ovn-controllers have used no CPU for `quiet` seconds: ovn-northd 23.03
    recomputes everything a second time when its own southbound writes come back to it (`inc-engine` debug log: its
    SB Logical_Flow, Port_Binding and Load_Balancer inputs have no change handlers), after the flows are in. A sample
    that starts during that tail measures the previous change too. Returns how long it waited."""
    busy = ("ovn-northd", "ovnsb_db", "ovnnb_db", "ovn-controller")
    start = time.monotonic()
    last, still = None, start
    while True:
        now = time.monotonic()
        used = sum(v for k, v in cpu_seconds(cloud).items() if k.split("[")[0] in busy)
        if used != last:
            last, still = used, now
        elif now - still >= quiet:
            return now - start
        if now - start > timeout:
            raise SystemExit(f"OVN daemons still busy after {timeout:g} s")
        time.sleep(0.02)


def cpu_used(before: dict[str, float], after: dict[str, float]) -> str:
    spent = {k: after[k] - before.get(k, 0.0) for k in after}
    busy = ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v >= 0.01)
    return f"{sum(spent.values()):.2f} s CPU ({busy})"


def wait_for(check: Any, timeout: float, what: str, step: float = 0.01) -> float:
    """Poll `check` until true (a deadline, not a sleep standing in for readiness); the monotonic time it was."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)
    return time.monotonic()

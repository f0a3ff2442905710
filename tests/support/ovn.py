"""An OVN sandbox per test (module): NB/SB databases and ovn-northd on unix sockets in a directory of its own, and
optionally chassis, each in a network namespace of its own (a userspace-datapath ovs-vswitchd makes its bridges as
tap devices of its namespace, so two in one namespace would clash). Names carry a random suffix; the stop ends
the daemons by the pids in their pidfiles and removes the namespaces and the directory."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn import veth
from cloudnet.ovn import daemons

# The chassis' underlay: addresses inside the sandbox's own namespaces only (chassis i has the i-th address).
UNDERLAY = ipaddress.ip_network("100.64.0.0/24")
UNDERLAY_PORT = "ul0"


@dataclass
class OvnSandbox:
    root: Path
    central: daemons.Central
    suffix: str
    chassis: list[daemons.Chassis] = field(default_factory=list)
    underlay: str | None = None  # the namespace whose bridge links the chassis' Geneve ports (made on demand)

    @property
    def nb_url(self) -> str:
        return self.central.nb_url

    @property
    def sb_url(self) -> str:
        return self.central.sb_url

    def nbctl(self, *args: str) -> str:
        return daemons.run(self.root, ["ovn-nbctl", f"--db={self.nb_url}", "--timeout=10", *args])

    def sbctl(self, *args: str) -> str:
        return daemons.run(self.root, ["ovn-sbctl", f"--db={self.sb_url}", "--timeout=10", *args])

    def flush_datapath_caches(self) -> None:
        """Drop every chassis' cached datapath flows, so that the next packet is judged by the OpenFlow tables as
        they are now (`--wait=hv` waits for those tables; a busy ovs-vswitchd revalidates its cache later)."""
        for chassis in self.chassis:
            pid = daemons.pids(chassis.rundir).get("ovs-vswitchd")
            if pid is not None:
                ctl = chassis.rundir / f"ovs-vswitchd.{pid}.ctl"
                daemons.run(chassis.rundir, ["ovs-appctl", "-t", str(ctl), "revalidator/purge"], chassis.netns)

    def add_chassis(self, bridge_mappings: dict[str, str] | None = None, geneve: bool = False) -> daemons.Chassis:
        """A chassis in a namespace of its own, registered in this sandbox's SB database; with `geneve`, linked to
        the other such chassis by an underlay (a bridge in a namespace of its own) its tunnels run over."""
        index = len(self.chassis) + 1
        netns = f"cn-ovn-{self.suffix}-{index}"
        subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True)
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True, capture_output=True)
        try:
            encap = self._underlay_port(netns, index) if geneve else {}
            chassis = daemons.start_chassis(self.root / f"chassis-{index}", f"ch-{self.suffix}-{index}",
                                            self.sb_url, netns=netns, bridge_mappings=bridge_mappings,
                                            **encap)  # fmt: skip
        except BaseException:
            daemons.stop(self.root / f"chassis-{index}", netns)
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
            raise
        self.chassis.append(chassis)
        return chassis

    def _underlay_port(self, netns: str, index: int) -> dict[str, Any]:
        if self.underlay is None:
            self.underlay = f"cn-ovn-{self.suffix}-u"
            underlay_bridge(self.underlay)
        return underlay_port(self.underlay, netns, index)

    def stop_central(self) -> None:
        daemons.stop(self.root)

    def restart_central(self) -> None:
        self.central = daemons.start_central(self.root)

    def stop(self) -> None:
        for chassis in self.chassis:
            daemons.stop(chassis.rundir, chassis.netns, chassis.bridges)
            if chassis.netns:
                subprocess.run(["ip", "netns", "del", chassis.netns], capture_output=True)
        if self.underlay:
            subprocess.run(["ip", "netns", "del", self.underlay], capture_output=True)
        daemons.stop(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


def underlay_bridge(netns: str) -> None:
    """A namespace holding the bridge that links chassis' underlay ports (underlay_port)."""
    subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True)
    subprocess.run(["ip", "-n", netns, "link", "add", "ul", "up", "type", "bridge"], check=True, capture_output=True)


def underlay_port(underlay: str, netns: str, index: int) -> dict[str, Any]:
    """A veth UNDERLAY_PORT from `netns` into the underlay's bridge; what start_chassis is given for it (the
    index-th underlay address, to go on that port)."""
    peer = f"ul{index}"
    subprocess.run(["ip", "-n", netns, "link", "add", UNDERLAY_PORT, "type", "veth", "peer", "name", peer, "netns",
                    underlay], check=True, capture_output=True)  # fmt: skip
    subprocess.run(["ip", "-n", underlay, "link", "set", peer, "master", "ul", "up"], check=True, capture_output=True)
    return {"encap_ip": str(UNDERLAY[index]), "encap_port": (UNDERLAY_PORT, UNDERLAY.prefixlen)}


def outside_bridge(ns: str, address: str, *uplinks: tuple[str, str]) -> None:
    """The outside: namespace `ns` whose bridge `out` holds `address` (ADDR/PREFIX) and the far ends (o-NAME) of
    hosts' uplinks ((namespace, NAME))."""
    netns.create(ns)
    for cmd in (["link", "add", "out", "type", "bridge"], ["addr", "add", address, "dev", "out"],
                ["link", "set", "out", "up"]):  # fmt: skip
        subprocess.run(["ip", "-n", ns, *cmd], check=True, capture_output=True)
    veth.tx_checksum_off(ns, "out")  # (the userspace datapath completes no partial checksums)
    for host_ns, name in uplinks:
        subprocess.run(["ip", "-n", host_ns, "link", "add", name, "type", "veth", "peer", "name", f"o-{name}", "netns",
                        ns], check=True, capture_output=True)  # fmt: skip
        subprocess.run(["ip", "-n", ns, "link", "set", f"o-{name}", "master", "out", "up"], check=True,
                       capture_output=True)  # fmt: skip


def learned_on(ns: str, mac: str) -> str | None:
    """The outside bridge's port the MAC was last seen on (which host's uplink it came out of)."""
    out = subprocess.run(["bridge", "-n", ns, "-j", "fdb", "show", "br", "out"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return next((e["ifname"] for e in json.loads(out or "[]") if e.get("mac") == mac.lower()), None)


@contextmanager
def ovn_sandbox() -> Iterator[OvnSandbox]:
    # A short directory: unix socket paths must fit in 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="cn-ovn-", dir="/tmp"))
    suffix = uuid.uuid4().hex[:6]
    try:
        sandbox = OvnSandbox(root, daemons.start_central(root), suffix)
    except BaseException:
        daemons.stop(root)
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield sandbox
    finally:
        sandbox.stop()


def ovn_version() -> tuple[int, int]:
    """(major, minor) of the installed OVN (`ovn-nbctl --version`: "ovn-nbctl 23.03.1"), for behaviour that differs
    between releases."""
    out = subprocess.run(["ovn-nbctl", "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = out.split()[1].split(".")[:2]
    return int(major), int(minor)

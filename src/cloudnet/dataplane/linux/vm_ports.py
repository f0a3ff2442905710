"""VM NICs on the Linux driver: a persistent tap per NIC, that the VM's VMM opens.

Each NIC of a VM instance (`kind` "vm": cloudnet's own, or one a compute service plugged with plain ports) is a tap
named as Nova names it (`tap` + the port id, guest_net.vm_device) in the host namespace, on its network's bridge,
with the network's MTU, owned by the configured VMM user and group (--vm-user/--vm-group). The VMM attaches to it
by name from inside the host namespace (`ip netns exec <netns of vif_details> qemu-system-x86_64 -netdev
tap,ifname=<device>,script=no,downscript=no ...`, see `cloudnet instance qemu-args`), or is handed an fd opened
there. The device is persistent: it outlives the agent (kill -9: adopted as it is by the next one) and a VMM that
closes it; deleting it while a VMM holds it does not wait for the VMM.

Order, so that nothing passes unfiltered: the firewall has the port's part (keyed by the tap's name) before this job
runs (a port whose filter failed is not plugged); a new tap is made down under a name of cloudnet's
(names.VM_TAP_NEW), marked (alias tuntap.mark, device group names.VM_TAP_GROUP, which the bridge filter drops
unless it knows the device), enslaved with its MTU, then renamed and set up. A device already named like the tap
without this host's mark for that port is somebody else's: that instance fails with the reason (ERROR), nothing of
the device is touched, and the other instances converge.

Reported as Neutron's `tap` binding: `binding:vif_type` "tap", `binding:vif_details` port_filter, bridge_name,
datapath_type "system", mtu, mac_address, device, and netns (where the device is). ACTIVE: a VMM may attach now
(the tap exists, filtered, on its bridge, up); admin state down: the tap is down, the port DOWN.
"""

from __future__ import annotations

import logging
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet.dataplane import security
from cloudnet.dataplane.base import DesiredState, PortReport, failed
from cloudnet.dataplane.kernel import tuntap
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.bridges import Bridges
from cloudnet.dataplane.linux.links import EEXIST, Links, delete, index
from cloudnet.dataplane.linux.passes import Pass, broken_reason
from cloudnet.dataplane.steps import StepFailed, Steps
from cloudnet.wire.guest_net import vm_device

log = logging.getLogger(__name__)
VIF_TYPE = "tap"
IFF_UP = 0x1
STEP = "vm:"  # + the instance id


class DeviceClash(LookupError):
    """A device named like a VM's tap that cloudnet did not make for that port."""


def _alias(msg: Any) -> str | None:
    value = msg.get_attr("IFLA_IFALIAS")
    return str(value) if value else None


class VmPorts:
    """The VM ports job (a dataplane.base.Ports of its own beside the veth one), one step per instance."""

    def __init__(self, host: str, bridges: Bridges, firewall: security.Firewall, steps: Steps,
                 owner: tuple[int, int] = (0, 0)) -> None:  # fmt: skip
        self.host = host
        self.host_ns = names.host_ns(host)
        self.bridges = bridges
        self.firewall = firewall
        self.steps = steps
        self.owner = owner
        self.applied: dict[str, tuple[Any, ...]] = {}  # port id -> what was applied to its tap (fingerprint)

    def apply(self, run: Pass) -> list[PortReport]:
        reports: list[PortReport] = []
        for inst in run.state["instances"]:
            if inst.get("kind") == "vm":
                reports += self._instance(run, inst)
        return reports

    def step_keys(self, state: DesiredState) -> list[str]:
        return [f"{STEP}{i['id']}" for i in state["instances"] if i.get("kind") == "vm"]

    def forget(self) -> None:
        self.applied.clear()

    def is_plugged(self, port_id: str) -> bool:
        return port_id in self.applied

    def keep(self, ports: set[str]) -> None:
        self.applied = {k: v for k, v in self.applied.items() if k in ports}

    def _instance(self, run: Pass, inst: dict[str, Any]) -> list[PortReport]:
        ports = run.state["ports"]
        mine = [ports[pid] for pid in inst["ports"] if pid in ports]
        run.wanted.update(vm_device(p["id"]) for p in mine)
        down = next(filter(None, (broken_reason(p, run.broken) for p in mine)), None)
        if down is not None:
            return [failed(p["id"], down) for p in mine]
        prints = [self._fingerprint(p, run.state) for p in mine]
        if all(self.applied.get(p["id"]) == fp and (not run.full or self._as_applied(run, p))
               for p, fp in zip(mine, prints, strict=True)):  # fmt: skip
            return [self._report(p, run.state) for p in mine]  # as it is
        try:
            self.steps.run(f"{STEP}{inst['id']}", lambda: self._plug_all(run, mine, prints), tuple(prints))
        except StepFailed as exc:
            return [failed(p["id"], exc.reason) for p in mine]
        return [self._report(p, run.state) for p in mine]

    def _fingerprint(self, port: dict[str, Any], state: DesiredState) -> tuple[Any, ...]:
        network = state["networks"][port["network_id"]]
        return (port["network_id"], network["mtu"], bool(port["admin_state_up"]), self.owner)

    def _as_applied(self, run: Pass, port: dict[str, Any]) -> bool:
        """Does the kernel still hold the port's tap as applied (a full pass looks: someone may have changed it)?"""
        msg = run.links.get(vm_device(port["id"]))
        if not self._adoptable(msg, port["id"]):
            return False
        want = (self.bridges.index(run.host, port["network_id"]), run.state["networks"][port["network_id"]]["mtu"],
                names.VM_TAP_GROUP, bool(port["admin_state_up"]))  # fmt: skip
        return want == (msg.get_attr("IFLA_MASTER"), msg.get_attr("IFLA_MTU"), msg.get_attr("IFLA_GROUP"),
                        bool(msg["flags"] & IFF_UP))  # fmt: skip

    def _adoptable(self, msg: Any | None, port_id: str) -> bool:
        return msg is not None and _alias(msg) == tuntap.mark(self.host, port_id)

    def _plug_all(self, run: Pass, mine: list[dict[str, Any]], prints: list[tuple[Any, ...]]) -> None:
        for port, fingerprint in zip(mine, prints, strict=True):
            self._plug(run.host, run.links, port, run.state["networks"][port["network_id"]])
            self.applied[port["id"]] = fingerprint

    def _plug(self, host: IPRoute, links: Links, port: dict[str, Any], network: dict[str, Any]) -> None:
        """The port's tap, made or adopted, on its bridge with the network's MTU; up unless admin state down."""
        dev = vm_device(port["id"])
        bridge = self.bridges.index(host, port["network_id"])
        if bridge is None:
            raise LookupError(f"bridge {names.bridge(port['network_id'])} of network {port['network_id']} missing")
        msg = links.get(dev)
        if msg is not None and not self._adoptable(msg, port["id"]):
            raise DeviceClash(f"device {dev} exists and is not cloudnet's tap for port {port['id']} (no mark "
                              f"{tuntap.mark(self.host, port['id'])!r}): left alone")  # fmt: skip
        if msg is None:
            self._make(host, links, port, dev, bridge, network["mtu"])
            msg = links[dev]
        want = {"master": bridge, "mtu": network["mtu"], "group": names.VM_TAP_GROUP}
        have = {"master": msg.get_attr("IFLA_MASTER"), "mtu": msg.get_attr("IFLA_MTU"),
                "group": msg.get_attr("IFLA_GROUP")}  # fmt: skip
        changes = {k: v for k, v in want.items() if have[k] != v}
        if changes:  # (an adopted tap someone changed: down first, so it never forwards half-configured)
            host.link("set", index=msg["index"], state="down")
            host.link("set", index=msg["index"], **changes)
        host.link("set", index=msg["index"], state="up" if port["admin_state_up"] else "down")
        links.refresh(dev)

    def _make(self, host: IPRoute, links: Links, port: dict[str, Any], dev: str, bridge: int, mtu: int) -> None:
        """A new tap: made down under cloudnet's name, marked, on its bridge with its MTU, then named `dev`."""
        new = names.vm_tap_new(port["id"])
        stale = index(host, new)
        if stale is not None:  # (an interrupted make)
            delete(host, stale)
        tuntap.make_persistent(new, *self.owner)  # (on the step worker: in the host namespace)
        idx = index(host, new)
        if idx is None:
            raise LookupError(f"tap {new} vanished as it was made")
        try:
            host.link("set", index=idx, ifalias=tuntap.mark(self.host, port["id"]), group=names.VM_TAP_GROUP,
                      mtu=mtu, master=bridge)  # fmt: skip
            host.link("set", index=idx, ifname=dev)
        except NetlinkError as exc:
            delete(host, idx)
            if exc.code == EEXIST:  # taken as it was made
                raise DeviceClash(
                    f"device {dev} appeared as cloudnet made its tap: not cloudnet's, left alone"
                ) from None
            raise
        links.refresh(dev)

    def _report(self, port: dict[str, Any], state: DesiredState) -> PortReport:
        network = state["networks"][port["network_id"]]
        details = {"port_filter": self.firewall.enforced(port["id"]), "bridge_name": names.bridge(port["network_id"]),
                   "datapath_type": "system", "connectivity": "l2", "mtu": network["mtu"],
                   "mac_address": port["mac_address"], "device": vm_device(port["id"]),
                   "netns": self.host_ns}  # fmt: skip
        return PortReport(port["id"], "ACTIVE" if port["admin_state_up"] else "DOWN", VIF_TYPE, details)

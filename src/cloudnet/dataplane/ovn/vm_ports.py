"""VM NICs on the OVN driver, plugged as os-vif's `ovs_hybrid_plug` plugs them (hybrid.py): a persistent tap named as
Nova names it (`tap` + port id, 14 characters; tapdev.py), owned by the configured user/group, on a Linux bridge of
its own (`qbr`), linked by a veth (`qvb` == `qvo`) to br-int, where `qvo`'s Interface carries what os-vif writes
(`iface-id`, `attached-mac`, `iface-status=active`, `vm-uuid`) plus this driver's host mark; all in the namespace
ovs-vswitchd runs in, with the network's MTU. The VMM opens the tap (`-netdev tap,ifname=...`); nothing else of the
VM is the agent's. VMs a compute service plugs with plain ports (`compute_service`) take the same path.

Why not the tap on br-int itself: what a guest may not send is not all OVN's to stop. OVN lets a guest's router
advertisements through (23.03 above every ACL; port security looks at none, on 25.03 neither), so the bridge's
forward hook drops them, with redirects and DHCP server answers (guard.py, in place before a tap joins a bridge).
The qvo end is a plain "system" port of br-int read through AF_PACKET, as a container's veth is; qvb does not
offload checksums, so the kernel completes a guest's partial ones (virtio's offload) before they reach the
userspace datapath, which completes none. The report still says `datapath_type` (netdev) for the VMM's arguments
(qemu-args turns the NIC's offloads off there: one copy fewer, tests/ovn/test_vm_guest.py).

Port security, security groups and DHCP are OVN's (the logical port's flows), in place before ovn-controller binds
the port; a port is ACTIVE once SB says it is bound here. One step per instance: a name clash (a device or a br-int
port of one of the NIC's names that is not this host's) fails that instance alone, with its reason."""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any

from cloudnet.dataplane.base import DesiredState, PortReport, failed
from cloudnet.dataplane.kernel import netns, tuntap
from cloudnet.dataplane.ovn import guard, hybrid, names, tapdev
from cloudnet.dataplane.ovn.passes import OvnPass
from cloudnet.dataplane.ovn.ports import pluggable
from cloudnet.dataplane.steps import StepFailed
from cloudnet.wire.guest_net import vm_device

log = logging.getLogger(__name__)
VM = "vm"
GUARD_STEP = "vm-guard"
FOREIGN_PORT = "a port named {} that cloudnet did not make is on the switch (left alone)"


def is_vm(inst: dict[str, Any]) -> bool:
    return inst.get("kind") == VM


class VmPorts:
    """The ports job for VM instances' NICs (hybrid-plugged taps), one step per instance, and the guard's."""

    def __init__(self, host: str, chassis: str, host_ns: str, owner: tapdev.Owner) -> None:
        self.host = host
        self.chassis = chassis
        self.owner = owner
        # Where a VMM must open the taps, when it is not the agent's own namespace.
        self.netns = None if host_ns == netns.AGENT_NS else host_ns
        self.applied: dict[str, tuple[Any, ...]] = {}  # port id -> fingerprint of what was plugged

    def step_keys(self, state: DesiredState) -> list[str]:
        keys = [f"vm:{i['id']}" for i in state["instances"] if is_vm(i)]
        return [GUARD_STEP, *keys] if keys else []

    def apply(self, run: OvnPass) -> list[PortReport]:
        vms = [i for i in run.state["instances"] if is_vm(i)]
        if not vms:
            self.applied.clear()
            return []
        try:
            datapath = run.vswitch.datapath_type() or "system"
        except Exception as exc:  # (the switch away: every step below fails with its reason too)
            log.warning("br-int's datapath type unknown (%s)", exc)
            datapath = ""
        have: set[str] | None = None  # this host's taps, read once for a full pass
        if run.full:
            # The guard as it should be, though no NIC needs plugging (a plug ensures it too, and fails without it).
            with contextlib.suppress(StepFailed):
                run.steps.run(GUARD_STEP, lambda: guard.ensure(run.host_ns))
            with netns.iproute(run.host_ns) as host:
                have = set(tuntap.marked(host, self.host))
        reports: list[PortReport] = []
        for inst in vms:
            reports += self._instance(run, inst, datapath, have)
        self.applied = {k: v for k, v in self.applied.items() if k in {r.port_id for r in reports}}
        return reports

    def _instance(self, run: OvnPass, inst: dict[str, Any], datapath: str, have: set[str] | None
                  ) -> list[PortReport]:  # fmt: skip
        ports = run.state["ports"]
        refused, plain = pluggable([ports[pid] for pid in inst["ports"] if pid in ports])
        mine = [ports[pid] for pid in inst["ports"] if pid in plain]
        run.wanted.update(name for p in mine for name in hybrid.nic(p["id"]).all())
        run.vif_networks.update(p["network_id"] for p in mine)
        prints = [self._fingerprint(run, p) for p in mine]
        current = all(self.applied.get(p["id"]) == fp and (not run.full or run.ours.get(_port(p)) == p["id"])
                      for p, fp in zip(mine, prints, strict=True))  # fmt: skip
        there = have is None or all(set(hybrid.nic(p["id"]).all()) <= have for p in mine)
        if not current or not there:
            try:
                run.steps.run(f"vm:{inst['id']}", lambda: self._plug(run, inst, mine, prints), tuple(prints))
            except StepFailed as exc:
                return refused + [failed(p["id"], exc.reason) for p in mine]
            if any(p["id"] not in run.bound for p in mine):
                # The tap is made last, while ovn-controller binds qvo: often bound by now, so ACTIVE in this
                # pass's report rather than one pass later (a VMM waits for it).
                with contextlib.suppress(Exception):  # (SB away: the bindings read at the pass's start stand)
                    run.bound.update(run.read_bound())
        return refused + [self._report(run, p, datapath) for p in mine]

    def _fingerprint(self, run: OvnPass, port: dict[str, Any]) -> tuple[Any, ...]:
        mtu = run.state["networks"][port["network_id"]]["mtu"]
        return port["network_id"], port["mac_address"].lower(), mtu, self.owner

    def _plug(self, run: OvnPass, inst: dict[str, Any], mine: list[dict[str, Any]], prints: list[Any]) -> None:
        for port, fingerprint in zip(mine, prints, strict=True):
            devices, mac = hybrid.nic(port["id"]), port["mac_address"].lower()
            for name in (devices.tap, devices.switch_leg):
                if run.vswitch.foreign(name):
                    raise tapdev.NotOurs(FOREIGN_PORT.format(name))
            if run.vswitch.iface_id(devices.tap) is not None:  # (on br-int itself, as an earlier cloudnet plugged it)
                run.vswitch.unplug(devices.tap)
            guard.ensure(run.host_ns)  # (before the tap joins its bridge)
            mtu = run.state["networks"][port["network_id"]]["mtu"]
            ids = {"attached-mac": mac, "iface-status": "active", "vm-uuid": inst["id"]}
            # (qvo on br-int before the tap is made: ovn-controller binds the port meanwhile)
            plug = functools.partial(run.vswitch.plug, devices.switch_leg, port["id"], **ids)
            if hybrid.ensure(run.host_ns, self.host, port["id"], mac, mtu, self.owner, plug):
                log.info("VM NIC %s made for port %s of VM %s (bridge %s)", devices.tap, port["id"], inst["id"],
                         devices.bridge)  # fmt: skip
            self.applied[port["id"]] = fingerprint

    def _report(self, run: OvnPass, port: dict[str, Any], datapath: str) -> PortReport:
        """As Neutron's OVN driver fills them, plus the device (and its namespace, where it is not the host's)."""
        status = "BUILD" if port["id"] not in run.bound else "ACTIVE" if port["admin_state_up"] else "DOWN"
        details: dict[str, Any] = {
            "port_filter": True, "ovs_hybrid_plug": True, "connectivity": "l2", "bridge_name": run.vswitch.bridge,
            "datapath_type": datapath, "mtu": run.state["networks"][port["network_id"]]["mtu"],
            "device": vm_device(port["id"]), "chassis": self.chassis,
        }  # fmt: skip
        if self.netns is not None:
            details["netns"] = self.netns
        return PortReport(port["id"], status, "ovs", details)


def _port(port: dict[str, Any]) -> str:
    return hybrid.nic(port["id"]).switch_leg


def collect(run: OvnPass, host: str, ours: dict[str, str]) -> None:
    """This host's VM NIC devices nothing wants any more: the br-int ports (`ours`: the Interfaces it marked) and
    the taps, bridges and veths marked in the kernel (those never plugged too: an agent killed between the two)."""
    with netns.iproute(run.host_ns) as ipr:
        gone = {name for name in ours if not name.startswith((names.TAP, names.METADATA_LEG))} - run.wanted
        for name in sorted(gone | (set(tuntap.marked(ipr, host)) - run.wanted)):
            if name in ours:
                run.vswitch.unplug(name)
            tapdev.delete(ipr, name, host)

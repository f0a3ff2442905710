"""Instance ports on the OVN driver: each a veth pair, `cno-<port>` a port of br-int whose Interface carries
`external_ids:iface-id=<port id>` (ovn-controller binds the logical port to this chassis when it sees it), and
eth<position> inside the instance's namespace, configured as the port (kernel/addressing.py: MAC, MTU, addresses,
routes incl. the metadata hop). One step per instance; a port is ACTIVE only once SB says it is bound here."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from cloudnet.dataplane.base import DesiredState, PortReport, failed
from cloudnet.dataplane.kernel import addressing, netns
from cloudnet.dataplane.ovn import names, veth
from cloudnet.dataplane.ovn.passes import OvnPass
from cloudnet.dataplane.steps import StepFailed
from cloudnet.dataplane.trunks import trunks_of
from cloudnet.namespaces import is_managed_ns

log = logging.getLogger(__name__)
# SR-IOV: OVN takes a VF's traffic only as an `external` port behind a real NIC, which this driver does not do.
UNSUPPORTED_VNIC_TYPES = frozenset({"direct"})
UNSUPPORTED = "binding:vnic_type {} (SR-IOV) is not supported on the OVN dataplane: use a normal port"


def pluggable(given: list[dict[str, Any]]) -> tuple[list[PortReport], set[str]]:
    """An instance's ports this driver refuses (a vnic type it does not plug, an id that is not a plain name), with
    why; and the ids of the others."""
    refused = [failed(p["id"], UNSUPPORTED.format(p["binding:vnic_type"])) for p in given
               if p.get("binding:vnic_type") in UNSUPPORTED_VNIC_TYPES]  # fmt: skip
    supported = [p for p in given if p.get("binding:vnic_type") not in UNSUPPORTED_VNIC_TYPES]
    refused += [failed(p["id"], "its id is not a plain name: not plugged into OVN") for p in supported
                if not names.is_plain(p["id"])]  # fmt: skip
    return refused, {p["id"] for p in supported if names.is_plain(p["id"])}


def report(port: dict[str, Any], ifname: str, bound: set[str], chassis: str) -> PortReport:
    """ACTIVE once ovn-controller has bound the port here (DOWN when its admin state is), BUILD until then."""
    status = "BUILD" if port["id"] not in bound else "ACTIVE" if port["admin_state_up"] else "DOWN"
    details = {"port_filter": True, "bridge_name": "br-int", "tap": names.tap(port["id"]), "ifname": ifname,
               "chassis": chassis}  # fmt: skip
    return PortReport(port["id"], status, "ovs", details)


def subport_reports(state: DesiredState, plugged: Callable[[str], bool], bound: set[str], chassis: str
                    ) -> list[PortReport]:  # fmt: skip
    """A trunk's subports ride on their parent's VIF (OVN container ports: the server writes their parent_name and
    tag): each ACTIVE once ovn-controller has bound it here, which it does once the parent is."""
    return [report(sub, f"{names.tap(parent['id'])}.{vid}", bound, chassis)
            for parent, subs in trunks_of(state) if plugged(parent["id"]) for sub, vid in subs]  # fmt: skip


class InstancePorts:
    """The ports job (dataplane.base.Ports) for veth ports plugged into br-int, one step per instance."""

    def __init__(self, host: str, chassis: str) -> None:
        self.host = host
        self.chassis = chassis
        self.applied: dict[str, tuple[Any, ...]] = {}  # port id -> fingerprint of what was plugged

    def step_keys(self, state: DesiredState) -> list[str]:
        return [f"instance:{i['id']}" for i in state["instances"] if i.get("kind") != "vm"]

    def forget(self) -> None:
        self.applied.clear()

    def is_plugged(self, port_id: str) -> bool:
        return port_id in self.applied

    def apply(self, run: OvnPass) -> list[PortReport]:
        reports: list[PortReport] = []
        for inst in run.state["instances"]:
            if inst.get("kind") == "vm":  # (its NICs are taps: vm_ports.py)
                continue
            if is_managed_ns(self.host, inst["netns"]):
                run.wanted_ns.add(inst["netns"])
            reports += self._instance(run, inst)
        self.applied = {k: v for k, v in self.applied.items() if k in {r.port_id for r in reports}}
        return reports

    def _instance(self, run: OvnPass, inst: dict[str, Any]) -> list[PortReport]:
        ports = run.state["ports"]
        refused, plain = pluggable([ports[pid] for pid in inst["ports"] if pid in ports])
        mine = [(pos, ports[pid]) for pos, pid in enumerate(inst["ports"]) if pid in plain]
        run.wanted.update(names.tap(p["id"]) for _pos, p in mine)
        run.vif_networks.update(p["network_id"] for _pos, p in mine)
        prints = [addressing.fingerprint(inst, pos, p, run.state["networks"][p["network_id"]], run.state)
                  for pos, p in mine]  # fmt: skip
        current = all(self.applied.get(p["id"]) == fp and (not run.full or run.ours.get(names.tap(p["id"])) == p["id"])
                      for (_pos, p), fp in zip(mine, prints, strict=True))  # fmt: skip
        if not current or (run.full and mine and not self._devices_there(run, mine)):
            try:
                run.steps.run(f"instance:{inst['id']}", lambda: self._plug_instance(run, inst, mine, prints),
                              tuple(prints))  # fmt: skip
            except StepFailed as exc:
                return refused + [failed(p["id"], exc.reason) for _pos, p in mine]
        return refused + [report(p, addressing.device_name(inst, pos), run.bound, self.chassis) for pos, p in mine]

    def _devices_there(self, run: OvnPass, mine: list[tuple[int, dict[str, Any]]]) -> bool:
        with netns.iproute(run.host_ns) as host:
            return all(veth.index(host, names.tap(p["id"])) is not None for _pos, p in mine)

    def _plug_instance(
        self, run: OvnPass, inst: dict[str, Any], mine: list[tuple[int, dict[str, Any]]], prints: list[tuple[Any, ...]]
    ) -> None:
        if is_managed_ns(self.host, inst["netns"]) and not netns.exists(inst["netns"]):
            netns.create(inst["netns"])  # one cloudnet provides: made here
            run.guard.made(inst["netns"])
        fd = run.guard.open(inst)  # (NamespaceRefused / NamespaceMissing: this instance fails, with why)
        try:
            with netns.iproute(run.host_ns) as host, netns.iproute(fd) as inside:
                inside.link("set", index=1, state="up")  # lo, ifindex 1 in every namespace
                for (position, port), fingerprint in zip(mine, prints, strict=True):
                    self._plug(run, host, inside, fd, position, addressing.device_name(inst, position), port)
                    self.applied[port["id"]] = fingerprint
        finally:
            os.close(fd)

    def _plug(
        self, run: OvnPass, host: Any, inside: Any, fd: int, position: int, ifname: str, port: dict[str, Any]
    ) -> None:
        tap = names.tap(port["id"])
        mtu, mac = run.state["networks"][port["network_id"]]["mtu"], port["mac_address"]
        idx = veth.index(inside, ifname)
        fresh = idx is None or veth.index(host, tap) is None or veth.mac(inside, idx) != mac.lower()
        if fresh:
            if idx is not None:
                inside.link("del", index=idx)  # a stale ethN: its pair goes with it
            idx = veth.create(host, tap, {"ifname": ifname, "address": mac}, fd, mtu)
            veth.tx_checksum_off(fd, ifname)
        else:
            host.link("set", index=veth.index(host, tap), mtu=mtu, state="up")
            inside.link("set", index=idx, mtu=mtu)
        assert idx is not None
        inside.link("set", index=idx, state="up" if port["admin_state_up"] else "down")
        addressing.configure_addresses(inside, idx, port, fresh=fresh)
        addressing.configure_routes(inside, idx, port, run.state, default=position == 0, fresh=fresh)
        run.vswitch.plug(tap, port["id"], **{"attached-mac": mac})

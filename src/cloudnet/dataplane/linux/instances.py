"""Instance ports on the Linux driver: each a veth pair, `cnt-<port>` on its network's bridge in the host namespace
and eth<position> (or the name the runtime chose) in the instance's namespace (created there directly), configured
as the port (kernel/addressing.py).
A parked pool device is taken over instead when there is one (pool.py). Ports of another vnic type (SR-IOV
`direct`) are left to their binder.

An instance with `handoff` is one whose runtime takes the plugged ethN out of the namespace cloudnet provided
(Docker's Join hands it to dockerd). Once ethN has left, the host end on its bridge is the port's device: it is
kept (bridge, MTU, firewall, reports) and the other end, the runtime's now, is never looked for nor re-created."""

from __future__ import annotations

import logging
import os
from typing import Any

from pyroute2 import IPRoute

from cloudnet.dataplane import security
from cloudnet.dataplane.base import DesiredState, PortReport, failed
from cloudnet.dataplane.kernel import addressing, netns, ns_guard
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.bridges import Bridges
from cloudnet.dataplane.linux.links import Links, create_veth, delete, mac, rename, wait_forwarding
from cloudnet.dataplane.linux.passes import PARKED_IFNAME, Pass, Plugged, broken_reason, plugged_report
from cloudnet.dataplane.linux.pool import retire
from cloudnet.dataplane.steps import StepFailed, Steps

log = logging.getLogger(__name__)
# vnic types never plugged as a veth: a port binder's (SR-IOV VFs), or nobody's on a host without one.
NOT_VETH = frozenset({"direct"})


class InstancePorts:
    """The ports job (dataplane.base.Ports) for veth ports, one step per instance."""

    def __init__(
        self, host: str, bridges: Bridges, firewall: security.Firewall, plugged: Plugged, steps: Steps,
        not_veth: frozenset[str] = NOT_VETH,
    ) -> None:  # fmt: skip
        self.host = host
        self.bridges = bridges
        self.firewall = firewall
        self.plugged = plugged
        self.steps = steps
        self.not_veth = not_veth

    def apply(self, run: Pass) -> list[PortReport]:
        reports: list[PortReport] = []
        for inst in run.state["instances"]:
            if inst.get("kind") == "vm":  # (its NICs are taps: vm_ports.py)
                continue
            if names.is_managed_ns(self.host, inst["netns"]):  # one cloudnet provides: made here
                run.wanted_ns.add(inst["netns"])
            reports += self._instance(run, inst)
        return reports

    def step_keys(self, state: DesiredState) -> list[str]:
        return [f"instance:{i['id']}" for i in state["instances"] if i.get("kind") != "vm"]

    def forget(self) -> None:
        self.plugged.applied.clear()

    def is_plugged(self, port_id: str) -> bool:
        return port_id in self.plugged.applied

    def _instance(self, run: Pass, inst: dict[str, Any]) -> list[PortReport]:
        """The instance's veth ports (a VF is the SR-IOV driver's; ethN positions stay as ordered), plugged as one
        step: a namespace it may not use, or any failure, puts all of them in ERROR with the reason."""
        state, links = run.state, run.links
        ports = state["ports"]
        mine = [(position, ports[pid]) for position, pid in enumerate(inst["ports"])
                if pid in ports and ports[pid].get("binding:vnic_type") not in self.not_veth]  # fmt: skip
        run.wanted.update(names.tap(port["id"]) for _pos, port in mine)
        prints = [addressing.fingerprint(inst, pos, port, state["networks"][port["network_id"]], state)
                  for pos, port in mine]  # fmt: skip
        down = next(filter(None, (broken_reason(port, run.broken) for _pos, port in mine)), None)
        if down is not None:
            return [failed(port["id"], down) for _pos, port in mine]
        applied = self.plugged.applied
        current = all(applied.get(port["id"]) == fp and (not run.full or names.tap(port["id"]) in links)
                      for (_pos, port), fp in zip(mine, prints, strict=True))  # fmt: skip
        if current and (mine or not names.is_managed_ns(self.host, inst["netns"]) or netns.exists(inst["netns"])):
            return [plugged_report(port, addressing.device_name(inst, pos), self.firewall.enforced(port["id"]))
                    for pos, port in mine]  # as it is  # fmt: skip
        run.plugged += 1  # (the pool's parking waits for the next pass: this instance is reported first)
        try:
            return self.steps.run(f"instance:{inst['id']}", lambda: self._apply_instance(run.host, links, inst, state,
                                                                                       run.guard, mine, prints),
                                  tuple(prints))  # fmt: skip
        except StepFailed as exc:
            return [failed(port["id"], exc.reason) for _pos, port in mine]

    def _apply_instance(
        self, host: IPRoute, links: Links, inst: dict[str, Any], state: DesiredState,
        guard: ns_guard.InstanceNamespaces, mine: list[tuple[int, dict[str, Any]]], prints: list[tuple[Any, ...]],
    ) -> list[PortReport]:  # fmt: skip
        if names.is_managed_ns(self.host, inst["netns"]) and not netns.exists(inst["netns"]):
            netns.create(inst["netns"])  # one cloudnet provides: made here
            guard.made(inst["netns"])
        reports = []
        try:
            fd = guard.open(inst)
        except netns.NamespaceMissing:
            log.warning("instance %s: network namespace %s does not exist", inst["id"], inst["netns"])
            return [PortReport(port["id"], "DOWN", "binding_failed", {"reason": "netns missing"}) for _p, port in mine]
        try:
            for (position, port), fingerprint in zip(mine, prints, strict=True):
                if self.plugged.applied.get(port["id"]) != fingerprint or names.tap(port["id"]) not in links:
                    network = state["networks"][port["network_id"]]
                    self._plug(host, links, inst, fd, position, port, network, state, fingerprint)
                    self.plugged.applied[port["id"]] = fingerprint
                reports.append(plugged_report(port, addressing.device_name(inst, position),
                                              self.firewall.enforced(port["id"])))  # fmt: skip
        finally:
            os.close(fd)
        return reports

    def _plug(
        self,
        host: IPRoute,
        links: Links,
        inst: dict[str, Any],
        ns_fd: int,  # the instance's namespace, as ns_guard opened and checked it
        position: int,
        port: dict[str, Any],
        network: dict[str, Any],
        state: DesiredState,
        fingerprint: tuple[Any, ...],
    ) -> None:
        tap, ifname = names.tap(port["id"]), addressing.device_name(inst, position)
        address, mtu = port["mac_address"], network["mtu"]
        parked = self.plugged.parked.pop(port["id"], None)
        if parked is not None and parked.ns == inst["netns"] and parked.applied == fingerprint:
            return  # the instance took over the parked device's namespace, configured as it wants it
        bridge = self.bridges.index(host, port["network_id"])
        state_up = "up" if port["admin_state_up"] else "down"
        # A fresh plug sets what it can in the create call and looks nothing up it already knows (links.py).
        with netns.iproute(ns_fd) as inside:
            current = inside.link_lookup(ifname=ifname)
            if not current and parked is not None and parked.ns == inst["netns"] and ifname != PARKED_IFNAME:
                current = rename(inside, PARKED_IFNAME, ifname)  # a parked device taken over, named by the runtime
            if inst.get("handoff") and not current and tap in links:  # handed off: the host end is all there is
                host.link("set", index=links[tap]["index"], master=bridge, mtu=mtu, state=state_up)
                return
            plugged = bool(current) and tap in links and mac(inside.get_links(current[0])[0]) == address
            if plugged:
                idx = current[0]
                host.link("set", index=links[tap]["index"], master=bridge, mtu=mtu, state="up")
                inside.link("set", index=idx, address=address, mtu=mtu, state=state_up)
            else:
                if current:  # a stale ethN from an earlier plug: its veth pair goes with it
                    delete(inside, current[0])
                if parked is not None and parked.ns != inst["netns"]:
                    retire(host, links, port["id"], parked.ns)  # a fresh pair is cheaper than moving one in
                    self.plugged.gone_ns.add(parked.ns)
                peer = {"ifname": ifname, "address": address, "mtu": mtu}
                idx = create_veth(host, links, tap, peer, ns_fd, master=bridge)
                inside.link("set", index=idx, state=state_up)
            inside.link("set", index=1, state="up")  # lo, ifindex 1 in every namespace
            if not plugged and port["admin_state_up"]:
                wait_forwarding(host, links[tap]["index"])
            addressing.configure_addresses(inside, idx, port, fresh=not plugged)
            addressing.configure_routes(inside, idx, port, state, default=position == 0, fresh=not plugged)

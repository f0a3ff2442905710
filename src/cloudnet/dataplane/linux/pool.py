"""Pool devices on the Linux driver (--park-pool-devices): one veth per ready pool port of this host, its peer parked
as eth0 in a namespace of its own (cloudnet-ns-<hash>-<random>), configured as an instance's and reported as the
port's `prepared_netns`. An instance created without a namespace takes that namespace over whole (nothing left to
plug); one with its own gets a fresh pair made in place (`retire`: cheaper than moving eth0 in). A released device
goes back into a new namespace of its own.

Parking never holds up an instance: a pass that plugged an instance parks nothing (the instance's report goes out
first), and any other pass parks for at most PARK_BUDGET; what is left waits for the next pass, which the agent runs
at once (`unfinished`). A refill of dozens of ports is thus parked over several passes, each of which plugs the
instances that came meanwhile before it parks.
"""

from __future__ import annotations

import os
import time
from typing import Any

from pyroute2 import IPRoute

from cloudnet.dataplane import security
from cloudnet.dataplane.base import DesiredState, PortReport
from cloudnet.dataplane.kernel import addressing, netns, ns_guard
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.bridges import Bridges
from cloudnet.dataplane.linux.links import Links, create_veth, delete, index, mac, rename, wait_forwarding
from cloudnet.dataplane.linux.passes import PARKED_IFNAME, Parked, Pass, Plugged, broken_reason, plugged_report
from cloudnet.dataplane.steps import StepFailed, Steps

# Seconds of parking in one pass (a new pair in a namespace of its own, configured: ~5-40 ms each on this machine).
PARK_BUDGET = 0.05


def retire(host: IPRoute, links: Links, port_id: str, parked_ns: str) -> None:
    """Make way for a fresh pair in an instance's own namespace: the parked pair's host end goes down and out of the
    way (renamed), its namespace is removed, and the kernel destroys the pair with that namespace, off the
    instance's path. Moving the parked end in instead costs a namespace move, an RCU barrier (~16-25 ms measured
    here) where a pair made in place costs ~2-4 ms; the port's filter and bridge are in place either way."""
    tap = names.tap(port_id)
    if tap in links:
        rename(host, tap, names.retired())
        links.discard(tap)
    netns.remove(parked_ns)


class PoolDevices:
    """The pool ports job (dataplane.base.PoolPorts)."""

    def __init__(
        self, host: str, park: bool, bridges: Bridges, firewall: security.Firewall, plugged: Plugged, steps: Steps
    ) -> None:
        self.host = host
        self.park = park
        self.bridges = bridges
        self.firewall = firewall
        self.plugged = plugged
        self.steps = steps
        self.unfinished = False  # the last pass left devices to park (over its budget, or instances went first)
        self.waiting: set[str] = set()  # released devices left in their instance's namespace until then

    def step_keys(self, state: DesiredState) -> list[str]:
        return [f"pool-port:{p}" for p in state.get("pool_ports", {})]

    def forget(self) -> None:
        self.plugged.parked.clear()

    def apply(self, run: Pass) -> list[PortReport]:
        """One parked device per ready pool port of this host, each in its own namespace, reported with it
        (`prepared_netns`); devices and namespaces beyond the pool are collected. Without parking, a ready
        port still offering a namespace (parked before a restart) is reported as offering none."""
        state, parked = run.state, self.plugged.parked
        pool = state.get("pool_ports", {})
        reports = []
        self.unfinished = False
        self.waiting = set()
        until = None if run.plugged else time.monotonic() + PARK_BUDGET  # None: this pass parks nothing
        if not self.park:
            parked.clear()
            for port_id, port in sorted(pool.items()):
                if "prepared_netns" in (port.get("binding:vif_details") or {}):
                    reports.append(PortReport(port_id, "DOWN", port.get("binding:vif_type") or "unbound", {}))
            return reports
        for port_id, port in sorted(pool.items()):
            network = state["networks"].get(port["network_id"])
            if network is None:
                continue
            tap = names.tap(port_id)
            run.wanted.add(tap)
            known = parked.get(port_id)
            if known is not None:
                run.wanted_ns.add(known.ns)
            current = known is not None and known.applied == _fingerprint(known.ns, port, network, state)
            reason = broken_reason(port, run.broken)
            if reason is not None:
                reports.append(PortReport(port_id, "DOWN", "binding_failed", {"reason": reason}))
                continue
            if run.full or not current:
                offered = (port.get("binding:vif_details") or {}).get("prepared_netns")
                candidate = known.ns if known else offered if isinstance(offered, str) else None
                if until is None or time.monotonic() > until:
                    self.unfinished = True  # the next pass: its device (and where it may be parked) is kept
                    if candidate is not None:
                        run.wanted_ns.add(candidate)
                    released = self.plugged.applied.get(port_id)
                    if released is not None:  # its device waits in its released instance's namespace (_repark)
                        self.waiting.add(port_id)
                        run.wanted_ns.add(released[0])
                    if known is not None and current:  # (a full pass's check of a parked device, put off)
                        reports.append(plugged_report(port, PARKED_IFNAME, self.firewall.enforced(port_id),
                                                      prepared_netns=known.ns))  # fmt: skip
                    continue
                try:
                    ns = self.steps.run(f"pool-port:{port_id}",
                                        lambda p=port, n=network, c=candidate: self._park(run.host, run.links, p, n,
                                                                                          state, c, run.guard),
                                        _fingerprint(candidate, port, network, state))  # fmt: skip
                except StepFailed as exc:
                    reports.append(PortReport(port_id, "DOWN", "binding_failed", {"reason": exc.reason}))
                    continue
                known = parked[port_id] = Parked(ns, _fingerprint(ns, port, network, state))
            run.wanted_ns.add(known.ns)
            enforced = self.firewall.enforced(port_id)
            reports.append(plugged_report(port, PARKED_IFNAME, enforced, prepared_netns=known.ns))
        for port_id in set(parked) - set(pool):
            del parked[port_id]  # gone: its device and namespace are collected
        return reports

    def _park(
        self, host: IPRoute, links: Links, port: dict[str, Any], network: dict[str, Any], state: DesiredState,
        candidate: str | None, guard: ns_guard.InstanceNamespaces,
    ) -> str:  # fmt: skip
        """The port's device parked and configured as eth0 of a namespace of its own; returns the namespace.
        `candidate` (where it was parked before, e.g. by the agent before a restart) is reused when the device
        is still there; a released device is moved back from its instance; otherwise a new pair is made."""
        tap, address, mtu = names.tap(port["id"]), port["mac_address"], network["mtu"]
        bridge = self.bridges.index(host, port["network_id"])
        if candidate and names.is_managed_ns(self.host, candidate) and _still_parked(links, candidate, tap, address):
            ns, fresh = candidate, False
        else:
            ns = names.new_managed_ns(self.host)
            netns.create(ns)
            fresh = not self._repark(links, port, ns, guard)
            if fresh:
                if tap in links:  # its peer is lost (an instance namespace gone meanwhile, an agent restart)
                    delete(host, links[tap]["index"])
                    links.discard(tap)
                peer = {"ifname": PARKED_IFNAME, "address": address, "mtu": mtu}
                create_veth(host, links, tap, peer, ns, master=bridge)
        with netns.iproute(ns) as park:
            idx = park.link_lookup(ifname=PARKED_IFNAME)[0]
            if not fresh:
                host.link("set", index=links[tap]["index"], master=bridge, mtu=mtu, state="up")
                park.link("set", index=idx, address=address, mtu=mtu)
            park.link("set", index=idx, state="up" if port["admin_state_up"] else "down")
            if port["admin_state_up"]:
                wait_forwarding(host, links[tap]["index"])  # taken over at once, it must pass traffic at once
            addressing.configure_addresses(park, idx, port, fresh=fresh)
            addressing.configure_routes(park, idx, port, state, default=True, fresh=fresh)
        return ns

    def _repark(self, links: Links, port: dict[str, Any], ns: str, guard: ns_guard.InstanceNamespaces) -> bool:
        """A released port's device goes back to a namespace of its own (`ns`, renamed eth0) instead of being
        destroyed; its addresses and routes stay behind. False when it is not where its instance had it (or its
        namespace is not one to enter any more: checked again, as any instance namespace)."""
        applied = self.plugged.applied.pop(port["id"], None)
        if applied is None or names.tap(port["id"]) not in links:
            return False
        old, ifname, address = applied[0], applied[1], applied[2]
        try:
            old_fd = guard.open({"id": f"(released port {port['id']})", "netns": old}, claim=False)
        except (netns.NamespaceMissing, ns_guard.NamespaceRefused):
            return False
        try:
            with netns.iproute(old_fd) as inside:
                found = inside.link_lookup(ifname=ifname)
                if not found or mac(inside.get_links(found[0])[0]) != address:
                    return False
                fd = netns.fd_of(ns)
                try:
                    inside.link("set", index=found[0], state="down")
                    inside.link("set", index=found[0], net_ns_fd=fd, ifname=PARKED_IFNAME)
                finally:
                    os.close(fd)
        except netns.NamespaceMissing:
            return False
        finally:
            os.close(old_fd)
        links.refresh(names.tap(port["id"]))
        return True


def _fingerprint(ns: str | None, port: dict[str, Any], network: dict[str, Any], state: DesiredState) -> tuple[Any, ...]:
    """The configuration of a device parked as eth0 of `ns`."""
    return addressing.fingerprint({"netns": ns}, 0, port, network, state)


def _still_parked(links: Links, ns: str, tap: str, address: str) -> bool:
    """Is `ns` the parked namespace of the device whose host end is `tap` (eth0 inside, its peer)?"""
    if tap not in links:
        return False
    try:
        with netns.iproute(ns) as park:
            idx = index(park, PARKED_IFNAME)
            eth0 = None if idx is None else park.get_links(idx)[0]
    except netns.NamespaceMissing:
        return False
    return eth0 is not None and mac(eth0) == address and eth0.get_attr("IFLA_LINK") == links[tap]["index"]

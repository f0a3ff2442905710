"""The OVN driver: converges one chassis to its host's desired state (dataplane.base.Dataplane).

OVN itself realises networks, routers, NAT, security groups and port security from the NB rows the server writes;
what is left to a chassis is the edge:

    instance netns:  ethN (MAC, MTU, addresses, routes) --veth-- cno-<port>  ┐ br-int (iface-id = port id)
    metadata netns:  md0 (metadata port's IPs, 169.254.169.254) --veth-- cnl-<port>  ┤ (the network's localport)
    VM (its VMM):    virtio NIC (MAC) --tap<port id> -[qbr<port id>]- qvb ==veth== qvo<port id> ┘ (vm_ports.py)
    --uplink PHYSNET:IFACE:  IFACE a port of br-PHYSNET, named in ovn-bridge-mappings (uplinks.py)

Everything is applied from the desired state, idempotently, each instance and each network a step (steps.py);
a pass ends with the collection of this host's br-int ports, metadata namespaces and provided instance namespaces
that nothing wants any more, and with this chassis' SB row naming the networks whose metadata it serves.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from cloudnet.dataplane.base import DesiredState, PortReport, metadata_ns_prefix
from cloudnet.dataplane.kernel import netns, ns_guard
from cloudnet.dataplane.ovn import names, tapdev, veth, vm_ports
from cloudnet.dataplane.ovn.metadata import MetadataPorts
from cloudnet.dataplane.ovn.passes import OvnPass
from cloudnet.dataplane.ovn.ports import InstancePorts, subport_reports
from cloudnet.dataplane.ovn.southbound import Southbound
from cloudnet.dataplane.ovn.uplinks import Uplinks
from cloudnet.dataplane.ovn.vm_ports import VmPorts
from cloudnet.dataplane.ovn.vswitch import Vswitch
from cloudnet.dataplane.steps import DEFAULT_TIMEOUT, StepFailed, Steps
from cloudnet.namespaces import managed_ns_prefix
from cloudnet.ovn.restarts import Restarts

log = logging.getLogger(__name__)


class OvnDataplane:
    def __init__(
        self, host: str, ovs_url: str, sb_url: str, *, chassis: str | None = None, host_ns: str | None = None,
        uplinks: dict[str, str] | None = None, step_timeout: float = DEFAULT_TIMEOUT,
        vm_owner: tapdev.Owner | None = None, availability_zone: str | None = None,
    ) -> None:  # fmt: skip
        """`chassis`: this chassis' name in SB (its Open_vSwitch system-id; default the host's name); `host_ns`: the
        namespace ovs-vswitchd runs in (default the agent's own); `uplinks`: {physical network: interface};
        `vm_owner`: who may open VMs' taps (default: only a VMM with CAP_NET_ADMIN); `availability_zone`: this
        host's, in the chassis' ovn-cms-options."""
        self.host = host
        self.chassis = chassis or host
        self.host_ns = host_ns or netns.AGENT_NS
        self.steps = Steps(step_timeout)
        self.vswitch = Vswitch(ovs_url, host)
        self.sb = Southbound(sb_url, self.chassis)
        self.ports = InstancePorts(host, self.chassis)
        self.vms = VmPorts(host, self.chassis, self.host_ns, vm_owner or tapdev.Owner())
        self.metadata = MetadataPorts(host)
        self.uplinks = Uplinks(uplinks or {})
        self.zone = availability_zone
        self.restarts = Restarts.of_chassis(ovs_url)
        self._bound: set[str] = set()
        self._full_done = False
        self._kept: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())  # (ports, namespaces)

    def close(self) -> None:
        self.vswitch.close()
        self.sb.close()

    def apply_qos(self, state: DesiredState) -> bool:
        return True  # (OVN's QoS rows are the server's to write, in the northbound database: nothing here)

    def differences(self) -> list[dict[str, str]]:
        return []

    def failures(self) -> list[dict[str, Any]]:
        return self.steps.report()

    def news(self) -> bool:
        return self.sb.changed.is_set()  # (a binding of ours changed since the pass began)

    def on_news(self, wake: Callable[[], None]) -> None:
        self.sb.listen(wake)

    def unfinished(self) -> bool:
        return False  # (no pool devices prepared ahead on OVN)

    def apply(self, state: DesiredState, full: bool = True, check: bool = False) -> list[PortReport]:
        full = full or check or not self._full_done
        self.restarts.look()
        self.sb.changed.clear()  # (bindings that change from here on are seen by the next pass)
        try:
            self._bound = self.sb.bound()
        except Exception as exc:  # SB away: the last bindings seen stand until it is back (the IDL reconnects)
            log.warning("southbound database unreachable (%s): port states as last seen", exc)
        plugged = [i["id"] for i in state["instances"] if any(self.ports.is_plugged(p) for p in i["ports"])]
        guard = ns_guard.InstanceNamespaces(self.host, state["instances"], plugged)
        run = OvnPass(state, full, self.host_ns, self.vswitch, guard, self.steps, self._bound,
                      self._ours() if full else {}, read_bound=self.sb.bound)  # fmt: skip
        self.uplinks.apply(run)
        if full:  # (kept so on full passes: an operator's ovs-vsctl may have rewritten them)
            with contextlib.suppress(StepFailed):
                gateway = bool(self.uplinks.mappings)
                self.steps.run("cms-options", lambda: self.vswitch.set_cms_options(self.zone, gateway))
        reports = self.ports.apply(run) + self.vms.apply(run)
        reports += subport_reports(state, lambda p: self.ports.is_plugged(p) or self.vms.is_plugged(p), self._bound,
                                   self.chassis)  # fmt: skip
        served, metadata_reports = self.metadata.apply(run)
        reports += metadata_reports
        if full or self._went_away(run):
            with contextlib.suppress(StepFailed):
                self.steps.run("garbage", lambda: self._collect(run))
        with contextlib.suppress(StepFailed):
            self.steps.run("chassis", lambda: self.sb.publish_metadata_networks(served), tuple(served))
        self.steps.keep_only(["garbage", "chassis", "cms-options", *self.uplinks.step_keys(),
                              *self.ports.step_keys(state), *self.vms.step_keys(state),
                              *self.metadata.step_keys(state)])  # fmt: skip
        self._full_done = self._full_done or full
        self._kept = (frozenset(run.wanted), frozenset(run.wanted_ns))
        return reports

    def _went_away(self, run: OvnPass) -> bool:
        return not (self._kept[0] <= run.wanted and self._kept[1] <= run.wanted_ns)

    def _ours(self) -> dict[str, str]:
        try:
            return self.steps.run("vswitch", self.vswitch.ours)
        except StepFailed:
            return {}

    def _collect(self, run: OvnPass) -> None:
        """This host's br-int ports, devices and namespaces that nothing wants any more."""
        ours = run.ours if run.full else self.vswitch.ours()
        with netns.iproute(run.host_ns) as host:
            for name in sorted(set(ours) - run.wanted):
                if name.startswith((names.TAP, names.METADATA_LEG)):
                    self.vswitch.unplug(name)
                    veth.delete(host, name)
        vm_ports.collect(run, self.host, ours)
        for prefix in (metadata_ns_prefix(self.host), managed_ns_prefix(self.host)):
            for ns in netns.names(prefix):
                if ns not in run.wanted_ns:
                    netns.remove(ns)

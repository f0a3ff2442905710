"""The Linux dataplane driver: converges one host to its desired state.

Layout on a host (all cloudnet's devices live in the host namespace `cloudnet-host-<host>-<hash>`):

    instance netns:  ethN (MAC, MTU, addresses, routes of the port)
                       |  veth
    host netns:      cnt-<port> -- cnb-<network> (bridge) -- cnq-<port> --veth-- qr-<port>  router netns
                                   cnb-<external> (bridge) -- cng-<port> --veth-- qg-<port>  (SNAT in nftables)
                                        |
                                   uplink interface (--uplink physnet:IFACE), moved into the host netns
    a VM's NIC:      tap<port> (persistent, Nova's name, marked) on cnb-<network>: its VMM attaches (vm_ports.py)

    each network with instances here: a cloudnet-meta-... namespace on its bridge (cnm-<port> --veth-- md-<port>,
    the metadata port's addresses): the metadata proxy, and dnsmasq for its DHCP-enabled subnets (dhcp.py)
    each router with an IPv6 leg whose subnet has an ipv6_ra_mode: an advertising dnsmasq in its namespace
    (radverts.py)

    parked (with --park-pool-devices): cnt-<port> on its bridge --veth-- eth0 in cloudnet-ns-<hash>-<random>,
    one namespace per ready pool port of this host, eth0 configured as an instance's (MAC, MTU, addresses,
    routes) and reported as the port's `prepared_netns`. An instance created without a namespace of its own
    takes that namespace over whole: nothing is left to plug. An instance with its own namespace (a container
    runtime's) gets a fresh pair made in place, the parked one retired (down, renamed cnr-*, destroyed with its
    namespace): its filter is in place already. A released device is moved back into a new namespace of its own.

    cloudnet-ns-<hash>-<random> also names the namespace of an instance created without one and no parked
    device to take: the agent makes it, and removes it with the instance.

Every step checks the kernel before it changes it, so applying the same state twice changes nothing,
and an agent restarted at any point converges without touching devices that are already right.
A full pass reads every device; an incremental pass (after an event) touches only what changed since
the pass before, trusting that what it applied is still there until the next full pass.

Cost model measured on this kernel (6.18): moving a device into another namespace costs an RCU
barrier, ~16 ms whatever the device; creating a veth with its peer directly inside the target
namespace costs ~1 ms; a namespace of our own costs ~0.5 ms. Unpooled attaches therefore create the pair
in place, and so do pooled ones into a namespace the caller made, parked or not (retiring the parked pair: ~2-4 ms,
where moving it in measured 16-25 ms). A parked device taken over with its namespace needs no kernel work at all.
Parking is an option, off by default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cloudnet.dataplane import base, security
from cloudnet.dataplane.base import DesiredState, PortBinder, PortReport
from cloudnet.dataplane.kernel import netns, ns_guard
from cloudnet.dataplane.linux import firewall, names, nat, shared_ports
from cloudnet.dataplane.linux.bridges import Bridges
from cloudnet.dataplane.linux.dhcp import DhcpServers
from cloudnet.dataplane.linux.garbage import Garbage
from cloudnet.dataplane.linux.instances import NOT_VETH, InstancePorts
from cloudnet.dataplane.linux.links import Links
from cloudnet.dataplane.linux.metadata import MetadataNamespaces
from cloudnet.dataplane.linux.passes import Kept, Pass, Plugged, needed_networks
from cloudnet.dataplane.linux.pool import PoolDevices
from cloudnet.dataplane.linux.qos import PortQos
from cloudnet.dataplane.linux.radverts import RouterAdverts
from cloudnet.dataplane.linux.routers import Routers
from cloudnet.dataplane.linux.trunk_vlans import TrunkVlans
from cloudnet.dataplane.linux.vm_ports import VmPorts
from cloudnet.dataplane.steps import DEFAULT_TIMEOUT, StepFailed, Steps


class LinuxDataplane:
    """The Linux driver (dataplane.base.Dataplane): its jobs, composed in the order of dataplane.base."""

    def __init__(
        self,
        host: str,
        uplinks: dict[str, str] | None = None,
        binders: Sequence[PortBinder] = (),
        *,
        park: bool = False,
        step_timeout: float = DEFAULT_TIMEOUT,
        vm_owner: tuple[int, int] = (0, 0),
    ) -> None:
        self.host = host
        self.host_ns = names.host_ns(host)
        # Every object's work: isolated, time-bounded, retried with backoff; on a worker in the host namespace.
        self.steps = Steps(step_timeout, thread_init=lambda: netns.enter_for_good(self.host_ns))
        self.nat = nat.NatTables()
        plugged = Plugged()  # the veth devices, shared by instance ports and pool devices
        # Security groups and port security of the instance ports (and parked devices), in the host namespace.
        self.firewall: security.Firewall = firewall.NftFirewall(self.host_ns, include_pool=park)
        bridges = Bridges(self.host_ns, uplinks or {})
        self.networks: base.Networks[Pass] = bridges
        # Ports of another vnic type are plugged by their binder (SR-IOV `direct`: a VF instead of a veth).
        self.binders = list(binders)
        not_veth = NOT_VETH | {b.vnic_type for b in self.binders}
        self.ports: base.Ports[Pass] = InstancePorts(host, bridges, self.firewall, plugged, self.steps, not_veth)
        # VM NICs: a persistent tap each, owned by the VMM's user and group (uid, gid), that the VMM attaches to.
        self.vm_ports = VmPorts(host, bridges, self.firewall, self.steps, vm_owner)
        # Trunk subports: a VLAN device each on its parent's host device, on the subport network's bridge.
        self.trunks = TrunkVlans(bridges, self.firewall)
        # Pre-plumbed devices for ready pool ports (Kuryr's CNI half), each parked in a namespace of its own.
        self.pool: base.PoolPorts[Pass] = PoolDevices(host, park, bridges, self.firewall, plugged, self.steps)
        # QoS of the plugged ports: tc on their host devices, DSCP marks in nftables (qos.py).
        self.qos = PortQos(self.host_ns)
        self.metadata: base.MetadataReach[Pass] = MetadataNamespaces(host, bridges)
        # DHCP for guests that ask (VMs): a dnsmasq per network in its metadata namespace.
        self.dhcp = DhcpServers(host)
        self.routers: base.Routers[Pass] = Routers(host, bridges, self.nat)
        # Router advertisements from the routers' namespaces (a dnsmasq per router with an IPv6 leg that has a mode).
        self.adverts = RouterAdverts(host)
        self.garbage = Garbage(host, self.nat, frozenset((uplinks or {}).values()))
        self._plugged = plugged
        # The (devices, uplinks, namespaces) the last pass kept, for incremental passes (None: the next is full).
        self._kept: Kept | None = None
        self._active: list[str] = []  # the ports the last pass plugged (those whose QoS it applied)
        # Differences between the kernel and the desired state found (and repaired) by the last check (a full pass
        # that also reads back what it otherwise trusts: the agent's first, and on demand).
        self.checked: list[dict[str, str]] = []

    def close(self) -> None:
        self.dhcp.close()
        self.adverts.close()
        self._forget()

    def _jobs(self) -> tuple[base.Job, ...]:
        """Its jobs, in the order of a pass (the binders' are theirs)."""
        return (self.networks, self.ports, self.vm_ports, self.trunks, self.pool, self.metadata, self.dhcp,
                self.routers, self.adverts)  # fmt: skip

    def _forget(self) -> None:
        for job in self._jobs():
            job.forget()
        self.qos.forget()
        self._kept = None
        self.firewall.forget()

    # -- the whole state ----------------------------------------------------------------------

    def apply(self, state: DesiredState, full: bool = True, check: bool = False) -> list[PortReport]:
        """Converge the host; `full` reads and checks everything, otherwise only what changed since
        the last pass is touched (the agent runs a full pass at start and periodically). `check`: a full pass
        that also reads back the state it otherwise trusts (nftables), its differences kept in `checked`."""
        if full or check or self._kept is None:
            full = True
            if not netns.exists(self.host_ns):
                self.steps.restart()  # its worker lives in the host namespace: a new one for a new namespace
                self.firewall.forget()
            netns.ensure(self.host_ns)
        found: list[dict[str, str]] = []
        try:
            return self._apply(state, full, check, found)
        except BaseException:
            self._kept = None  # whatever happened, the next pass reads everything again
            raise
        finally:
            if check:
                self.checked = found

    def apply_qos(self, state: DesiredState) -> bool:
        """The QoS job alone (dataplane.base), on the devices the last pass plugged: a changed limit is one tc message,
        a port's first (or last) one its ifb device and redirect too."""
        if self._kept is None:
            return False  # (no pass to build on, or the last failed: the next reads everything)
        with netns.iproute(self.host_ns) as host:
            guard = ns_guard.InstanceNamespaces(self.host, [])  # (never used: QoS enters no instance's namespace)
            run = Pass(state, False, False, host, Links(host, prefetch=False), guard, self.steps, [], self._kept)
            self.qos.apply(run, self._active)
        return True

    def differences(self) -> list[dict[str, str]]:
        """What the last check found different from the desired state (and repaired)."""
        return list(self.checked)

    def failures(self) -> list[dict[str, Any]]:
        """Objects whose last step failed, with the reason (the agent puts them in its host report)."""
        return self.steps.report()

    def news(self) -> bool:
        return False  # (what it realises changes only by its own passes)

    def on_news(self, wake: Callable[[], None]) -> None:
        pass  # (it never has news)

    def unfinished(self) -> bool:
        return self.pool.unfinished

    def _is_plugged(self, port_id: str) -> bool:
        return (self.ports.is_plugged(port_id) or self.vm_ports.is_plugged(port_id)
                or any(b.is_plugged(port_id) for b in self.binders))  # fmt: skip

    def _apply(self, state: DesiredState, full: bool, check: bool, found: list[dict[str, str]]) -> list[PortReport]:
        """Every object's work is a step of its own (dataplane/steps.py): one that fails is reported failed (its
        ports ERROR) and backs off, while the others converge; what it had stays (nothing is collected for it)."""
        plugged = [i["id"] for i in state["instances"] if any(self._is_plugged(pid) for pid in i["ports"])]
        guard = ns_guard.InstanceNamespaces(self.host, state["instances"], plugged)
        with netns.iproute(self.host_ns) as host:
            run = Pass(state, full, check, host, Links(host, prefetch=full), guard, self.steps, needed_networks(state),
                       self._kept, differences=found)  # fmt: skip
            self.networks.apply(run)
            # Before any device is plugged: a port passes nothing until its filter is in place.
            run.broken.update(self.firewall.apply(state, self.steps, full, check))
            run.found("firewall", self.firewall.drift)
            reports = self.ports.apply(run)
            reports += self.vm_ports.apply(run)
            reports += self.trunks.apply(run, self._is_plugged)
            self._active = [r.port_id for r in reports if r.status == "ACTIVE" and r.vif_type != "binding_failed"]
            self.qos.apply(run, self._active)
            for binder in self.binders:
                reports += binder.apply(state, self.steps, guard)
            reports += self.pool.apply(run)
            self.metadata.apply(run)
            self.dhcp.apply(run)
            self.routers.apply(run)
            self.adverts.apply(run)
            reports += shared_ports.reports(state, self.steps, [n for n in run.networks if n not in run.broken])
            self._settle(run)
        self._plugged.keep({r.port_id for r in reports} | self.pool.waiting)
        self.vm_ports.keep({r.port_id for r in reports})
        return reports

    def _settle(self, run: Pass) -> None:
        """Collect what went away, and forget the failures of objects gone from the desired state."""
        kept = (frozenset(run.wanted), frozenset(run.uplinks), frozenset(run.wanted_ns))
        before = self._kept
        if before is not None and self._plugged.gone_ns:  # removed by the pass itself (unparked): nothing to collect
            before = (before[0], before[1], before[2] - self._plugged.gone_ns)
        self._plugged.gone_ns.clear()
        # Only something that went away leaves garbage: an incremental pass that only added skips it.
        collected = True
        if run.full or before is None or not all(b <= k for b, k in zip(before, kept, strict=True)):
            try:
                self.steps.run("garbage", lambda: self.garbage.collect(run.host, run.wanted, run.uplinks,
                                                                       run.wanted_ns, run.differences if run.full
                                                                       else []))  # fmt: skip
            except StepFailed:
                collected = False  # the next pass is a full one, and collects again
        self.steps.keep_only(self.step_keys(run.state))
        self._kept = kept if collected else None

    def step_keys(self, state: DesiredState) -> list[str]:
        """The step keys of every object of the desired state (failures of others are forgotten)."""
        keys = ["garbage", *self.firewall.step_keys(), *self.qos.step_keys(state)]
        for job in (*self._jobs(), *self.binders):
            keys += job.step_keys(state)
        return keys

    def teardown(self) -> None:
        """Remove everything of this host (routers, then the host namespace with its devices)."""
        self.garbage.teardown()
        self.dhcp.teardown()  # (after its namespaces went: a watcher elsewhere has nowhere to restart it)
        self.adverts.teardown()
        self.steps.restart()
        self._forget()

"""The Linux dataplane driver: converges one host to its desired state.

Layout on a host (all cloudnet's devices live in the host namespace `cloudnet-host-<host>-<hash>`):

    instance netns:  ethN (MAC, MTU, addresses, routes of the port)
                       |  veth
    host netns:      cnt-<port> -- cnb-<network> (bridge) -- cnq-<port> --veth-- qr-<port>  router netns
                                   cnb-<external> (bridge) -- cng-<port> --veth-- qg-<port>  (SNAT in nftables)
                                        |
                                   uplink interface (--uplink physnet:IFACE), moved into the host netns

    parked (with --park-pool-devices): cnt-<port> on its bridge --veth-- eth0 in cloudnet-ns-<hash>-<random>,
    one namespace per ready pool port of this host, eth0 configured as an instance's (MAC, MTU, addresses,
    routes) and reported as the port's `prepared_netns`. An instance created without a namespace of its own
    takes that namespace over whole: nothing is left to plug. An instance with its own namespace gets eth0
    moved in (renamed ethN). A released device is moved back into a new namespace of its own.

    cloudnet-ns-<hash>-<random> also names the namespace of an instance created without one and no parked
    device to take: the agent makes it, and removes it with the instance.

Every step checks the kernel before it changes it, so applying the same state twice changes nothing,
and an agent restarted at any point converges without touching devices that are already right.
A full pass reads every device; an incremental pass (after an event) touches only what changed since
the pass before, trusting that what it applied is still there until the next full pass.

Cost model measured on this kernel (6.18): moving a device into another namespace costs an RCU
barrier, ~16 ms whatever the device; creating a veth with its peer directly inside the target
namespace costs ~1 ms; a namespace of our own costs ~0.5 ms. Unpooled attaches therefore create the pair
in place. A parked device taken over with its namespace needs no kernel work at all, but one moved into a
namespace the caller made costs the move: parking is an option, off by default.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet.dataplane import security
from cloudnet.dataplane.base import DesiredState, PortReport
from cloudnet.dataplane.linux import firewall, names, nat, netns, nft, ns_guard, router_ns, routes, shared_ports
from cloudnet.dataplane.steps import DEFAULT_TIMEOUT, StepFailed, Steps

if TYPE_CHECKING:  # the SR-IOV driver builds on this module's helpers
    from cloudnet.dataplane.sriov import SriovDataplane

log = logging.getLogger(__name__)
IFA_F_NODAD = 0x02
METADATA_IPS = [("169.254.169.254", 32), ("fe80::a9fe:a9fe", 128)]


def _ifname(msg: Any) -> str:
    return str(msg.get("ifname") or msg.get_attr("IFLA_IFNAME"))


def _links(ipr: IPRoute) -> dict[str, Any]:
    return {_ifname(m): m for m in ipr.get_links()}


def _index(ipr: IPRoute, ifname: str) -> int | None:
    found = ipr.link_lookup(ifname=ifname)
    return found[0] if found else None


def _metadata_hop(state: DesiredState, network_id: str, subnet_id: str) -> str | None:
    """The metadata port's IPv4 address on this subnet: the next hop towards 169.254.169.254."""
    port = state["networks"].get(network_id, {}).get("metadata_port")
    for f in (port or {}).get("fixed_ips", []):
        if f["subnet_id"] == subnet_id and ":" not in f["ip_address"]:
            return str(f["ip_address"])
    return None


def _mac(msg: Any) -> str:
    return str(msg.get("address") or msg.get_attr("IFLA_ADDRESS") or "")


def _delete(ipr: IPRoute, index: int) -> None:
    """Delete a link that may already be gone (deleting one end of a veth takes its peer along)."""
    try:
        ipr.link("del", index=index)
    except NetlinkError as exc:
        if exc.code != 19:  # ENODEV
            raise


def _wait_forwarding(host: IPRoute, index: int, limit: float = 0.5) -> None:
    """Wait until a freshly plugged veth's host end is operationally up, i.e. the kernel's link watcher
    has seen the carrier and the bridge forwards on the port. An address given to the guest before that
    lets its first ARP request be dropped, and the kernel asks again only after 1 s (measured: 2 in 80
    plugs took 1 s without this wait, none with it)."""
    deadline = time.monotonic() + limit
    while host.get_links(index)[0].get_attr("IFLA_OPERSTATE") != "UP" and time.monotonic() < deadline:
        time.sleep(0.0005)


class _Links:
    """The host namespace's links by name: all read at once (a full pass), or looked up one by one
    as they are asked for (an incremental pass, which touches only what changed)."""

    def __init__(self, ipr: IPRoute, prefetch: bool) -> None:
        self._ipr = ipr
        self._known: dict[str, Any] = _links(ipr) if prefetch else {}
        self._complete = prefetch

    def get(self, name: str) -> Any | None:
        msg = self._known.get(name)
        if msg is not None or self._complete:
            return msg
        try:
            msg = self._ipr.link("get", ifname=name)[0]
        except NetlinkError as exc:
            if exc.code != 19:
                raise
            return None
        self._known[name] = msg
        return msg

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def __getitem__(self, name: str) -> Any:
        msg = self.get(name)
        if msg is None:
            raise KeyError(name)
        return msg

    def __setitem__(self, name: str, msg: Any) -> None:
        self._known[name] = msg

    def pop(self, name: str) -> Any:
        msg = self[name]
        del self._known[name]
        return msg

    def discard(self, name: str) -> None:
        """`name` was deleted."""
        self._known.pop(name, None)

    def refresh(self, name: str) -> None:
        self._known[name] = self._ipr.link("get", ifname=name)[0]


def _fingerprint_of(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, default=str)


def _plugged(port: dict[str, Any], position: int, filtered: bool, **more: Any) -> PortReport:
    tap = names.tap(port["id"])
    details = {"bridge_name": names.bridge(port["network_id"]), "tap": tap, "ifname": f"eth{position}",
               "port_filter": filtered, **more}  # fmt: skip
    return PortReport(port["id"], "ACTIVE" if port["admin_state_up"] else "DOWN", "bridge", details)


def _broken_reason(port: dict[str, Any], broken: dict[str, str]) -> str | None:
    """Why the port cannot be plugged (its filter, or its network's bridge, is not in place); None: it can."""
    return broken.get(port["id"]) or broken.get(port["network_id"])


def _failed(port_id: str, reason: str) -> PortReport:
    return PortReport(port_id, "ERROR", "binding_failed", {"reason": reason})


@dataclass(frozen=True)
class _Parked:
    """A ready pool port's device, parked as eth0 in a namespace of its own."""

    ns: str
    applied: tuple[Any, ...]  # the instance fingerprint of what is configured inside, as eth0 of `ns`


class LinuxDataplane:
    def __init__(
        self,
        host: str,
        uplinks: dict[str, str] | None = None,
        sriov: SriovDataplane | None = None,
        *,
        park: bool = False,
        step_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.host = host
        self.host_ns = names.host_ns(host)
        self.router_prefix = names.router_ns_prefix(host)
        self.metadata_prefix = names.metadata_ns_prefix(host)
        self.park_ns = names.park_ns(host)  # the shared holding namespace of earlier versions: removed
        self.managed_prefix = names.managed_ns_prefix(host)
        self.uplinks = dict(uplinks or {})
        # Direct (SR-IOV) ports are plugged by their own driver: a VF instead of a veth.
        self.sriov = sriov
        # Pre-plumbed devices for ready pool ports (Kuryr's CNI half), each parked in a namespace of its own.
        self.park = park
        # port id -> fingerprint of the configuration last applied inside the instance; lets a
        # reconcile skip entering namespaces whose ports have not changed.
        self._applied: dict[str, tuple[Any, ...]] = {}
        # What the last pass applied, for incremental passes: bridge -> (mtu, index), parked port -> its
        # namespace and configuration, "metadata:<net>"/"router:<id>" -> (fingerprint, devices it wants, its
        # namespace), and the (devices, uplinks, namespaces) the last pass kept.
        self._bridges: dict[str, tuple[int, int]] = {}  # bridge -> (mtu, ifindex)
        self._parked: dict[str, _Parked] = {}
        self._done: dict[str, tuple[str, frozenset[str], str]] = {}
        self._kept: tuple[frozenset[str], frozenset[str], frozenset[str]] | None = None
        self.nat = nat.NatTables()
        # Security groups and port security of the instance ports (and parked devices), in the host namespace.
        self.firewall: security.Firewall = firewall.NftFirewall(self.host_ns, include_pool=park)
        # Differences between the kernel and the desired state found (and repaired) by the running pass, and by the
        # last check (a full pass that also reads back what it otherwise trusts: the agent's first, and on demand).
        self._checking = False
        self._differences: list[dict[str, str]] = []
        self.checked: list[dict[str, str]] = []
        # Every object's work: isolated, time-bounded, retried with backoff; on a worker in the host namespace.
        self.steps = Steps(step_timeout, thread_init=lambda: netns.enter_for_good(self.host_ns))

    def close(self) -> None:
        self._forget()

    def _forget(self) -> None:
        self._applied.clear()
        self._bridges.clear()
        self._parked.clear()
        self._done.clear()
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
        self._checking, self._differences = check, []
        try:
            return self._apply(state, full)
        except BaseException:
            self._kept = None  # whatever happened, the next pass reads everything again
            raise
        finally:
            if check:
                self.checked = self._differences
            self._checking = False

    def differences(self) -> list[dict[str, str]]:
        """What the last check found different from the desired state (and repaired)."""
        return list(self.checked)

    def _found(self, key: str, differences: list[str]) -> None:
        for difference in differences:
            log.warning("%s: %s (repaired)", key, difference)
            self._differences.append({"object": key, "difference": difference})

    def _is_plugged(self, port_id: str) -> bool:
        return port_id in self._applied or (self.sriov is not None and self.sriov.is_plugged(port_id))

    def failures(self) -> list[dict[str, Any]]:
        """Objects whose last step failed, with the reason (the agent puts them in its host report)."""
        return self.steps.report()

    def _apply(self, state: DesiredState, full: bool) -> list[PortReport]:
        """Every object's work is a step of its own (dataplane/steps.py): one that fails is reported failed (its
        ports ERROR) and backs off, while the others converge; what it had stays (nothing is collected for it)."""
        reports: list[PortReport] = []
        plugged = [i["id"] for i in state["instances"] if any(self._is_plugged(pid) for pid in i["ports"])]
        guard = ns_guard.InstanceNamespaces(self.host, state["instances"], plugged)
        run = self.steps.run
        with netns.iproute(self.host_ns) as host:
            links = _Links(host, prefetch=full)
            wanted: set[str] = set()
            wanted_ns: set[str] = set()
            networks = self._needed_networks(state)
            broken: dict[str, str] = {}  # network id -> why its bridge is not there; port id -> why it is not filtered
            for net_id in networks:
                network = state["networks"][net_id]
                wanted.add(names.bridge(net_id))
                try:
                    run(f"network:{net_id}", lambda n=network: self._ensure_bridge(host, links, n, full),
                        network["mtu"])  # fmt: skip
                except StepFailed as exc:
                    broken[net_id] = f"network {net_id}: {exc.reason}"
            try:
                uplinks = run("uplinks", lambda: self._ensure_uplinks(host, state, networks))
            except StepFailed:
                uplinks = set(self._kept[1]) if self._kept else set(self.uplinks.values())  # none handed back
            # Before any device is plugged: a port passes nothing until its filter is in place.
            broken.update(self.firewall.apply(state, self.steps, full, self._checking))
            self._found("firewall", self.firewall.drift)
            for inst in state["instances"]:
                if names.is_managed_ns(self.host, inst["netns"]):  # one cloudnet provides: made here
                    wanted_ns.add(inst["netns"])
                reports += self._instance(host, links, inst, state, wanted, full, guard, broken)
            if self.sriov is not None:
                reports += self.sriov.apply(state, self.steps, guard)
            reports += self._apply_parked(host, links, state, wanted, wanted_ns, full, guard, broken)
            for net_id in networks:
                network = state["networks"][net_id]
                if network.get("metadata_port") and net_id not in broken:
                    leg, ns = names.metadata_leg(network["metadata_port"]["id"]), names.metadata_ns(self.host, net_id)
                    wanted.add(leg)  # (kept whatever happens to the step)
                    wanted_ns.add(ns)
                    with contextlib.suppress(StepFailed):
                        run(f"metadata:{net_id}", lambda n=network: self._apply_metadata(host, links, n, wanted, full),
                            _fingerprint_of(network))  # fmt: skip
            # Full passes drop neighbour entries naming no port of the host: which ports there are, once a pass.
            neighbours = router_ns.known_neighbours(state) if full and state["routers"] else {}
            for router in state["routers"]:
                wanted_ns.add(names.router_ns(self.host, router["id"]))
                wanted.update(self._router_legs(router))
                with contextlib.suppress(StepFailed):
                    run(f"router:{router['id']}", lambda r=router: self._apply_router(host, links, r, state, wanted,
                                                                                     full, neighbours))  # fmt: skip
            reports += shared_ports.reports(state, self.steps, [n for n in networks if n not in broken])
            kept = (frozenset(wanted), frozenset(uplinks), frozenset(wanted_ns))
            before = self._kept
            # Only something that went away leaves garbage: an incremental pass that only added skips it.
            collected = True
            if full or before is None or not all(b <= k for b, k in zip(before, kept, strict=True)):
                try:
                    run("garbage", lambda: self._collect(host, wanted, uplinks, wanted_ns, report=full))
                except StepFailed:
                    collected = False  # the next pass is a full one, and collects again
            self.steps.keep_only(self._step_keys(state, networks))
            self._kept = kept if collected else None
            self._done = {k: v for k, v in self._done.items() if v[2] in wanted_ns}
            self._bridges = {k: v for k, v in self._bridges.items() if k in wanted}
        live = {r.port_id for r in reports}
        self._applied = {k: v for k, v in self._applied.items() if k in live}
        return reports

    def _step_keys(self, state: DesiredState, networks: list[str]) -> list[str]:
        """The step keys of every object of the desired state (failures of others are forgotten)."""
        keys = ["uplinks", "garbage", *(f"network:{n}" for n in networks), *(f"metadata:{n}" for n in networks)]
        keys += [f"instance:{i['id']}" for i in state["instances"]]
        keys += [f"pool-port:{p}" for p in state.get("pool_ports", {})]
        keys += [f"router:{r['id']}" for r in state["routers"]]
        keys += self.firewall.step_keys()
        if self.sriov is not None:
            keys += self.sriov.step_keys(state)
        return keys

    @staticmethod
    def _router_legs(router: dict[str, Any]) -> set[str]:
        """The host ends of a router's legs (kept while its step fails: what it had stays)."""
        gw = router["gateway"]["port_id"] if router["gateway"] else None
        return {names.gateway_leg(pid) if pid == gw else names.router_leg(pid) for pid in router["ports"]}

    @staticmethod
    def _needed_networks(state: DesiredState) -> list[str]:
        ids = {p["network_id"] for p in state["ports"].values()}
        ids |= {p["network_id"] for p in state.get("pool_ports", {}).values()}
        for r in state["routers"]:
            ids |= {p["network_id"] for p in r["ports"].values()}
        return sorted(i for i in ids if i in state["networks"])

    def _ensure_bridge(self, host: IPRoute, links: _Links, network: dict[str, Any], full: bool) -> str:
        name = names.bridge(network["id"])
        if not full and self._bridges.get(name, (None,))[0] == network["mtu"]:
            return name
        if name not in links:
            host.link("add", ifname=name, kind="bridge")
            links.refresh(name)
        msg = links[name]
        if msg.get("mtu") != network["mtu"] or msg.get("state") != "up":
            host.link("set", index=msg["index"], mtu=network["mtu"], state="up")
        self._bridges[name] = (network["mtu"], msg["index"])
        return name

    def _bridge_index(self, host: IPRoute, network_id: str) -> int | None:
        """The network's bridge, as this pass's `_ensure_bridge` left it (no netlink round trip)."""
        known = self._bridges.get(names.bridge(network_id))
        return known[1] if known else _index(host, names.bridge(network_id))

    def _ensure_uplinks(self, host: IPRoute, state: DesiredState, networks: list[str]) -> set[str]:
        """Bridge each external flat network to the interface mapped to its physical network."""
        used: set[str] = set()
        for net_id in networks:
            net = state["networks"][net_id]
            iface = self.uplinks.get(net.get("physical_network") or "")
            if not net["router_external"] or not iface or net["network_type"] != "flat":
                continue
            idx = _index(host, iface)
            if idx is None:
                with netns.iproute(None) as root:
                    ridx = _index(root, iface)
                    if ridx is None:
                        log.error("uplink %s for %s not found", iface, net.get("physical_network"))
                        continue
                    fd = netns.fd_of(self.host_ns)
                    try:
                        root.link("set", index=ridx, net_ns_fd=fd)
                    finally:
                        os.close(fd)
                idx = _index(host, iface)
            bridge = self._bridge_index(host, net_id)
            host.link("set", index=idx, master=bridge, state="up")
            used.add(iface)
        return used

    # -- instances ----------------------------------------------------------------------------

    def _instance(
        self, host: IPRoute, links: _Links, inst: dict[str, Any], state: DesiredState, wanted: set[str], full: bool,
        guard: ns_guard.InstanceNamespaces, broken: dict[str, str],
    ) -> list[PortReport]:  # fmt: skip
        """The instance's veth ports (a VF is the SR-IOV driver's; ethN positions stay as ordered), plugged as one
        step: a namespace it may not use, or any failure, puts all of them in ERROR with the reason."""
        mine = [(position, state["ports"][pid]) for position, pid in enumerate(inst["ports"])
                if pid in state["ports"] and state["ports"][pid].get("binding:vnic_type") != "direct"]  # fmt: skip
        wanted.update(names.tap(port["id"]) for _pos, port in mine)
        prints = [self._fingerprint(inst, pos, port, state["networks"][port["network_id"]], state)
                  for pos, port in mine]  # fmt: skip
        down = next(filter(None, (_broken_reason(port, broken) for _pos, port in mine)), None)
        if down is not None:
            return [_failed(port["id"], down) for _pos, port in mine]
        current = all(self._applied.get(port["id"]) == fp and (not full or names.tap(port["id"]) in links)
                      for (_pos, port), fp in zip(mine, prints, strict=True))  # fmt: skip
        if current and (mine or not names.is_managed_ns(self.host, inst["netns"]) or netns.exists(inst["netns"])):
            return [_plugged(port, pos, self.firewall.enforced(port["id"])) for pos, port in mine]  # nothing to do
        try:
            return self.steps.run(f"instance:{inst['id']}", lambda: self._apply_instance(host, links, inst, state,
                                                                                       guard, mine, prints),
                                  tuple(prints))  # fmt: skip
        except StepFailed as exc:
            return [_failed(port["id"], exc.reason) for _pos, port in mine]

    def _apply_instance(
        self, host: IPRoute, links: _Links, inst: dict[str, Any], state: DesiredState,
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
                if self._applied.get(port["id"]) != fingerprint or names.tap(port["id"]) not in links:
                    network = state["networks"][port["network_id"]]
                    self._plug(host, links, inst, fd, position, port, network, state, fingerprint)
                    self._applied[port["id"]] = fingerprint
                reports.append(_plugged(port, position, self.firewall.enforced(port["id"])))
        finally:
            os.close(fd)
        return reports

    @staticmethod
    def _fingerprint(
        inst: dict[str, Any], position: int, port: dict[str, Any], network: dict[str, Any], state: DesiredState
    ) -> tuple[Any, ...]:
        ips = tuple(sorted((f["ip_address"], f["prefixlen"]) for f in port["fixed_ips"]))
        subnets = tuple(
            sorted(
                (s["gateway_ip"] or "", str(s["host_routes"]))
                for s in (state["subnets"].get(f["subnet_id"]) for f in port["fixed_ips"])
                if s
            )
        )
        hops = tuple(_metadata_hop(state, port["network_id"], f["subnet_id"]) for f in port["fixed_ips"])
        return (
            inst["netns"],
            position,
            port["mac_address"],
            network["mtu"],
            port["admin_state_up"],
            ips,
            subnets,
            hops,
        )

    def _plug(
        self,
        host: IPRoute,
        links: _Links,
        inst: dict[str, Any],
        ns_fd: int,  # the instance's namespace, as ns_guard opened and checked it
        position: int,
        port: dict[str, Any],
        network: dict[str, Any],
        state: DesiredState,
        fingerprint: tuple[Any, ...],
    ) -> None:
        tap, ifname, mac, mtu = names.tap(port["id"]), f"eth{position}", port["mac_address"], network["mtu"]
        parked = self._parked.pop(port["id"], None)
        if parked is not None and parked.ns == inst["netns"] and parked.applied == fingerprint:
            return  # the instance took over the parked device's namespace, configured as it wants it
        bridge = self._bridge_index(host, port["network_id"])
        state_up = "up" if port["admin_state_up"] else "down"
        # Every netlink round trip through pyroute2 costs ~0.3-0.7 ms of Python, several times what the
        # kernel does: a fresh plug sets what it can in the create call and looks nothing up it already knows.
        with netns.iproute(ns_fd) as guest:
            current = guest.link_lookup(ifname=ifname)
            plugged = bool(current) and tap in links and _mac(guest.get_links(current[0])[0]) == mac
            if plugged:
                idx = current[0]
                host.link("set", index=links[tap]["index"], master=bridge, mtu=mtu, state="up")
                guest.link("set", index=idx, address=mac, mtu=mtu, state=state_up)
            else:
                if current:  # a stale ethN from an earlier plug: its veth pair goes with it
                    _delete(guest, current[0])
                unparked = None
                if parked is not None and parked.ns != inst["netns"]:
                    unparked = self._unpark(links, port, parked.ns, ns_fd, ifname)
                if unparked is None:
                    peer = {"ifname": ifname, "address": mac, "mtu": mtu}
                    idx = self._create_veth(host, links, tap, peer, ns_fd, master=bridge)
                    guest.link("set", index=idx, state=state_up)
                else:
                    idx = unparked
                    host.link("set", index=links[tap]["index"], master=bridge, mtu=mtu, state="up")
                    guest.link("set", index=idx, address=mac, mtu=mtu, state=state_up)
            guest.link("set", index=1, state="up")  # lo, ifindex 1 in every namespace
            if not plugged and port["admin_state_up"]:
                _wait_forwarding(host, links[tap]["index"])
            self._configure_addresses(guest, idx, port, fresh=not plugged)
            self._configure_routes(guest, idx, port, state, default=position == 0, fresh=not plugged)

    @staticmethod
    def _create_veth(
        host: IPRoute, links: _Links, name: str, peer: dict[str, Any], namespace: str | int, master: int | None = None
    ) -> int:
        """A veth pair: `name` in the host namespace (on bridge `master`, up, when given), the peer created
        directly inside `namespace` (with its name, and MAC and MTU when given): no namespace move, so no
        RCU barrier. Returns the peer's ifindex in `namespace`."""
        host_end: dict[str, Any] = {}
        if master is not None:
            host_end = {"master": master, "state": "up", **({"mtu": peer["mtu"]} if "mtu" in peer else {})}
        fd = netns.fd_of(namespace)
        try:
            for attempt in range(2):
                try:
                    host.link("add", ifname=name, kind="veth", peer={**peer, "net_ns_fd": fd}, **host_end)
                    break
                except NetlinkError as exc:
                    if exc.code != 17 or attempt:  # EEXIST: a leftover of an interrupted plug, removed once
                        raise
                    for stale in (name, peer["ifname"]):  # (a peer may have been left in the host namespace)
                        index = _index(host, stale)
                        if index is not None:
                            _delete(host, index)
                    links.discard(name)
        finally:
            os.close(fd)
        links.refresh(name)
        return int(links[name].get_attr("IFLA_LINK"))  # a veth's link is its peer

    # -- parked pool devices --------------------------------------------------------------------

    def _unpark(self, links: _Links, port: dict[str, Any], parked_ns: str, ns: int, ifname: str) -> int | None:
        """Attach a parked device to an instance with a namespace of its own: one move (renamed ethN on the
        way; its addresses stay behind). Its ifindex in the instance, or None when it is not there any more.
        The parked namespace, empty now, goes."""
        tap = names.tap(port["id"])
        try:
            with netns.iproute(parked_ns) as park:
                found = park.link_lookup(ifname="eth0")
                if not found or tap not in links:
                    return None
                park.link("set", index=found[0], net_ns_fd=ns, ifname=ifname)
        except netns.NamespaceMissing:
            return None
        finally:
            netns.remove(parked_ns)
        links.refresh(tap)
        return int(links[tap].get_attr("IFLA_LINK"))

    def _apply_parked(
        self, host: IPRoute, links: _Links, state: DesiredState, wanted: set[str], wanted_ns: set[str], full: bool,
        guard: ns_guard.InstanceNamespaces, broken: dict[str, str],
    ) -> list[PortReport]:  # fmt: skip
        """One parked device per ready pool port of this host, each in its own namespace, reported with it
        (`prepared_netns`); devices and namespaces beyond the pool are collected. Without parking, a ready
        port still offering a namespace (parked before a restart) is reported as offering none."""
        pool = state.get("pool_ports", {})
        reports = []
        if not self.park:
            self._parked.clear()
            for port_id, port in sorted(pool.items()):
                if "prepared_netns" in (port.get("binding:vif_details") or {}):
                    reports.append(PortReport(port_id, "DOWN", port.get("binding:vif_type") or "unbound", {}))
            return reports
        for port_id, port in sorted(pool.items()):
            network = state["networks"].get(port["network_id"])
            if network is None:
                continue
            tap = names.tap(port_id)
            wanted.add(tap)
            known = self._parked.get(port_id)
            if known is not None:
                wanted_ns.add(known.ns)
            current = known is not None and known.applied == self._fingerprint({"netns": known.ns}, 0, port,
                                                                                network, state)  # fmt: skip
            reason = _broken_reason(port, broken)
            if reason is not None:
                reports.append(PortReport(port_id, "DOWN", "binding_failed", {"reason": reason}))
                continue
            if full or not current:
                offered = (port.get("binding:vif_details") or {}).get("prepared_netns")
                candidate = known.ns if known else offered if isinstance(offered, str) else None
                try:
                    ns = self.steps.run(f"pool-port:{port_id}",
                                        lambda p=port, n=network, c=candidate: self._park(host, links, p, n, state, c,
                                                                                          guard),
                                        self._fingerprint({"netns": candidate}, 0, port, network, state))  # fmt: skip
                except StepFailed as exc:
                    reports.append(PortReport(port_id, "DOWN", "binding_failed", {"reason": exc.reason}))
                    continue
                known = self._parked[port_id] = _Parked(ns, self._fingerprint({"netns": ns}, 0, port, network, state))
            wanted_ns.add(known.ns)
            reports.append(_plugged(port, 0, self.firewall.enforced(port_id), prepared_netns=known.ns))
        for port_id in set(self._parked) - set(pool):
            del self._parked[port_id]  # gone: its device and namespace are collected
        return reports

    def _park(
        self, host: IPRoute, links: _Links, port: dict[str, Any], network: dict[str, Any], state: DesiredState,
        candidate: str | None, guard: ns_guard.InstanceNamespaces,
    ) -> str:  # fmt: skip
        """The port's device parked and configured as eth0 of a namespace of its own; returns the namespace.
        `candidate` (where it was parked before, e.g. by the agent before a restart) is reused when the device
        is still there; a released device is moved back from its instance; otherwise a new pair is made."""
        tap, mac, mtu = names.tap(port["id"]), port["mac_address"], network["mtu"]
        bridge = self._bridge_index(host, port["network_id"])
        if candidate and names.is_managed_ns(self.host, candidate) and self._still_parked(links, candidate, tap, mac):
            ns, fresh = candidate, False
        else:
            ns = names.new_managed_ns(self.host)
            netns.create(ns)
            fresh = not self._repark(links, port, ns, guard)
            if fresh:
                if tap in links:  # its peer is lost (an instance namespace gone meanwhile, an agent restart)
                    _delete(host, links[tap]["index"])
                    links.discard(tap)
                self._create_veth(host, links, tap, {"ifname": "eth0", "address": mac, "mtu": mtu}, ns, master=bridge)
        with netns.iproute(ns) as park:
            idx = park.link_lookup(ifname="eth0")[0]
            if not fresh:
                host.link("set", index=links[tap]["index"], master=bridge, mtu=mtu, state="up")
                park.link("set", index=idx, address=mac, mtu=mtu)
            park.link("set", index=idx, state="up" if port["admin_state_up"] else "down")
            if port["admin_state_up"]:
                _wait_forwarding(host, links[tap]["index"])  # taken over at once, it must pass traffic at once
            self._configure_addresses(park, idx, port, fresh=fresh)
            self._configure_routes(park, idx, port, state, default=True, fresh=fresh)
        return ns

    @staticmethod
    def _still_parked(links: _Links, ns: str, tap: str, mac: str) -> bool:
        """Is `ns` the parked namespace of the device whose host end is `tap` (eth0 inside, its peer)?"""
        if tap not in links:
            return False
        try:
            with netns.iproute(ns) as park:
                index = _index(park, "eth0")
                eth0 = None if index is None else park.get_links(index)[0]
        except netns.NamespaceMissing:
            return False
        return eth0 is not None and _mac(eth0) == mac and eth0.get_attr("IFLA_LINK") == links[tap]["index"]

    def _repark(self, links: _Links, port: dict[str, Any], ns: str, guard: ns_guard.InstanceNamespaces) -> bool:
        """A released port's device goes back to a namespace of its own (`ns`, renamed eth0) instead of being
        destroyed; its addresses and routes stay behind. False when it is not where its instance had it (or its
        namespace is not one to enter any more: checked again, as any instance namespace)."""
        applied = self._applied.pop(port["id"], None)
        if applied is None or names.tap(port["id"]) not in links:
            return False
        old, position, mac = applied[0], applied[1], applied[2]
        try:
            old_fd = guard.open({"id": f"(released port {port['id']})", "netns": old}, claim=False)
        except (netns.NamespaceMissing, ns_guard.NamespaceRefused):
            return False
        try:
            with netns.iproute(old_fd) as guest:
                found = guest.link_lookup(ifname=f"eth{position}")
                if not found or _mac(guest.get_links(found[0])[0]) != mac:
                    return False
                fd = netns.fd_of(ns)
                try:
                    guest.link("set", index=found[0], state="down")
                    guest.link("set", index=found[0], net_ns_fd=fd, ifname="eth0")
                finally:
                    os.close(fd)
        except netns.NamespaceMissing:
            return False
        finally:
            os.close(old_fd)
        links.refresh(names.tap(port["id"]))
        return True

    @staticmethod
    def _configure_addresses(
        ipr: IPRoute, idx: int, port: dict[str, Any], extra: list[tuple[str, int]] | None = None, fresh: bool = False
    ) -> None:
        """The port's addresses on device `idx`, others removed; `fresh`: the device was just made (no
        address of ours yet, so nothing to read)."""
        wanted = {(f["ip_address"], f["prefixlen"]) for f in port["fixed_ips"]} | set(extra or [])
        have = set() if fresh else {
            (a.get("address") or a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in ipr.get_addr(index=idx)
        }  # fmt: skip
        for addr, plen in have - wanted:
            if ipaddress.ip_address(addr).is_link_local:  # the kernel's own fe80:: address stays
                continue
            ipr.addr("del", index=idx, address=addr, prefixlen=plen)
        for addr, plen in sorted(wanted - have):
            v6 = ipaddress.ip_address(addr).version == 6
            ipr.addr("add", index=idx, address=addr, prefixlen=plen, **({"flags": IFA_F_NODAD} if v6 else {}))

    @staticmethod
    def _configure_routes(
        ipr: IPRoute, idx: int, port: dict[str, Any], state: DesiredState, default: bool, fresh: bool = False
    ) -> None:
        """The port's routes on device `idx` (its own, tagged: routes.PROTO), and none of its own besides; `fresh`:
        the device was just made (none of its routes can exist yet). One route a destination: the last wins."""
        wanted: dict[tuple[int, str], routes.Route] = {}
        for f in port["fixed_ips"]:
            subnet = state["subnets"].get(f["subnet_id"])
            if not subnet:
                continue
            found = []
            if default and subnet["gateway_ip"]:
                default_dst = "::/0" if subnet["ip_version"] == 6 else "0.0.0.0/0"
                found.append(routes.route(default_dst, subnet["gateway_ip"], idx))
            metadata_hop = _metadata_hop(state, port["network_id"], f["subnet_id"])
            if default and metadata_hop:
                found.append(routes.route("169.254.169.254/32", metadata_hop, idx))
            found += [routes.route(r["destination"], r["nexthop"], idx) for r in subnet["host_routes"]]
            wanted.update({(r[0], r[1]): r for r in found})
        routes.converge(ipr, wanted.values(), mine=routes.cloudnets, oifs={idx}, read=not fresh)

    # -- metadata -----------------------------------------------------------------------------

    def _unchanged(self, key: str, fingerprint: str, wanted: set[str]) -> str | None:
        """For an incremental pass: the namespace of a part applied before with this fingerprint (its
        devices counted as wanted), or None when it must be applied."""
        done = self._done.get(key)
        if done is None or done[0] != fingerprint:
            return None
        wanted.update(done[1])
        return done[2]

    def _apply_metadata(
        self, host: IPRoute, links: _Links, network: dict[str, Any], wanted: set[str], full: bool
    ) -> str:
        """The network's metadata namespace: on its bridge with the metadata port's addresses and
        169.254.169.254 (and fe80::a9fe:a9fe), where the metadata proxy listens."""
        key, fingerprint = f"metadata:{network['id']}", _fingerprint_of(network)
        if not full and (known := self._unchanged(key, fingerprint, wanted)) is not None:
            return known
        port = network["metadata_port"]
        ns = names.metadata_ns(self.host, network["id"])
        netns.ensure(ns)
        leg = names.metadata_leg(port["id"])
        wanted.add(leg)
        with netns.iproute(ns) as meta:
            self._ensure_leg(host, links, meta, ns, leg, names.metadata_iface(port["id"]), port, network, METADATA_IPS)
        self._done[key] = (fingerprint, frozenset({leg}), ns)
        return ns

    # -- routers ------------------------------------------------------------------------------

    def _apply_router(
        self, host: IPRoute, links: _Links, router: dict[str, Any], state: DesiredState, wanted: set[str], full: bool,
        neighbours: dict[str, str],
    ) -> str:  # fmt: skip
        nets = {p["network_id"]: state["networks"].get(p["network_id"]) for p in router["ports"].values()}
        subnet_ids = {f["subnet_id"] for p in router["ports"].values() for f in p["fixed_ips"]}
        key = f"router:{router['id']}"
        fingerprint = _fingerprint_of(router, nets, {i: state["subnets"].get(i) for i in sorted(subnet_ids)})
        if not full and (known := self._unchanged(key, fingerprint, wanted)) is not None:
            return known
        legs: set[str] = set()
        ns = self._apply_router_now(host, links, router, state, legs, full, neighbours)
        wanted.update(legs)
        self._done[key] = (fingerprint, frozenset(legs), ns)
        return ns

    def _apply_router_now(
        self, host: IPRoute, links: _Links, router: dict[str, Any], state: DesiredState, wanted: set[str], full: bool,
        neighbours: dict[str, str],
    ) -> str:  # fmt: skip
        """The router's namespace from the desired state alone: its legs and their addresses, its NAT, its routes,
        and (full passes) no neighbour entry that names no port of this host (`neighbours`: address -> MAC of each
        port the host plumbs)."""
        ns = names.router_ns(self.host, router["id"])
        key = f"router:{router['id']}"
        fresh = not netns.exists(ns)
        netns.ensure(ns)
        if fresh:
            self.nat.forget(ns, new=True)
            netns.write_sysctl(ns, "net/ipv4/ip_forward", "1")
            netns.write_sysctl(ns, "net/ipv6/conf/all/forwarding", "1")
        inside: set[str] = set()
        gw_port = router["gateway"]["port_id"] if router["gateway"] else None
        with netns.iproute(ns) as rtr:
            for port_id, port in router["ports"].items():
                if port["network_id"] not in state["networks"]:
                    continue
                is_gw = port_id == gw_port
                leg = names.gateway_leg(port_id) if is_gw else names.router_leg(port_id)
                end = names.router_gw(port_id) if is_gw else names.router_iface(port_id)
                wanted.add(leg)
                inside.add(end)
                extra = router_ns.gateway_extras(router) if is_gw else []
                self._ensure_leg(host, links, rtr, ns, leg, end, port, state["networks"][port["network_id"]], extra)
            indexes = {}
            for msg in rtr.get_links():
                name = _ifname(msg)
                if name.startswith((names.ROUTER_IFACE, names.ROUTER_GW)) and name not in inside:
                    self._found(key, [f"leftover interface {name}"])
                    rtr.link("del", index=msg["index"])
                elif name in inside:
                    indexes[name] = msg["index"]
            # NAT first: a route the kernel refuses fails the router, its forwards still work.
            found = self.nat.apply(ns, router_ns.nat_structures(router, state), router.get("forwards", []),
                                   check=self._checking)  # fmt: skip
            self._found(key, found)
            wanted_routes = router_ns.router_routes(router, state, indexes)
            self._found(key, routes.converge(rtr, wanted_routes, mine=routes.not_the_kernels, read=not fresh))
            if full and not fresh:
                internal = {i for n, i in indexes.items() if n.startswith(names.ROUTER_IFACE)}
                self._found(key, routes.drop_stale_neighbours(rtr, internal, neighbours))
        return ns

    def _ensure_leg(
        self,
        host: IPRoute,
        links: _Links,
        rtr: IPRoute,
        ns: str,
        leg: str,
        end: str,
        port: dict[str, Any],
        network: dict[str, Any],
        extra: list[tuple[str, int]],
    ) -> None:
        idx = rtr.link_lookup(ifname=end)
        if leg not in links or not idx:
            if idx:
                _delete(rtr, idx[0])
            idx = [self._create_veth(host, links, leg, {"ifname": end, "address": port["mac_address"]}, ns)]
        bridge = self._bridge_index(host, port["network_id"])
        host.link("set", index=links[leg]["index"], master=bridge, mtu=network["mtu"], state="up")
        # The MAC only when it differs: setting even the one it has flushes its neighbour entries (NETDEV_CHANGEADDR),
        # which every full pass did to every leg.
        mac = port["mac_address"]
        new_mac = {} if _mac(rtr.get_links(idx[0])[0]).lower() == mac.lower() else {"address": mac}
        rtr.link("set", index=idx[0], mtu=network["mtu"], state="up", **new_mac)
        self._configure_addresses(rtr, idx[0], port, extra)

    # -- garbage ------------------------------------------------------------------------------

    def _collect(
        self, host: IPRoute, wanted: set[str], uplinks: set[str], namespaces: set[str], report: bool = False
    ) -> None:
        """Remove cloudnet's own devices and router/metadata namespaces that nothing wants any more. `report`: what
        a full pass removes is a difference (incremental passes collect what just went away)."""
        found = self._differences if report else []
        for msg in host.get_links():
            name = _ifname(msg)
            if names.is_ours(name) and name not in wanted:
                found.append({"object": "garbage", "difference": f"leftover device {name}"})
                try:
                    host.link("del", index=msg["index"])
                except NetlinkError as exc:  # its veth peer went first
                    if exc.code != 19:
                        raise
            elif name != "lo" and not names.is_ours(name) and name not in uplinks:
                # An uplink nobody needs any more goes back to the agent's own namespace.
                fd = netns.fd_of(netns.AGENT_NS)
                try:
                    host.link("set", index=msg["index"], nomaster=True)
                    host.link("set", index=msg["index"], net_ns_fd=fd)
                finally:
                    os.close(fd)
        for ns in netns.names(self.router_prefix) + netns.names(self.metadata_prefix):
            if ns not in namespaces:
                found.append({"object": "garbage", "difference": f"leftover namespace {ns}"})
                netns.remove(ns)
                self.nat.forget(ns)
        # Namespaces cloudnet provided: of instances gone, of parked devices taken or gone. (What runs in one
        # keeps it alive; only its name goes.)
        for ns in netns.names(self.managed_prefix):
            if ns not in namespaces:
                found.append({"object": "garbage", "difference": f"leftover namespace {ns}"})
                netns.remove(ns)
        netns.remove(self.park_ns)

    def teardown(self) -> None:
        """Remove everything of this host (routers, then the host namespace with its devices)."""
        for ns in (
            netns.names(self.router_prefix) + netns.names(self.metadata_prefix) + netns.names(self.managed_prefix)
        ):
            netns.remove(ns)
            self.nat.forget(ns)
        netns.remove(self.park_ns)
        netns.remove(self.host_ns)
        nft.forget(self.host_ns)
        self.steps.restart()
        self._forget()

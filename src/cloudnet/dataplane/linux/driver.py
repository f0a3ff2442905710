"""The Linux dataplane driver: converges one host to its desired state.

Layout on a host (all cloudnet's devices live in the host namespace `cloudnet-host-<host>-<hash>`):

    instance netns:  ethN (MAC, MTU, addresses, routes of the port)
                       |  veth
    host netns:      cnt-<port> -- cnb-<network> (bridge) -- cnq-<port> --veth-- qr-<port>  router netns
                                   cnb-<external> (bridge) -- cng-<port> --veth-- qg-<port>  (SNAT in nftables)
                                        |
                                   uplink interface (--uplink physnet:IFACE), moved into the host netns

Every step checks the kernel before it changes it, so applying the same state twice changes nothing,
and an agent restarted at any point converges without touching devices that are already right.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet.dataplane.base import DesiredState, PortReport
from cloudnet.dataplane.linux import names, nat, netns

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


class LinuxDataplane:
    def __init__(self, host: str, uplinks: dict[str, str] | None = None, sriov: SriovDataplane | None = None) -> None:
        self.host = host
        self.host_ns = names.host_ns(host)
        self.router_prefix = names.router_ns_prefix(host)
        self.metadata_prefix = names.metadata_ns_prefix(host)
        self.uplinks = dict(uplinks or {})
        # Direct (SR-IOV) ports are plugged by their own driver: a VF instead of a veth.
        self.sriov = sriov
        # port id -> fingerprint of the configuration last applied inside the instance; lets a
        # reconcile skip entering namespaces whose ports have not changed.
        self._applied: dict[str, tuple[Any, ...]] = {}
        self.nat = nat.NatTables()

    def close(self) -> None:
        self._applied.clear()

    # -- the whole state ----------------------------------------------------------------------

    def apply(self, state: DesiredState) -> list[PortReport]:
        netns.ensure(self.host_ns)
        reports: list[PortReport] = []
        with netns.iproute(self.host_ns) as host:
            links = _links(host)
            wanted: set[str] = set()
            networks = self._needed_networks(state)
            for net_id in networks:
                wanted.add(self._ensure_bridge(host, links, state["networks"][net_id]))
            uplinks = self._ensure_uplinks(host, state, networks)
            for inst in state["instances"]:
                reports += self._apply_instance(host, links, inst, state, wanted)
            if self.sriov is not None:
                reports += self.sriov.apply(state)
            wanted_ns = set()
            for net_id in networks:
                if state["networks"][net_id].get("metadata_port"):
                    wanted_ns.add(self._apply_metadata(host, links, state["networks"][net_id], wanted))
            for router in state["routers"]:
                wanted_ns.add(self._apply_router(host, links, router, state, wanted))
            self._collect(host, wanted, uplinks, wanted_ns)
        live = {r.port_id for r in reports}
        self._applied = {k: v for k, v in self._applied.items() if k in live}
        return reports

    @staticmethod
    def _needed_networks(state: DesiredState) -> list[str]:
        ids = {p["network_id"] for p in state["ports"].values()}
        for r in state["routers"]:
            ids |= {p["network_id"] for p in r["ports"].values()}
        return sorted(i for i in ids if i in state["networks"])

    def _ensure_bridge(self, host: IPRoute, links: dict[str, Any], network: dict[str, Any]) -> str:
        name = names.bridge(network["id"])
        if name not in links:
            host.link("add", ifname=name, kind="bridge")
            links[name] = host.get_links(_index(host, name))[0]
        msg = links[name]
        if msg.get("mtu") != network["mtu"] or msg.get("state") != "up":
            host.link("set", index=msg["index"], mtu=network["mtu"], state="up")
        return name

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
            bridge = _index(host, names.bridge(net_id))
            host.link("set", index=idx, master=bridge, state="up")
            used.add(iface)
        return used

    # -- instances ----------------------------------------------------------------------------

    def _apply_instance(
        self, host: IPRoute, links: dict[str, Any], inst: dict[str, Any], state: DesiredState, wanted: set[str]
    ) -> list[PortReport]:
        reports = []
        for position, port_id in enumerate(inst["ports"]):
            port = state["ports"].get(port_id)
            if port is None or port.get("binding:vnic_type") == "direct":
                continue  # gone, or a VF (the SR-IOV driver's); ethN positions stay as ordered
            tap = names.tap(port_id)
            wanted.add(tap)
            network = state["networks"][port["network_id"]]
            fingerprint = self._fingerprint(inst, position, port, network, state)
            details = {"bridge_name": names.bridge(port["network_id"]), "tap": tap, "ifname": f"eth{position}"}
            if tap in links and self._applied.get(port_id) == fingerprint:
                reports.append(PortReport(port_id, "ACTIVE" if port["admin_state_up"] else "DOWN", "bridge", details))
                continue
            try:
                self._plug(host, links, inst, position, port, network, state)
            except netns.NamespaceMissing:
                log.warning("instance %s: network namespace %s does not exist", inst["id"], inst["netns"])
                reports.append(PortReport(port_id, "DOWN", "binding_failed", {"reason": "netns missing"}))
                continue
            self._applied[port_id] = fingerprint
            reports.append(PortReport(port_id, "ACTIVE" if port["admin_state_up"] else "DOWN", "bridge", details))
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
        links: dict[str, Any],
        inst: dict[str, Any],
        position: int,
        port: dict[str, Any],
        network: dict[str, Any],
        state: DesiredState,
    ) -> None:
        tap, peer, ifname = names.tap(port["id"]), names.tap_peer(port["id"]), f"eth{position}"
        with netns.iproute(inst["netns"]) as guest:
            current = guest.link_lookup(ifname=ifname)
            plugged = bool(current) and tap in links and _mac(guest.get_links(current[0])[0]) == port["mac_address"]
            if not plugged:
                if tap in links:
                    host.link("del", index=links.pop(tap)["index"])
                if current:  # a stale ethN from an earlier plug: its veth pair goes with it
                    guest.link("del", index=current[0])
                stale_peer = _index(host, peer)
                if stale_peer is not None:
                    host.link("del", index=stale_peer)
                host.link("add", ifname=tap, kind="veth", peer=peer)
                fd = netns.fd_of(inst["netns"])
                try:
                    host.link("set", index=_index(host, peer), net_ns_fd=fd)
                finally:
                    os.close(fd)
                links[tap] = host.get_links(_index(host, tap))[0]
                idx = guest.link_lookup(ifname=peer)[0]
                guest.link("set", index=idx, ifname=ifname)
            bridge = _index(host, names.bridge(port["network_id"]))
            host.link("set", index=links[tap]["index"], master=bridge, mtu=network["mtu"], state="up")
            idx = guest.link_lookup(ifname=ifname)[0]
            lo = guest.link_lookup(ifname="lo")
            if lo:
                guest.link("set", index=lo[0], state="up")
            state_up = "up" if port["admin_state_up"] else "down"
            guest.link("set", index=idx, address=port["mac_address"], mtu=network["mtu"], state=state_up)
            self._configure_addresses(guest, idx, port)
            self._configure_routes(guest, idx, port, state, default=position == 0)

    @staticmethod
    def _configure_addresses(
        ipr: IPRoute, idx: int, port: dict[str, Any], extra: list[tuple[str, int]] | None = None
    ) -> None:
        wanted = {(f["ip_address"], f["prefixlen"]) for f in port["fixed_ips"]} | set(extra or [])
        have = {(a.get("address") or a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in ipr.get_addr(index=idx)}
        for addr, plen in have - wanted:
            if ipaddress.ip_address(addr).is_link_local:  # the kernel's own fe80:: address stays
                continue
            ipr.addr("del", index=idx, address=addr, prefixlen=plen)
        for addr, plen in sorted(wanted - have):
            v6 = ipaddress.ip_address(addr).version == 6
            ipr.addr("add", index=idx, address=addr, prefixlen=plen, **({"flags": IFA_F_NODAD} if v6 else {}))

    @staticmethod
    def _configure_routes(ipr: IPRoute, idx: int, port: dict[str, Any], state: DesiredState, default: bool) -> None:
        for f in port["fixed_ips"]:
            subnet = state["subnets"].get(f["subnet_id"])
            if not subnet:
                continue
            family = socket.AF_INET6 if subnet["ip_version"] == 6 else socket.AF_INET
            if default and subnet["gateway_ip"]:
                dst = "::/0" if family == socket.AF_INET6 else "0.0.0.0/0"
                ipr.route("replace", dst=dst, gateway=subnet["gateway_ip"], oif=idx, family=family)
            metadata_hop = _metadata_hop(state, port["network_id"], f["subnet_id"])
            if default and metadata_hop:
                ipr.route("replace", dst="169.254.169.254/32", gateway=metadata_hop, oif=idx, family=family)
            for r in subnet["host_routes"]:
                ipr.route("replace", dst=r["destination"], gateway=r["nexthop"], oif=idx, family=family)

    # -- metadata -----------------------------------------------------------------------------

    def _apply_metadata(self, host: IPRoute, links: dict[str, Any], network: dict[str, Any], wanted: set[str]) -> str:
        """The network's metadata namespace: on its bridge with the metadata port's addresses and
        169.254.169.254 (and fe80::a9fe:a9fe), where the metadata proxy listens."""
        port = network["metadata_port"]
        ns = names.metadata_ns(self.host, network["id"])
        netns.ensure(ns)
        leg = names.metadata_leg(port["id"])
        wanted.add(leg)
        with netns.iproute(ns) as meta:
            self._ensure_leg(host, links, meta, ns, leg, names.metadata_iface(port["id"]), port, network, METADATA_IPS)
        return ns

    # -- routers ------------------------------------------------------------------------------

    def _apply_router(
        self, host: IPRoute, links: dict[str, Any], router: dict[str, Any], state: DesiredState, wanted: set[str]
    ) -> str:
        ns = names.router_ns(self.host, router["id"])
        fresh = not netns.exists(ns)
        netns.ensure(ns)
        if fresh:
            self.nat.forget(ns)
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
                extra = self._gateway_extras(router) if is_gw else []
                self._ensure_leg(host, links, rtr, ns, leg, end, port, state["networks"][port["network_id"]], extra)
            for msg in rtr.get_links():
                name = _ifname(msg)
                if name.startswith((names.ROUTER_IFACE, names.ROUTER_GW)) and name not in inside:
                    rtr.link("del", index=msg["index"])
            if gw_port and gw_port in router["ports"]:
                self._gateway_routes(rtr, router["ports"][gw_port], state)
        self._nat(ns, router, state)
        return ns

    def _ensure_leg(
        self,
        host: IPRoute,
        links: dict[str, Any],
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
            if leg in links:
                host.link("del", index=links.pop(leg)["index"])
            if idx:
                rtr.link("del", index=idx[0])
            host.link("add", ifname=leg, kind="veth", peer=end)
            fd = netns.fd_of(ns)
            try:
                host.link("set", index=_index(host, end), net_ns_fd=fd)
            finally:
                os.close(fd)
            links[leg] = host.get_links(_index(host, leg))[0]
            idx = rtr.link_lookup(ifname=end)
        bridge = _index(host, names.bridge(port["network_id"]))
        host.link("set", index=links[leg]["index"], master=bridge, mtu=network["mtu"], state="up")
        rtr.link("set", index=idx[0], address=port["mac_address"], mtu=network["mtu"], state="up")
        self._configure_addresses(rtr, idx[0], port, extra)

    @staticmethod
    def _gateway_routes(rtr: IPRoute, gw_port: dict[str, Any], state: DesiredState) -> None:
        idx = rtr.link_lookup(ifname=names.router_gw(gw_port["id"]))[0]
        for f in gw_port["fixed_ips"]:
            subnet = state["subnets"].get(f["subnet_id"])
            if subnet and subnet["gateway_ip"]:
                family = socket.AF_INET6 if subnet["ip_version"] == 6 else socket.AF_INET
                dst = "::/0" if family == socket.AF_INET6 else "0.0.0.0/0"
                try:
                    rtr.route("replace", dst=dst, gateway=subnet["gateway_ip"], oif=idx, family=family)
                except NetlinkError as exc:
                    log.warning("router gateway route via %s: %s", subnet["gateway_ip"], exc)

    def _nat(self, ns: str, router: dict[str, Any], state: DesiredState) -> None:
        """The router's NAT: forwards, hairpin, per-network SNAT addresses, outbound SNAT."""
        gw = router["gateway"]
        gw_port = router["ports"].get(gw["port_id"]) if gw else None
        gw_if = names.router_gw(gw_port["id"]) if gw_port else None
        structures = {}
        for version in (4, 6):
            internal_by_net: dict[str, list[str]] = {}
            for pid, p in router["ports"].items():
                if gw_port and pid == gw_port["id"]:
                    continue
                for f in p["fixed_ips"]:
                    subnet = state["subnets"].get(f["subnet_id"])
                    if subnet and subnet["ip_version"] == version:
                        internal_by_net.setdefault(p["network_id"], []).append(subnet["cidr"])
            internal = tuple(sorted({c for cidrs in internal_by_net.values() for c in cidrs}))
            key = f"ipv{version}.nat.address"
            snat = tuple(
                (tuple(sorted(internal_by_net[nid])), addrs[key])
                for nid, addrs in sorted(router.get("nat_addresses", {}).items())
                if addrs.get(key) and nid in internal_by_net
            )
            external = [f["ip_address"] for f in (gw_port or {}).get("fixed_ips", [])
                        if ipaddress.ip_address(f["ip_address"]).version == version]  # fmt: skip
            # Neutron does not NAT IPv6 by default: only an explicit ipv6.nat.address source-NATs it.
            default = external[0] if version == 4 and router["enable_snat"] and external else None
            if not router["enable_snat"]:
                snat = ()
            structures[version] = nat.Structure(version, gw_if, internal, snat, default)
        self.nat.apply(ns, structures, router.get("forwards", []))

    @staticmethod
    def _gateway_extras(router: dict[str, Any]) -> list[tuple[str, int]]:
        """Listen and SNAT addresses the router answers ARP/NDP for on its external leg."""
        addresses = {f["listen_address"] for f in router.get("forwards", [])}
        for addrs in router.get("nat_addresses", {}).values():
            addresses.update(addrs.values())
        return sorted((a, 32 if ipaddress.ip_address(a).version == 4 else 128) for a in addresses)

    # -- garbage ------------------------------------------------------------------------------

    def _collect(self, host: IPRoute, wanted: set[str], uplinks: set[str], namespaces: set[str]) -> None:
        """Remove cloudnet's own devices and router/metadata namespaces that nothing wants any more."""
        for msg in host.get_links():
            name = _ifname(msg)
            if names.is_ours(name) and name not in wanted:
                try:
                    host.link("del", index=msg["index"])
                except NetlinkError as exc:  # its veth peer went first
                    if exc.code != 19:
                        raise
            elif name != "lo" and not names.is_ours(name) and name not in uplinks:
                # An uplink nobody needs any more goes back to the agent's own namespace.
                fd = netns.fd_of(f"/proc/{os.getpid()}/ns/net")
                try:
                    host.link("set", index=msg["index"], nomaster=True)
                    host.link("set", index=msg["index"], net_ns_fd=fd)
                finally:
                    os.close(fd)
        for ns in netns.names(self.router_prefix) + netns.names(self.metadata_prefix):
            if ns not in namespaces:
                netns.remove(ns)
                self.nat.forget(ns)

    def teardown(self) -> None:
        """Remove everything of this host (routers, then the host namespace with its devices)."""
        for ns in netns.names(self.router_prefix) + netns.names(self.metadata_prefix):
            netns.remove(ns)
            self.nat.forget(ns)
        netns.remove(self.host_ns)
        self._applied.clear()

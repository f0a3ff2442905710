"""Metadata reach on the OVN driver (neutron-ovn-metadata-agent's layout): each network with an instance port
plugged here gets the namespace `metadata_ns(host, network)` with a veth into br-int that is the network's
`localport` (iface-id = the metadata port's id, the LSP the server's NB writer makes for it), holding its fixed IPs
and 169.254.169.254, where the agent's metadata proxy listens. A localport is never bound to a chassis: every
chassis has its own, answering its own instances only. It goes when the last instance port of the network here
goes (the driver's collection)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from cloudnet.dataplane.base import DesiredState, PortReport, metadata_ns
from cloudnet.dataplane.kernel import addressing, netns
from cloudnet.dataplane.ovn import names, veth
from cloudnet.dataplane.ovn.passes import OvnPass
from cloudnet.dataplane.steps import StepFailed

METADATA_IPS = [("169.254.169.254", 32)]


def _fingerprint(network: dict[str, Any]) -> tuple[Any, ...]:
    port = network["metadata_port"]
    ips = tuple(sorted((f["ip_address"], f["prefixlen"]) for f in port["fixed_ips"]))
    return port["id"], port["mac_address"], network["mtu"], ips


class MetadataPorts:
    """The metadata reach job (dataplane.base.MetadataReach), one step per network."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.applied: dict[str, tuple[Any, ...]] = {}  # network id -> fingerprint

    def step_keys(self, state: DesiredState) -> list[str]:
        return [f"metadata:{n}" for n in state["networks"]]

    def forget(self) -> None:
        self.applied.clear()

    def apply(self, run: OvnPass) -> tuple[list[str], list[PortReport]]:
        """The networks whose metadata namespace is in place, and reports for their metadata ports."""
        served: list[str] = []
        reports: list[PortReport] = []
        for net_id in sorted(run.vif_networks):
            network = run.state["networks"].get(net_id) or {}
            port = network.get("metadata_port")
            if not port or not names.is_plain(net_id) or not names.is_plain(port["id"]):
                continue
            run.wanted_ns.add(metadata_ns(self.host, net_id))
            run.wanted.add(names.metadata_leg(port["id"]))
            fingerprint = _fingerprint(network)
            if self.applied.get(net_id) != fingerprint or run.full:
                with contextlib.suppress(StepFailed):
                    run.steps.run(f"metadata:{net_id}", lambda n=network: self._apply(run, n), fingerprint)
            if run.steps.failed(f"metadata:{net_id}") is None and net_id in self.applied:
                served.append(net_id)
                status = "ACTIVE" if port.get("admin_state_up", True) else "DOWN"
                if port.get("status") != status:
                    reports.append(PortReport(port["id"], status, "ovs", {"port_filter": False, "localport": True}))
        self.applied = {k: v for k, v in self.applied.items() if k in run.vif_networks}
        return served, reports

    def _apply(self, run: OvnPass, network: dict[str, Any]) -> None:
        port, ns = network["metadata_port"], metadata_ns(self.host, network["id"])
        leg, mac, mtu = names.metadata_leg(port["id"]), port["mac_address"], network["mtu"]
        netns.ensure(ns)
        fd = netns.fd_of(ns)
        try:
            with netns.iproute(run.host_ns) as host, netns.iproute(fd) as inside:
                idx = veth.index(inside, names.METADATA_IFACE)
                if idx is None or veth.index(host, leg) is None or veth.mac(inside, idx) != mac.lower():
                    if idx is not None:
                        inside.link("del", index=idx)
                    idx = veth.create(host, leg, {"ifname": names.METADATA_IFACE, "address": mac}, fd, mtu)
                    veth.tx_checksum_off(fd, names.METADATA_IFACE)
                inside.link("set", index=idx, mtu=mtu, state="up")
                addressing.configure_addresses(inside, idx, port, METADATA_IPS)
            run.vswitch.plug(leg, port["id"], **{"cloudnet:network": network["id"]})
        finally:
            os.close(fd)
        self.applied[network["id"]] = _fingerprint(network)

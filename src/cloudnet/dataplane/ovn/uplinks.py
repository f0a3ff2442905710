"""Uplinks on the OVN driver (--uplink PHYSNET:IFACE): the server writes a provider network as a `localnet` port
(network_name PHYSNET); a chassis reaches it through the bridge its `ovn-bridge-mappings` names for PHYSNET. The
agent makes that bridge (br-PHYSNET, cloudnet.ovn.daemons.provider_bridge), puts IFACE on it, in the namespace
ovs-vswitchd runs in (moved there from the agent's own, as the Linux driver moves an uplink into its host
namespace), up, and merges the mapping into the Open_vSwitch row. One step per physical network, applied on full
passes and until it has succeeded: a missing interface fails alone (reported, retried) while the rest converges.

The userspace datapath completes no partial checksums (veth.py): IFACE's transmit checksum offload is turned off
(`ethtool -K IFACE tx off`, once, logged), so that what leaves through it carries whole checksums whatever writes it.
What comes in is the sender's to checksum: a veth peer standing in for the wire (README's quick start) that offloads
them makes ping work and TCP fail; it is not ours to change, so a peer in reach with its offload on is warned about.
"""

from __future__ import annotations

import contextlib
import logging
import os

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn import names, veth
from cloudnet.dataplane.ovn.passes import OvnPass
from cloudnet.dataplane.steps import StepFailed
from cloudnet.ovn.daemons import provider_bridge

log = logging.getLogger(__name__)
OURS = (names.TAP, names.METADATA_LEG)  # devices this driver makes: never an uplink


class Uplinks:
    def __init__(self, mappings: dict[str, str]) -> None:
        self.mappings = dict(mappings)  # physical network -> interface
        self.applied: set[str] = set()
        self.warned: set[tuple[str, str]] = set()  # (uplink, peer) already warned about

    def step_keys(self) -> list[str]:
        return [f"uplink:{physnet}" for physnet in self.mappings]

    def apply(self, run: OvnPass) -> None:
        for physnet, iface in sorted(self.mappings.items()):
            if physnet in self.applied and not run.full:
                continue
            with contextlib.suppress(StepFailed):
                run.steps.run(f"uplink:{physnet}", lambda p=physnet, i=iface: self._connect(run, p, i), iface)
                self.applied.add(physnet)

    def _connect(self, run: OvnPass, physnet: str, iface: str) -> None:
        if not names.is_plain(physnet):  # (it goes into ovn-bridge-mappings' text: no separators)
            raise ValueError(f"physical network {physnet!r}: not a plain name")
        if iface.startswith(OURS) or not names.is_plain(iface) or len(iface) > names.IFNAMSIZ:
            raise ValueError(f"uplink {iface!r} of {physnet}: not an interface name this driver may take")
        with netns.iproute(run.host_ns) as host:
            if veth.index(host, iface) is None:
                self._move_here(run.host_ns, iface)
            idx = veth.index(host, iface)
            if idx is None:
                raise LookupError(f"uplink {iface} of {physnet} not found")
            host.link("set", index=idx, state="up")
            peer = veth.same_ns_peer(host, idx)
        self._checksums(run.host_ns, iface, peer)
        run.vswitch.connect_uplink(physnet, provider_bridge(physnet), iface)

    def _checksums(self, ns: str, iface: str, peer: str | None) -> None:
        try:
            if veth.tx_checksum(ns, iface):
                veth.tx_checksum_off(ns, iface)
                log.info("uplink %s: transmit checksum offload turned off (OVS's userspace datapath completes no "
                         "partial checksums)", iface)  # fmt: skip
        except OSError as exc:  # a device whose offload is fixed: it still carries traffic, so connect it anyway
            log.warning("uplink %s: transmit checksum offload left as it is: %s", iface, exc)
        if peer is not None and (iface, peer) not in self.warned and veth.tx_checksum(ns, peer):
            self.warned.add((iface, peer))
            log.warning(
                "uplink %s is a veth whose peer %s offloads transmit checksums: TCP from %s through OVS's "
                "userspace datapath fails (ping works); run `ethtool -K %s tx off`",
                iface,
                peer,
                peer,
                peer,
            )

    @staticmethod
    def _move_here(host_ns: str, iface: str) -> None:
        """An uplink in the agent's namespace goes to ovs-vswitchd's (when that is another one)."""
        with netns.iproute(None) as own:
            idx = veth.index(own, iface)
            if idx is None:
                return
            fd = netns.fd_of(host_ns)
            try:
                own.link("set", index=idx, net_ns_fd=fd)
            finally:
                os.close(fd)
            log.info("uplink %s moved into %s", iface, host_ns)

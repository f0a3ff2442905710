"""Networks on the Linux driver: one bridge per network in the host namespace, at the network's MTU, and each
external flat network's uplink (--uplink physnet:IFACE) moved into the host namespace onto its bridge."""

from __future__ import annotations

import logging
import os
from typing import Any

from pyroute2 import IPRoute

from cloudnet.dataplane.base import DesiredState
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.links import Links, index
from cloudnet.dataplane.linux.passes import Pass, needed_networks
from cloudnet.dataplane.steps import StepFailed

log = logging.getLogger(__name__)


class Bridges:
    """The networks job (dataplane.base.Networks)."""

    def __init__(self, host_ns: str, uplinks: dict[str, str]) -> None:
        self.host_ns = host_ns
        self.uplinks = dict(uplinks)
        self.known: dict[str, tuple[int, int]] = {}  # bridge -> (mtu, ifindex), as the last pass left it

    def apply(self, run: Pass) -> None:
        for net_id in run.networks:
            network = run.state["networks"][net_id]
            run.wanted.add(names.bridge(net_id))
            try:
                run.steps.run(f"network:{net_id}", lambda n=network: self._ensure_bridge(run.host, run.links, n,
                                                                                         run.full),
                              network["mtu"])  # fmt: skip
            except StepFailed as exc:
                run.broken[net_id] = f"network {net_id}: {exc.reason}"
        try:
            run.uplinks = run.steps.run("uplinks", lambda: self._ensure_uplinks(run.host, run.state, run.networks))
        except StepFailed:
            run.uplinks = set(run.kept[1]) if run.kept else set(self.uplinks.values())  # none handed back
        self.known = {k: v for k, v in self.known.items() if k in run.wanted}

    def step_keys(self, state: DesiredState) -> list[str]:
        return ["uplinks", *(f"network:{n}" for n in needed_networks(state))]

    def forget(self) -> None:
        self.known.clear()

    def index(self, host: IPRoute, network_id: str) -> int | None:
        """The network's bridge, as this pass's `_ensure_bridge` left it (no netlink round trip)."""
        known = self.known.get(names.bridge(network_id))
        return known[1] if known else index(host, names.bridge(network_id))

    def _ensure_bridge(self, host: IPRoute, links: Links, network: dict[str, Any], full: bool) -> str:
        name = names.bridge(network["id"])
        if not full and self.known.get(name, (None,))[0] == network["mtu"]:
            return name
        if name not in links:
            host.link("add", ifname=name, kind="bridge")
            links.refresh(name)
        msg = links[name]
        if msg.get("mtu") != network["mtu"] or msg.get("state") != "up":
            host.link("set", index=msg["index"], mtu=network["mtu"], state="up")
        self.known[name] = (network["mtu"], msg["index"])
        return name

    def _ensure_uplinks(self, host: IPRoute, state: DesiredState, networks: list[str]) -> set[str]:
        """Bridge each external flat network to the interface mapped to its physical network."""
        used: set[str] = set()
        for net_id in networks:
            net = state["networks"][net_id]
            iface = self.uplinks.get(net.get("physical_network") or "")
            if not net["router_external"] or not iface or net["network_type"] != "flat":
                continue
            idx = index(host, iface)
            if idx is None:
                with netns.iproute(None) as root:
                    ridx = index(root, iface)
                    if ridx is None:
                        log.error("uplink %s for %s not found", iface, net.get("physical_network"))
                        continue
                    fd = netns.fd_of(self.host_ns)
                    try:
                        root.link("set", index=ridx, net_ns_fd=fd)
                    finally:
                        os.close(fd)
                idx = index(host, iface)
            host.link("set", index=idx, master=self.index(host, net_id), state="up")
            used.add(iface)
        return used

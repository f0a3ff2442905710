"""Metadata reach on the Linux driver: each network with a metadata port gets the namespace
`metadata_ns(host, network)` on its bridge, holding the metadata port's addresses and 169.254.169.254 (and
fe80::a9fe:a9fe), where the agent's metadata proxy listens."""

from __future__ import annotations

import contextlib
from typing import Any

from cloudnet.dataplane.base import DesiredState
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.bridges import Bridges
from cloudnet.dataplane.linux.links import ensure_leg
from cloudnet.dataplane.linux.passes import Done, Pass, fingerprint_of, needed_networks
from cloudnet.dataplane.steps import StepFailed

METADATA_IPS = [("169.254.169.254", 32), ("fe80::a9fe:a9fe", 128)]


class MetadataNamespaces:
    """The metadata reach job (dataplane.base.MetadataReach), one step per network."""

    def __init__(self, host: str, bridges: Bridges) -> None:
        self.host = host
        self.bridges = bridges
        self.done = Done()

    def apply(self, run: Pass) -> None:
        for net_id in run.networks:
            network = run.state["networks"][net_id]
            if network.get("metadata_port") and net_id not in run.broken:
                leg, ns = names.metadata_leg(network["metadata_port"]["id"]), names.metadata_ns(self.host, net_id)
                run.wanted.add(leg)  # (kept whatever happens to the step)
                run.wanted_ns.add(ns)
                with contextlib.suppress(StepFailed):
                    run.steps.run(f"metadata:{net_id}", lambda n=network: self._apply_network(run, n),
                                  fingerprint_of(network))  # fmt: skip
        self.done.keep(run.wanted_ns)

    def step_keys(self, state: DesiredState) -> list[str]:
        return [f"metadata:{n}" for n in needed_networks(state)]

    def forget(self) -> None:
        self.done.forget()

    def _apply_network(self, run: Pass, network: dict[str, Any]) -> str:
        key, fingerprint = f"metadata:{network['id']}", fingerprint_of(network)
        if not run.full and (known := self.done.unchanged(key, fingerprint, run.wanted)) is not None:
            return known
        port = network["metadata_port"]
        ns = names.metadata_ns(self.host, network["id"])
        netns.ensure(ns)
        leg = names.metadata_leg(port["id"])
        run.wanted.add(leg)
        with netns.iproute(ns) as meta:
            ensure_leg(run.host, run.links, meta, ns, leg, names.metadata_iface(port["id"]), port, network,
                       METADATA_IPS, self.bridges.index(run.host, port["network_id"]))  # fmt: skip
        self.done.record(key, fingerprint, frozenset({leg}), ns)
        return ns

"""What one pass of the Linux driver shares among its jobs (`Pass`, the `P` of dataplane.base's job protocols), and
what the jobs remember between passes (`Done`, `Plugged`)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from pyroute2 import IPRoute

from cloudnet.dataplane.base import DesiredState, PortReport
from cloudnet.dataplane.kernel.ns_guard import InstanceNamespaces
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.links import Links
from cloudnet.dataplane.steps import Steps

log = logging.getLogger(__name__)
Kept = tuple[frozenset[str], frozenset[str], frozenset[str]]  # devices, uplinks, namespaces a pass kept


@dataclass
class Pass:
    state: DesiredState
    full: bool  # read and check everything (else: touch only what changed since the last pass)
    checking: bool  # also read back what is otherwise trusted (nftables)
    host: IPRoute  # netlink in the host namespace
    links: Links
    guard: InstanceNamespaces
    steps: Steps
    networks: list[str]  # the networks the host needs (needed_networks)
    kept: Kept | None  # what the pass before kept (None: unknown)
    wanted: set[str] = field(default_factory=set)  # the devices this pass keeps (the rest is collected)
    wanted_ns: set[str] = field(default_factory=set)  # the namespaces it keeps
    uplinks: set[str] = field(default_factory=set)  # the uplinks in use
    broken: dict[str, str] = field(default_factory=dict)  # network id -> why its bridge is not there; port id ->
    # why it is not filtered: their ports are not plugged
    differences: list[dict[str, str]] = field(default_factory=list)  # found different from the desired state
    plugged: int = 0  # instances whose ports this pass (re)plugged: their reports go out before any parking

    def found(self, key: str, differences: list[str]) -> None:
        for difference in differences:
            log.warning("%s: %s (repaired)", key, difference)
            self.differences.append({"object": key, "difference": difference})


def needed_networks(state: DesiredState) -> list[str]:
    ids = {p["network_id"] for p in state["ports"].values()}
    ids |= {p["network_id"] for p in state.get("pool_ports", {}).values()}
    for r in state["routers"]:
        ids |= {p["network_id"] for p in r["ports"].values()}
    return sorted(i for i in ids if i in state["networks"])


def fingerprint_of(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, default=str)


class Done:
    """Parts applied by earlier passes (metadata namespaces, routers): key -> (fingerprint, the devices it wants,
    its namespace), so that an incremental pass skips what has not changed."""

    def __init__(self) -> None:
        self.parts: dict[str, tuple[str, frozenset[str], str]] = {}

    def unchanged(self, key: str, fingerprint: str, wanted: set[str]) -> str | None:
        """For an incremental pass: the namespace of a part applied before with this fingerprint (its
        devices counted as wanted), or None when it must be applied."""
        done = self.parts.get(key)
        if done is None or done[0] != fingerprint:
            return None
        wanted.update(done[1])
        return done[2]

    def record(self, key: str, fingerprint: str, devices: frozenset[str], ns: str) -> None:
        self.parts[key] = (fingerprint, devices, ns)

    def keep(self, namespaces: set[str]) -> None:
        self.parts = {k: v for k, v in self.parts.items() if v[2] in namespaces}

    def forget(self) -> None:
        self.parts.clear()


PARKED_IFNAME = "eth0"  # a parked device's name in its namespace (what an instance taking that over would want)


@dataclass(frozen=True)
class Parked:
    """A ready pool port's device, parked as eth0 in a namespace of its own."""

    ns: str
    applied: tuple[Any, ...]  # the instance fingerprint of what is configured inside, as eth0 of `ns`


@dataclass
class Plugged:
    """The veth ports' devices, shared by the instance ports and the pool devices (a device moves between them)."""

    # port id -> fingerprint of the configuration last applied inside the instance; lets a
    # reconcile skip entering namespaces whose ports have not changed.
    applied: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # Pre-plumbed devices for ready pool ports (Kuryr's CNI half), each parked in a namespace of its own.
    parked: dict[str, Parked] = field(default_factory=dict)
    # Namespaces removed by a job during the pass (a parked device's, moved into its instance): gone already, so
    # the pass need not collect garbage for them.
    gone_ns: set[str] = field(default_factory=set)

    def keep(self, ports: set[str]) -> None:
        """Forget the ports not reported by the last pass (after every job: a released port may go to the pool)."""
        self.applied = {k: v for k, v in self.applied.items() if k in ports}


def plugged_report(port: dict[str, Any], ifname: str, filtered: bool, **more: Any) -> PortReport:
    tap = names.tap(port["id"])
    details = {"bridge_name": names.bridge(port["network_id"]), "tap": tap, "ifname": ifname,
               "port_filter": filtered, **more}  # fmt: skip
    return PortReport(port["id"], "ACTIVE" if port["admin_state_up"] else "DOWN", "bridge", details)


def broken_reason(port: dict[str, Any], broken: dict[str, str]) -> str | None:
    """Why the port cannot be plugged (its filter, or its network's bridge, is not in place); None: it can."""
    return broken.get(port["id"]) or broken.get(port["network_id"])

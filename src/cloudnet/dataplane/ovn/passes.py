"""What one pass of the OVN driver shares among its jobs (the `P` of dataplane.base's job protocols)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cloudnet.dataplane.base import DesiredState
from cloudnet.dataplane.kernel.ns_guard import InstanceNamespaces
from cloudnet.dataplane.ovn.vswitch import Vswitch
from cloudnet.dataplane.steps import Steps


@dataclass
class OvnPass:
    state: DesiredState
    full: bool  # read back everything (else: trust what earlier passes applied)
    host_ns: str  # the namespace ovs-vswitchd runs in (where br-int's ports are): each step opens its own netlink
    vswitch: Vswitch
    guard: InstanceNamespaces
    steps: Steps
    bound: set[str]  # logical ports ovn-controller has bound to this chassis (SB)
    ours: dict[str, str]  # br-int Interfaces this host's driver made: name -> iface-id (read once, full passes)
    wanted: set[str] = field(default_factory=set)  # the br-int ports this pass keeps (the rest is collected)
    wanted_ns: set[str] = field(default_factory=set)  # the namespaces it keeps
    vif_networks: set[str] = field(default_factory=set)  # networks with an instance port plugged here
    # SB's bindings read again (the IDL's mirror, no round trip): for ports ovn-controller bound during this pass
    read_bound: Callable[[], set[str]] = set

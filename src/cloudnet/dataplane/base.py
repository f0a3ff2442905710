"""The dataplane driver interface: what every driver takes and gives, and the jobs it does.

The agent hands a driver the host's whole desired state (GET /v2.0/hosts/{host}/state, services/hosts/host_state.py:
instances with their ordered ports, the ports, networks, subnets and routers this host needs) and gets port
reports back (`Dataplane`). A driver converges the host to it and is safe to call again at any time, including
after a crash. drivers.py picks the driver from the agent's configuration: nothing above this module knows which.

What a dataplane must do, in the order one pass does it (each object of each job a step of its own, steps.py: one
failing object fails alone, with its reason):

  networks        `Networks`: each network the host needs carries L2 (a bridge, a logical switch) at its MTU; an
                  external flat network reaches its physical network's uplink.
  security groups `security.Firewall`: security groups and port security of every port this driver plugs, in
                  place before the port's device passes anything.
  ports           `Ports`: each instance's ports in their order (eth0, eth1...), with their MAC, MTU, addresses and
                  routes; ports of another `binding:vnic_type` (e.g. SR-IOV `direct`) go to a `PortBinder`.
  pool ports      `PoolPorts`: devices of a port pool's ready ports prepared ahead (optional: may report none).
  metadata reach  `MetadataReach`: 169.254.169.254 answers in each network with a metadata port, from the
                  namespace `metadata_ns(host, network)`, where the agent's metadata proxy listens.
  routers         `Routers`: each router's legs, routes, SNAT of its gateway and its forwards (floating IPs, port
                  forwardings), all of it from the router's desired state alone.
  collection      what no job wants any more is removed (only the driver's own objects).

The jobs are protocols over `P`, what one pass of a driver shares among its jobs (the Linux driver: its netlink
socket in the host namespace and the devices the pass keeps; an OVN driver: one northbound transaction), so each
driver types its own and its `apply` composes its jobs in this order. Nothing dispatches to a job but its driver.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from cloudnet.dataplane.kernel.ns_guard import InstanceNamespaces
from cloudnet.dataplane.steps import Steps

DesiredState = dict[str, Any]
P = TypeVar("P", contravariant=True)
METADATA_NS_PREFIX = "cloudnet-meta-"


@dataclass(frozen=True)
class PortReport:
    port_id: str
    status: str  # ACTIVE | DOWN | ERROR
    vif_type: str = "bridge"
    vif_details: dict[str, Any] = field(default_factory=dict)

    def as_api(self) -> dict[str, Any]:
        return {
            "id": self.port_id,
            "status": self.status,
            "binding:vif_type": self.vif_type,
            "binding:vif_details": self.vif_details,
        }


def failed(port_id: str, reason: str) -> PortReport:
    """A port that could not be plugged: ERROR, with the reason in `binding:vif_details`."""
    return PortReport(port_id, "ERROR", "binding_failed", {"reason": reason})


@runtime_checkable
class Dataplane(Protocol):
    """What the agent sees of a driver."""

    def apply(self, state: DesiredState, full: bool = True, check: bool = False) -> list[PortReport]:
        """Converge; with `full` False the driver may touch only what changed since its last pass. One object's
        failure fails that object only (its ports are reported ERROR with the reason); an exception means the
        pass as a whole could not run (or a step ran past its time limit) and the caller tries again. `check`: a
        full pass that also reads back whatever the driver otherwise trusts to be as it left it."""
        ...

    def apply_qos(self, state: DesiredState) -> bool:
        """Converge only the QoS of the ports the last pass plugged (`state` differs from that pass's in QoS alone):
        the agent's pass after a change of QoS. False: nothing done, a whole pass is needed (there was none to build
        on). Failures and time limits as in `apply`."""
        ...

    def differences(self) -> list[dict[str, str]]:
        """What the last check found different from the desired state, and repaired: {"object", "difference"}."""
        ...

    def failures(self) -> list[dict[str, Any]]:
        """Objects whose last attempt failed: {"object", "reason", "since", "attempts", "retry_in"}."""
        ...

    def news(self) -> bool:
        """Something changed underneath since the last pass that a pass would report (OVN: ovn-controller bound or
        unbound a port): the agent, while it waits for such a change, passes again at once."""
        ...

    def on_news(self, wake: Callable[[], None]) -> None:
        """Call `wake` (from any thread; it only signals) whenever `news()` may have turned true, so that an agent
        waiting for it passes again at once rather than at its next look."""
        ...

    def unfinished(self) -> bool:
        """The last pass left work for the next (devices to prepare beyond its budget): the agent reports what it
        did and passes again at once."""
        ...

    def close(self) -> None: ...


# -- the jobs -----------------------------------------------------------------------------------------------------


@runtime_checkable
class Job(Protocol):
    def step_keys(self, state: DesiredState) -> list[str]:
        """The step keys of this job's objects in `state` (failures of any others are forgotten)."""
        ...

    def forget(self) -> None:
        """Drop what the job remembers having applied (the kernel state is gone or unknown): it applies it whole."""
        ...


@runtime_checkable
class Networks(Job, Protocol[P]):
    def apply(self, run: P) -> None:
        """L2 of every network the host needs; a network that fails is named, with why, in the pass's `broken` (its
        ports are not plugged), and an uplink nobody needs any more is handed back."""
        ...


@runtime_checkable
class Ports(Job, Protocol[P]):
    def apply(self, run: P) -> list[PortReport]:
        """Every instance's ports this driver plugs (its vnic types), reported; those on a broken network or without
        their filter fail with that reason."""
        ...

    def is_plugged(self, port_id: str) -> bool: ...


@runtime_checkable
class PoolPorts(Job, Protocol[P]):
    unfinished: bool  # the last pass left devices to prepare for the next one

    def apply(self, run: P) -> list[PortReport]:
        """The ready pool ports' prepared devices, reported (`binding:vif_details.prepared_netns`); never ahead of
        an instance's ports, and for a bounded time per pass (the rest: `unfinished`)."""
        ...


@runtime_checkable
class MetadataReach(Job, Protocol[P]):
    def apply(self, run: P) -> None:
        """169.254.169.254 in each network with a metadata port, in `metadata_ns(host, network id)`."""
        ...


@runtime_checkable
class Routers(Job, Protocol[P]):
    def apply(self, run: P) -> None:
        """Every router of the state: legs, routes, gateway SNAT and forwards."""
        ...


@runtime_checkable
class PortBinder(Protocol):
    """Plugs the instance ports of one `binding:vnic_type` the driver does not plug itself (SR-IOV `direct`: a VF,
    sriov/driver.py), within the driver's pass: its steps, and the pass's checked view of instance namespaces."""

    vnic_type: str

    def apply(self, state: DesiredState, steps: Steps, guard: InstanceNamespaces) -> list[PortReport]: ...

    def is_plugged(self, port_id: str) -> bool: ...

    def step_keys(self, state: DesiredState) -> list[str]: ...

    def close(self) -> None: ...


# -- metadata reach: where the agent's proxy listens ---------------------------------------------------------------


def metadata_ns_prefix(host: str) -> str:
    # Per host: two agents on one machine never take over each other's metadata namespaces.
    return f"{METADATA_NS_PREFIX}{hashlib.sha1(host.encode()).hexdigest()[:6]}-"


def metadata_ns(host: str, network_id: str) -> str:
    """The namespace where the network's metadata proxy listens on 169.254.169.254 (neutron's ovnmeta-<net>): every
    driver makes it reachable from the network's instances, so the agent's proxy needs to know no driver."""
    return metadata_ns_prefix(host) + network_id

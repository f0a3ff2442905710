"""What every dataplane driver takes and gives: a host's whole desired state in, port reports out.

The desired state is the document served at GET /v2.0/hosts/{host}/state (services/hosts.py):
instances with their ordered ports, the ports, networks, subnets and routers this host needs.
A driver converges the host to it and is safe to call again at any time, including after a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

DesiredState = dict[str, Any]


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


class Dataplane(Protocol):
    def apply(self, state: DesiredState, full: bool = True, check: bool = False) -> list[PortReport]:
        """Converge; with `full` False the driver may touch only what changed since its last pass. One object's
        failure fails that object only (its ports are reported ERROR with the reason); an exception means the
        pass as a whole could not run (or a step ran past its time limit) and the caller tries again. `check`: a
        full pass that also reads back whatever the driver otherwise trusts to be as it left it."""
        ...

    def differences(self) -> list[dict[str, str]]:
        """What the last check found different from the desired state, and repaired: {"object", "difference"}."""
        ...

    def failures(self) -> list[dict[str, Any]]:
        """Objects whose last attempt failed: {"object", "reason", "since", "attempts", "retry_in"}."""
        ...

    def close(self) -> None: ...

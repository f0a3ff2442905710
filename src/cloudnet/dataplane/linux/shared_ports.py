"""Reports for the ports a host realises on behalf of a whole network rather than an instance: routers' interface
and gateway legs, networks' metadata ports. Each is ACTIVE (DOWN when its admin state is down) once the step that
builds it has succeeded on this host; reported only when the server shows something else, so that a steady host
reports nothing. Their binding (vif_type, vif_details) stays as the server holds it."""

from __future__ import annotations

from typing import Any

from cloudnet.dataplane.base import DesiredState, PortReport
from cloudnet.dataplane.steps import Steps


def _report(port: dict[str, Any]) -> PortReport | None:
    status = "ACTIVE" if port.get("admin_state_up", True) else "DOWN"
    if port.get("status") == status:
        return None
    return PortReport(port["id"], status, port.get("binding:vif_type") or "unbound",
                      dict(port.get("binding:vif_details") or {}))  # fmt: skip


def reports(state: DesiredState, steps: Steps, metadata_networks: list[str]) -> list[PortReport]:
    """Reports for the router ports whose router step last succeeded here, and the metadata ports of
    `metadata_networks` (those whose metadata step ran this pass) whose step succeeded."""
    out: list[PortReport] = []
    for router in state["routers"]:
        if steps.failed(f"router:{router['id']}") is None:
            out += [r for p in router["ports"].values() if (r := _report(p)) is not None]
    for net_id in metadata_networks:
        port = state["networks"][net_id].get("metadata_port")
        if port and steps.failed(f"metadata:{net_id}") is None and (r := _report(port)) is not None:
            out.append(r)
    return out

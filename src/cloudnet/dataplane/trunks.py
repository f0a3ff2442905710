"""Trunks as a dataplane sees them in the desired state: an instance port whose `trunk_details` name subports, each
a port of the state (its network, addresses, security) with its VLAN. Both drivers realise them (linux/trunk_vlans.py;
on OVN the subports are logical ports with parent_name and tag, written by the server: ovn/ports.py reports them)."""

from __future__ import annotations

from typing import Any

from cloudnet.dataplane.base import DesiredState

Sub = tuple[dict[str, Any], int]  # the subport, its VLAN id


def trunks_of(state: DesiredState) -> list[tuple[dict[str, Any], list[Sub]]]:
    """Every instance port of the state with subports, and those subports (with their VLAN) the state has."""
    ports, out = state["ports"], []
    for inst in state["instances"]:
        for pid in inst["ports"]:
            details = (ports.get(pid) or {}).get("trunk_details") or {}
            subs = [(ports[s["port_id"]], int(s["segmentation_id"])) for s in details.get("sub_ports") or []
                    if s["port_id"] in ports]  # fmt: skip
            if subs:
                out.append((ports[pid], subs))
    return out

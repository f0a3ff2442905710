"""SR-IOV direct ports: VF reservations (networking.md §3.2 B and §3.3).

A direct port bound to an instance on a host holds one VF of that host, recorded in
`sriov_reservations` (unique per (host, pci_slot) and per port: the database, not this code, makes
sharing a VF impossible). The VFs a host has come from its agent's heartbeat report (`report["sriov"]`,
dataplane/sriov/inventory.py); a VF is free when it is not excluded, not reserved, and its netdev is in
the host namespace (absent: the agent has not handed it back yet, or something else uses it).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, insert, select

from cloudnet.errors import Conflict, InvalidInput
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.networks import single_host
from cloudnet.store import tables as t
from cloudnet.store.db import Tx

R = t.sriov_reservations
P = t.ports
SRIOV_VNIC_TYPES = ("direct",)
VIF_TYPE = "hw_veb"
PCI_PROFILE_KEYS = ("pci_vendor_info", "pci_slot")
BOUND_NETWORK_TYPES = ("flat", "vlan")


def is_direct(port_row: Any) -> bool:
    return str(port_row.vnic_type) in SRIOV_VNIC_TYPES


def reported_vfs(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The host's VFs from its report: [{pf, physical_network, index, pci_slot, pci_vendor_info, netdev, excluded}]."""
    out = []
    for pf in ((report or {}).get("sriov") or {}).get("pfs", []):
        for vf in pf.get("vfs", []):
            out.append({**vf, "pf": pf["name"], "physical_network": pf["physical_network"]})
    return out


def _vlan(network: Any) -> str:
    # Neutron's mech_sriov: str(segmentation_id) on VLAN segments, "0" on flat ones.
    return str(network.segmentation_id) if network.network_type == "vlan" and network.segmentation_id else "0"


def check_port(tx: Tx, port_row: Any) -> Any:
    """Zun's checks specific to a direct port; returns its network row. 400 with the reason, or 409 when
    the port is already active."""
    if not is_direct(port_row):
        raise InvalidInput(f"Port {port_row.id} has binding:vnic_type {port_row.vnic_type}, not direct")
    if port_row.status in ("ACTIVE", "BUILD", "ERROR"):
        raise Conflict(f"Port {port_row.id} not usable for the instance: it is {port_row.status}.",
                       type="PortNotUsable")  # fmt: skip
    if port_row.vif_type == "binding_failed":
        raise Conflict(f"Binding failed for port {port_row.id}, please check neutron logs for more information.",
                       type="PortBindingFailed")  # fmt: skip
    if single_host.scope(tx.store).dataplane == "ovn":  # (OVN would need it as an external port on a real NIC)
        raise Conflict(f"Binding failed for port {port_row.id}: binding:vnic_type direct (SR-IOV) is not supported "
                       "on the OVN dataplane.", type="PortBindingFailed")  # fmt: skip
    network = tx.conn.execute(select(t.networks).where(t.networks.c.id == port_row.network_id)).one()
    if not network.physical_network or network.network_type not in BOUND_NETWORK_TYPES:
        raise InvalidInput(
            f"Port {port_row.id} has binding:vnic_type direct but its network {network.id} has no "
            "provider:physical_network (a direct port needs a flat or vlan network of a physical network)"
        )
    sgs = tx.conn.execute(
        select(t.port_security_groups.c.security_group_id).where(t.port_security_groups.c.port_id == port_row.id)
    ).first()
    if sgs is not None:
        raise InvalidInput(
            f"Port {port_row.id} has binding:vnic_type direct and security groups, which are not enforced on "
            "SR-IOV VFs: remove them (security_groups: [], with port_security_enabled: false)"
        )
    return network


def free_vfs(conn: Connection, host: str, physnet: str, report: dict[str, Any] | None) -> list[dict[str, Any]]:
    """VFs of `host` on `physnet` that may be handed out, lowest (PF order, VF index) first."""
    reserved = {r[0] for r in conn.execute(select(R.c.pci_slot).where(R.c.host == host))}
    return [
        vf
        for vf in reported_vfs(report)
        if vf["physical_network"] == physnet and not vf.get("excluded") and vf.get("netdev")
        and vf["pci_slot"] not in reserved
    ]  # fmt: skip


def reserve_in_tx(tx: Tx, ctx: Context, port_row: Any, host: str) -> dict[str, Any]:
    """Reserve the lowest free VF of `host` for the direct port and bind the port to it; returns the
    binding written: {binding:host_id, binding:profile, binding:vif_type, binding:vif_details}.
    The caller (instance creation) sets device_id/device_owner."""
    network = check_port(tx, port_row)
    physnet = str(network.physical_network)
    existing = tx.conn.execute(select(R).where(R.c.port_id == port_row.id)).first()
    if existing is not None and existing.host != host:
        raise Conflict(f"Port {port_row.id} not usable for the instance: it holds a VF on host {existing.host}.",
                       type="PortNotUsable")  # fmt: skip
    # Serialise reservations per host (PostgreSQL; SQLite writers are serial already). The unique
    # constraints are the guarantee; the lock only spares concurrent creates a failed insert.
    host_row = tx.conn.execute(select(t.hosts.c.report).where(t.hosts.c.name == host).with_for_update()).first()
    if existing is None:
        candidates = free_vfs(tx.conn, host, physnet, host_row.report if host_row else None)
        if not candidates:
            raise Conflict(f"No free VF for physical network {physnet} on host {host}",
                           type="PciDeviceRequestFailed")  # fmt: skip
        vf = candidates[0]
        tx.conn.execute(
            insert(R).values(
                host=host, pci_slot=vf["pci_slot"], port_id=port_row.id, pf=vf["pf"], vf_index=int(vf["index"]),
                physical_network=physnet, pci_vendor_info=vf["pci_vendor_info"], created_at=tx.now,
            )
        )  # fmt: skip
        slot, vendor = vf["pci_slot"], vf["pci_vendor_info"]
    else:
        slot, vendor = existing.pci_slot, existing.pci_vendor_info
    profile = {**(port_row.profile or {}), "pci_vendor_info": vendor, "pci_slot": slot, "physical_network": physnet}
    values = {"host_id": host, "profile": profile, "vif_type": VIF_TYPE, "vif_details": {"vlan": _vlan(network)}}
    common.touch(tx, P, port_row.id, "port", port_row.project_id, values)
    return {
        "binding:host_id": host,
        "binding:profile": profile,
        "binding:vif_type": VIF_TYPE,
        "binding:vif_details": values["vif_details"],
    }


def release_in_tx(tx: Tx, port_row: Any) -> bool:
    """Free the port's VF and unbind it the Zun way (the port is kept): pci keys out of binding:profile,
    binding:host_id, device_id and device_owner cleared. Returns whether a VF was held."""
    held = tx.conn.execute(delete(R).where(R.c.port_id == port_row.id)).rowcount > 0
    profile = {k: v for k, v in (port_row.profile or {}).items() if k not in PCI_PROFILE_KEYS}
    values = {"host_id": "", "device_id": "", "device_owner": "", "profile": profile, "vif_type": "unbound",
              "vif_details": {}, "status": "DOWN"}  # fmt: skip
    common.touch(tx, P, port_row.id, "port", port_row.project_id, values)
    return held


def desired(conn: Connection, host: str) -> list[dict[str, Any]]:
    """The host's reservations, for its desired state (`state["sriov"]`), ordered by PF and VF."""
    rows = conn.execute(
        select(R, P.c.mac_address, P.c.network_id)
        .join(P, P.c.id == R.c.port_id)
        .where(R.c.host == host)
        .order_by(R.c.pf, R.c.vf_index)
    ).all()
    nets = {n.id: n for n in conn.execute(select(t.networks).where(t.networks.c.id.in_({r.network_id for r in rows})))}
    return [
        {
            "port_id": r.port_id, "pci_slot": r.pci_slot, "pf": r.pf, "vf_index": r.vf_index,
            "physical_network": r.physical_network, "pci_vendor_info": r.pci_vendor_info,
            "mac_address": r.mac_address, "vlan": int(_vlan(nets[r.network_id])),
        }
        for r in rows
    ]  # fmt: skip


def host_view(conn: Connection, host: str, report: dict[str, Any] | None) -> dict[str, Any] | None:
    """What /v2.0/hosts/{host} shows: PFs with their physical network and VFs with a state:
    excluded, reserved (held, not plugged yet), in-use (plugged, or taken outside cloudnet), free."""
    sriov = (report or {}).get("sriov")
    if not sriov:
        return None
    held = {
        r.pci_slot: r
        for r in conn.execute(
            select(R.c.pci_slot, R.c.port_id, P.c.status).join(P, P.c.id == R.c.port_id).where(R.c.host == host)
        )
    }
    pfs = []
    for pf in sriov.get("pfs", []):
        vfs = []
        for vf in pf.get("vfs", []):
            r = held.get(vf["pci_slot"])
            if vf.get("excluded"):
                state = "excluded"
            elif r is not None:
                state = "in-use" if r.status == "ACTIVE" else "reserved"
            else:
                state = "free" if vf.get("netdev") else "in-use"
            vfs.append({**vf, "state": state, "port_id": r.port_id if r is not None else None})
        pfs.append({**{k: v for k, v in pf.items() if k != "vfs"}, "vfs": vfs})
    return {"physical_networks": sriov.get("physical_networks", {}), "pfs": pfs}


def stale_reservations(tx: Tx, host: str) -> list[str]:
    """Reservations of `host` whose port no longer belongs to an instance there: freed (the database
    side of reconciliation). Returns the freed PCI slots."""
    rows = tx.conn.execute(
        select(R.c.pci_slot, R.c.port_id, P.c.device_id, P.c.host_id)
        .join(P, P.c.id == R.c.port_id)
        .where(R.c.host == host)
    ).all()
    live = {r[0] for r in tx.conn.execute(select(t.instances.c.id).where(t.instances.c.host == host))}
    stale = [r for r in rows if r.device_id not in live or r.host_id != host]
    for r in stale:
        tx.conn.execute(delete(R).where(R.c.host == host, R.c.pci_slot == r.pci_slot))
    return [r.pci_slot for r in stale]

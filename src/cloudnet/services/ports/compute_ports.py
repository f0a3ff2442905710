"""Ports a compute service plugs without cloudnet's instance API, as Nova does with Neutron: a port bound to a host
(`binding:host_id`), owned by a compute service (`device_owner compute:*`), of vnic type `normal`. The host's agent
makes each a tap device (named as Nova names it) for the VMM to open, and the metadata service answers its guest:
the instance is the port's `device_id`, its ports those of that device on the host.

Only ports that are nobody else's count: not an instance's NIC (cloudnet's own instances list theirs), not a port
pool's member (a claimed pool port waits for its instance), and not a device id that names a cloudnet instance.
Binding a port to a host is an admin's or the service role's (port_policy), so a member cannot make a tap appear.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import Connection, and_, exists, select

from cloudnet.store import tables as t

P, IP, I, M = t.ports, t.instance_ports, t.instances, t.pool_ports  # noqa: E741
COMPUTE_PREFIX = "compute:"


def _unclaimed() -> Any:
    """Compute-owned normal ports that are no instance's NIC and no pool's member, with a device id that is not an
    instance's."""
    return and_(
        P.c.device_owner.startswith(COMPUTE_PREFIX, autoescape=True),
        P.c.vnic_type == "normal",
        P.c.device_id != "",
        ~exists().where(IP.c.port_id == P.c.id),
        ~exists().where(M.c.port_id == P.c.id),
        ~exists().where(I.c.id == P.c.device_id),
    )


def _grouped(rows: list[Any]) -> dict[str, list[Any]]:
    """Ports by device, in creation order; a device id shared by ports of several projects is nobody's (a VM's
    NICs are its project's)."""
    by_device: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        by_device[row.device_id].append(row)
    return {d: ps for d, ps in by_device.items() if len({p.project_id for p in ps}) == 1}


def instances_on(conn: Connection, host: str) -> list[dict[str, Any]]:
    """The host's compute-plugged devices as desired-state instances (kind "vm", `compute_service` true)."""
    rows = conn.execute(
        select(P.c.id, P.c.device_id, P.c.project_id)
        .where(P.c.host_id == host, _unclaimed())
        .order_by(P.c.device_id, P.c.created_at, P.c.id)
    ).all()
    return [
        {
            "id": device, "name": device, "hostname": device, "project_id": ports[0].project_id, "netns": None,
            "kind": "vm", "compute_service": True, "ports": [p.id for p in ports], "ifnames": [], "metadata": {},
            "internal_metadata": {}, "ssh_keys": [], "user_data": None, "metadata_tokens": "optional",
            "handoff": False,
        }
        for device, ports in sorted(_grouped(list(rows)).items())
    ]  # fmt: skip


def device(conn: Connection, device_id: str) -> tuple[str, list[str]] | None:
    """A compute-plugged device's project and port ids (in creation order), or None when `device_id` names none."""
    rows = conn.execute(
        select(P.c.id, P.c.device_id, P.c.project_id)
        .where(P.c.device_id == device_id, P.c.host_id != "", _unclaimed())
        .order_by(P.c.created_at, P.c.id)
    ).all()
    ports = _grouped(list(rows)).get(device_id)
    return (ports[0].project_id, [p.id for p in ports]) if ports else None

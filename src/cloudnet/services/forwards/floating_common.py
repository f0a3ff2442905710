"""How a forward shows through Neutron's face: as a floating IP, its port specifications as port forwardings.

There is one model (the `forwards` table, LXD's shape); Neutron's floating IPs and port forwardings are a view of it:
- a forward's listen address is the floating IP's `floating_ip_address`; its `floating_network_id` is the external
  network the address comes from (for a forward an earlier version made: its network's uplink);
- its default target (`config.target_address`) is the association: `fixed_ip_address`, and `port_id` the port of
  the forward's network holding that address; `router_id` is the network's uplink router;
- each of its port specifications is a port forwarding: `internal_ip_address` its target, `internal_port_id` the
  port holding it, `external_port[_range]` / `internal_port[_range]` its listen and target ports (`a:b`);
- a floating IP associated to nothing is a forward without a network (it only holds its address; the forwards face
  lists it among its external network's forwards), status DOWN; once it targets a port it is a forward of that
  port's network, ACTIVE (a forward made through the forwards API stays its network's, ACTIVE, whatever it targets).
What a port going does depends on the face that made the forward (services/forwards/forward_targets.py): a floating
IP is
disassociated from it, as Neutron does; a forward made through the forwards API keeps its targets, as LXD does (it
shows as a floating IP whose `fixed_ip_address` no port holds, `port_id` null, until a port takes the address).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

from sqlalchemy import Connection, select

from cloudnet.errors import Conflict
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.forwards import uplinks
from cloudnet.store import tables as t

F, P, A = t.forwards, t.ports, t.ip_allocations
_SPEC_IDS = uuid.UUID("5b0f4a52-3c55-4a57-9d0e-2f6c1b9e7a10")  # namespace of ids of specs stored without one


def address_held(ctx: Context, address: str, held: Any) -> Conflict:
    """The one refusal of an address another forward (floating IP) holds, whichever face asks for it."""
    mine = ctx.is_admin or held.project_id == ctx.project_id
    who = f"floating IP {held.id}" if mine else "a floating IP of another project"
    where = "not associated"
    if mine and held.network_id:
        where = f"network forward of network {held.network_id}"
    elif mine and held.floating_network_id:  # (the forwards face lists it under the network its address is from)
        where = f"not associated; listed among the forwards of network {held.floating_network_id}"
    return Conflict(
        f"IP address {address} is already held by {who} ({where}); one address is one floating IP and one network "
        "forward: change that one, or delete it first",
        type="IpAddressAlreadyAllocated",
    )


def spec_id(forward_id: str, spec: dict[str, Any]) -> str:
    """The port forwarding id of a port specification (a stable one for specs stored before ids were)."""
    return str(spec.get("id") or uuid.uuid5(_SPEC_IDS, f"{forward_id}/{spec['protocol']}/{spec['listen_port']}"))


def port_ips(conn: Connection, port_id: str) -> list[tuple[str, str]]:
    """(subnet id, address) of a port's fixed IPs."""
    return [(s, ip) for s, ip in conn.execute(select(A.c.subnet_id, A.c.ip_address).where(A.c.port_id == port_id))]


def holders(conn: Connection, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """The ports holding (network id, address) pairs."""
    out: dict[tuple[str, str], Any] = {}
    by_net: dict[str, set[str]] = defaultdict(set)
    for nid, ip in pairs:
        by_net[nid].add(ip)
    for nid, ips in by_net.items():
        rows = conn.execute(
            select(P, A.c.ip_address).join(A, A.c.port_id == P.c.id).where(A.c.network_id == nid,
                                                                           A.c.ip_address.in_(sorted(ips)))
        ).all()  # fmt: skip
        for row in rows:
            out[(nid, row.ip_address)] = row
    return out


def _ports(text: str) -> tuple[int | None, str]:
    """A port list of LXD (`80`, `80-90`, `80,90-91`) as Neutron shows it: the port when single, and the range."""
    parts = [p.replace("-", ":") for p in text.split(",") if p]
    single = int(parts[0]) if len(parts) == 1 and ":" not in parts[0] else None
    return single, ",".join(p if ":" in p else f"{p}:{p}" for p in parts)


def pf_dict(forward: Any, spec: dict[str, Any], port: Any) -> dict[str, Any]:
    ext_port, ext_range = _ports(spec["listen_port"])
    int_port, int_range = _ports(spec.get("target_port") or spec["listen_port"])
    return {"id": spec_id(forward.id, spec), "floatingip_id": forward.id, "protocol": spec["protocol"],
            "internal_ip_address": spec["target_address"], "internal_port_id": port.id if port is not None else None,
            "internal_port": int_port, "internal_port_range": int_range, "external_port": ext_port,
            "external_port_range": ext_range, "description": spec.get("description") or ""}  # fmt: skip


def fip_dicts(conn: Connection, rows: list[Any]) -> list[dict[str, Any]]:
    """Forwards as Neutron's floating IPs (with port_details, port_forwardings and tags)."""
    routers = {nid: uplinks.router_of(conn, nid) for nid in {r.network_id for r in rows if r.network_id}}
    wanted = {(r.network_id, (r.config or {}).get("target_address")) for r in rows if r.network_id}
    wanted |= {(r.network_id, p["target_address"]) for r in rows if r.network_id for p in r.ports or []}
    ports = holders(conn, {(n, ip) for n, ip in wanted if ip})
    tags = common.load_tags(conn, [r.id for r in rows])
    out = []
    for r in rows:
        router = routers.get(r.network_id) if r.network_id else None
        external = r.floating_network_id or (router[1] if router else None)
        target = (r.config or {}).get("target_address") or None
        port = ports.get((r.network_id, target)) if target else None
        d = common.standard_fields(r, tags.get(r.id))
        d.update({
            "floating_ip_address": r.listen_address, "floating_network_id": external,
            "router_id": router[0] if router and router[1] == external else None,
            "port_id": port.id if port is not None else None, "fixed_ip_address": target,
            "status": "ACTIVE" if r.network_id else "DOWN",
            "port_details": None if port is None else {
                "name": port.name, "network_id": port.network_id, "mac_address": port.mac_address,
                "admin_state_up": port.admin_state_up, "status": port.status, "device_id": port.device_id,
                "device_owner": port.device_owner},
            "port_forwardings": [pf_dict(r, s, ports.get((r.network_id, s["target_address"]))) for s in r.ports or []],
        })  # fmt: skip
        out.append(d)
    return out

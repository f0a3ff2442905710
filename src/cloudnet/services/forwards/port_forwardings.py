"""Neutron's port forwardings (/v2.0/floatingips/{id}/port_forwardings): the port specifications of a forward.

With the `floating-ip-port-forwarding` extensions for descriptions and port ranges (`a:b`). Neutron's rules
(neutron/services/portforwarding/pf_plugin.py, reference §4.1): the internal port is one the caller sees, with an
IPv4 address (the given one, else its first); its subnet linked to the floating network by a router
(ExternalGatewayForFloatingIPNotFound); no port forwarding on a floating IP associated whole
(FloatingIPPortAlreadyAssociated), nor to a port whose address has a floating IP (PortHasBindingFloatingIP); external
ranges of one protocol do not collide, nor do two external ports lead to one internal socket. Then the forward's
own rules (forward_rules.validate) hold for the result. One forward has one network: every port forwarding of a
floating IP targets ports of one network (Neutron would allow several subnets behind one router).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Literal

from pydantic import Field, field_validator
from sqlalchemy import Connection, select, update

from cloudnet.errors import BadRequest, Conflict, NotFound
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.forwards import floating_common, floating_ips, forward_targets, uplinks
from cloudnet.services.forwards.forward_rules import parse_port_range, validate
from cloudnet.services.validation import Body, check_ip, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

F, P, S = t.forwards, t.ports, t.subnets
FILTERS = ("internal_port_id", "external_port", "protocol")
PORT = Field(None, ge=1, le=65535)
RANGE = Field(None, max_length=11)


class PortForwardingBody(Body):
    protocol: Literal["tcp", "udp"] | None = None  # what the dataplane forwards (Neutron also names icmp, sctp...)
    internal_port_id: str | None = Field(None, max_length=36)
    internal_ip_address: str | None = Field(None, max_length=64)
    internal_port: int | None = PORT
    external_port: int | None = PORT
    internal_port_range: str | None = RANGE
    external_port_range: str | None = RANGE
    description: str | None = Field(None, max_length=255)

    _ip = field_validator("internal_ip_address")(lambda v: None if v is None else check_ip(v))


def bad(message: str) -> BadRequest:
    return BadRequest(f"Bad port_forwarding request: {message}.", type="BadRequest")


def _range(text: str, what: str) -> tuple[int, int]:
    """Neutron's `N` or `N:M` (1..65535, N <= M)."""
    parts = text.split(":")
    try:
        if len(parts) > 2 or not all(p.isascii() and p.isdigit() for p in parts):
            raise ValueError
        lo, hi = int(parts[0]), int(parts[-1])
    except ValueError:
        raise BadRequest(f"Invalid input for {what}. Reason: '{text}' is not a valid port range.") from None
    if not 1 <= lo <= hi <= 65535:
        raise BadRequest(f"Invalid input for {what}. Reason: '{text}' is not a valid port range.")
    return lo, hi


def _ports(body: PortForwardingBody, side: str) -> tuple[int, int] | None:
    single, text = getattr(body, f"{side}_port"), getattr(body, f"{side}_port_range")
    if single is not None and text is not None:
        raise bad(f"{side}_port and {side}_port_range cannot be given together")
    return (single, single) if single is not None else _range(text, f"{side}_port_range") if text else None


def _lxd(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _span(text: str) -> list[tuple[int, int]]:
    return [parse_port_range(p) for p in text.split(",") if p]


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(x[0] <= y[1] and y[0] <= x[1] for x in a for y in b)


def _neutron(text: str) -> str:
    return ",".join(f"{lo}:{hi}" for lo, hi in _span(text))


# -- reading ------------------------------------------------------------------------------------


def _spec(fwd: Any, pf_id: str) -> dict[str, Any]:
    for spec in fwd.ports or []:
        if floating_common.spec_id(fwd.id, spec) == pf_id:
            return dict(spec)
    raise NotFound(f"Port Forwarding {pf_id} could not be found.", type="PortForwardingNotFound")


def _dicts(conn: Connection, fwd: Any) -> list[dict[str, Any]]:
    return list(floating_common.fip_dicts(conn, [fwd])[0]["port_forwardings"])


def list_port_forwardings(store: Store, ctx: Context, fip_id: str, filters: dict[str, list[str]]) -> list[Any]:
    unknown = sorted(set(filters) - set(FILTERS))
    if unknown:
        raise BadRequest(f"Port Forwarding filter {unknown[0]} is not supported.",
                         type="PortForwardingNotSupportFilterField")  # fmt: skip
    with store.read() as conn:
        items = _dicts(conn, floating_ips.get_row(conn, ctx, fip_id))
    return [i for i in items if all(str(i[k]) in v for k, v in filters.items())]


def get_port_forwarding(store: Store, ctx: Context, fip_id: str, pf_id: str) -> dict[str, Any]:
    with store.read() as conn:
        fwd = floating_ips.get_row(conn, ctx, fip_id)
        _spec(fwd, pf_id)
        return next(d for d in _dicts(conn, fwd) if d["id"] == pf_id)


# -- writing ------------------------------------------------------------------------------------


def create_port_forwarding(store: Store, ctx: Context, fip_id: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = parse(PortForwardingBody, body)
    for key in ("protocol", "internal_port_id"):
        if getattr(spec, key) is None:
            raise BadRequest(f"Failed to parse request. Required attribute '{key}' not specified")
    with store.write() as tx:
        fwd = floating_ips.get_row(tx.conn, ctx, fip_id)
        new_id = common.new_id()
        _put(tx, ctx, fwd, spec, {"id": new_id}, None)
        return get_port_forwarding_in(tx.conn, fip_id, new_id)


def update_port_forwarding(store: Store, ctx: Context, fip_id: str, pf_id: str, body: dict[str, Any]) -> Any:
    spec = parse(PortForwardingBody, body)
    with store.write() as tx:
        fwd = floating_ips.get_row(tx.conn, ctx, fip_id)
        current = _spec(fwd, pf_id)
        _put(tx, ctx, fwd, spec, {**current, "id": pf_id}, pf_id)
        return get_port_forwarding_in(tx.conn, fip_id, pf_id)


def get_port_forwarding_in(conn: Connection, fip_id: str, pf_id: str) -> dict[str, Any]:
    fwd = conn.execute(select(F).where(F.c.id == fip_id)).one()
    return next(d for d in _dicts(conn, fwd) if d["id"] == pf_id)


def delete_port_forwarding(store: Store, ctx: Context, fip_id: str, pf_id: str) -> None:
    with store.write() as tx:
        fwd = floating_ips.get_row(tx.conn, ctx, fip_id)
        _spec(fwd, pf_id)
        specs = [s for s in fwd.ports or [] if floating_common.spec_id(fwd.id, s) != pf_id]
        network = forward_targets.kept_network(fwd, bool(specs or (fwd.config or {}).get("target_address")))
        _store(tx, fwd, network, specs)


def _store(tx: Tx, fwd: Any, network_id: str | None, specs: list[dict[str, Any]]) -> None:
    tx.conn.execute(update(F).where(F.c.id == fwd.id).values(network_id=network_id, ports=specs, updated_at=tx.now,
                                                             revision_number=F.c.revision_number + 1))  # fmt: skip
    tx.record("forward", fwd.id, "update", fwd.project_id)


def _put(tx: Tx, ctx: Context, fwd: Any, body: PortForwardingBody, base: dict[str, Any], replacing: str | None) -> None:
    """Check the port forwarding `base` updated with `body` and write it in place of `replacing` (None: add it)."""
    given = body.model_fields_set
    if (fwd.config or {}).get("target_address"):
        port = floating_common.holders(tx.conn, {(fwd.network_id, fwd.config["target_address"])})
        held = next(iter(port.values()), None)
        raise Conflict(
            f"Cannot associate floating IP {fwd.listen_address} ({fwd.id}) with port "
            f"{held.id if held is not None else None} using fixed IP {fwd.config['target_address']}, as that fixed IP "
            f"already has a floating IP on external network {fwd.floating_network_id}.",
            type="FloatingIPPortAlreadyAssociated",
        )
    old_port = None
    if replacing is not None:
        holder = floating_common.holders(tx.conn, {(fwd.network_id, base["target_address"])})
        old_port = next(iter(holder.values()), None)
    port_id = body.internal_port_id or (old_port.id if old_port is not None else None)
    if port_id is None:
        raise NotFound(f"Port forwarding {replacing} targets no port any more: give internal_port_id",
                       type="PortNotFound")  # fmt: skip
    port = common.get_row(tx.conn, P, "port", port_id, ctx)
    ips = floating_common.port_ips(tx.conn, port.id)
    v4 = [(s, ip) for s, ip in ips if ipaddress.ip_address(ip).version == 4]
    if not v4:
        raise bad(f"Requested internal port {port.id} must allocate an IPv4 address at least")
    address = body.internal_ip_address or (base.get("target_address") if "internal_port_id" not in given else None)
    address = address or v4[0][1]
    subnet = next((s for s, ip in v4 if ip == address), None)
    if subnet is None:
        raise bad(f"Requested internal IP address {address} is not suitable for internal neutron port {port.id}, as "
                  f"its fixed_ips are {sorted(ip for _s, ip in ips)}")  # fmt: skip
    if fwd.network_id is not None and fwd.network_id != port.network_id:
        raise Conflict(
            f"Floating IP {fwd.id} forwards ports to network {fwd.network_id}: every port forwarding of "
            "one floating IP targets ports of that one network",
            type="PortForwardingNetworkMismatch",
        )
    uplinks.lock_networks(tx.conn, {port.network_id})  # as every forward writer, the network before its uplink
    external = fwd.floating_network_id or floating_ips.external_of(tx.conn, fwd)
    uplinks.lock_networks(tx.conn, {external})
    floating_ips.require_router(tx.conn, external, port, subnet)
    others = tx.conn.execute(select(F).where(F.c.network_id == port.network_id, F.c.id != fwd.id)).all()
    if any((r.config or {}).get("target_address") == address for r in others):
        raise Conflict(
            f"Cannot create port forwarding to floating IP {fwd.listen_address} ({fwd.id}) with port {port.id} using "
            f"fixed IP {address}, as that port already has a binding floating IP.",
            type="PortHasBindingFloatingIP",
        )
    new = _new_spec(body, base, address)
    specs = [s for s in fwd.ports or [] if floating_common.spec_id(fwd.id, s) != replacing]
    _check_collisions(new, specs)
    specs.append(new)
    subnets = [ipaddress.ip_network(c) for (c,) in tx.conn.execute(select(S.c.cidr).where(
        S.c.network_id == port.network_id))]  # fmt: skip
    stripped = [{k: v for k, v in s.items() if k != "id"} for s in specs]
    validate(ipaddress.ip_address(fwd.listen_address), {"config": fwd.config or {}, "ports": stripped}, subnets)
    _store(tx, fwd, port.network_id, specs)


def _new_spec(body: PortForwardingBody, base: dict[str, Any], address: str) -> dict[str, Any]:
    external = _ports(body, "external")
    internal = _ports(body, "internal")
    if external is None:
        external = _span(base["listen_port"])[0] if "listen_port" in base else None
    if internal is None and "listen_port" in base:
        internal = _span(base.get("target_port") or base["listen_port"])[0]
    if external is None or internal is None:
        missing = "external_port" if external is None else "internal_port"
        raise BadRequest(f"Failed to parse request. Required attribute '{missing}' not specified")
    sizes = (external[1] - external[0] + 1, internal[1] - internal[0] + 1)
    if sizes[1] not in (1, sizes[0]):
        raise bad("Invalid ranges of internal and/or external ports. The relation between internal and external "
                  "ports must be N-N or 1-N")  # fmt: skip
    same = internal == external
    description = body.description if body.description is not None else base.get("description", "")
    return {"id": base["id"], "description": description, "protocol": body.protocol or base["protocol"],
            "listen_port": _lxd(*external), "target_port": "" if same else _lxd(*internal),
            "target_address": address}  # fmt: skip


def _check_collisions(new: dict[str, Any], specs: list[dict[str, Any]]) -> None:
    ext, internal = _span(new["listen_port"]), _span(new["target_port"] or new["listen_port"])
    for s in specs:
        if s["protocol"] != new["protocol"]:
            continue
        if _overlap(_span(s["listen_port"]), ext):
            raise bad(f"There is a port collision with the external_port. The following ranges collide: "
                      f"{_neutron(s['listen_port'])} and {_neutron(new['listen_port'])}")  # fmt: skip
        theirs = _span(s.get("target_port") or s["listen_port"])
        if s["target_address"] == new["target_address"] and _overlap(theirs, internal):
            raise bad(f"There is a port collision with the internal_port. The following ranges collide: "
                      f"{_neutron(s.get('target_port') or s['listen_port'])} and "
                      f"{_neutron(new['target_port'] or new['listen_port'])}")  # fmt: skip

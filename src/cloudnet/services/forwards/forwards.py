"""Network forwards (LXD's shape and rules): one external address forwarded whole or per port.

Bodies are normalised and validated as LXD does (services/forwards/forward_rules.py), with the reference's fixes: every
failure is a 400 (not 500), ports are 1..65535, the listen address in the path is normalised, PATCH keeps the
description, and If-Match is really checked. A forward lives as long as its network (deleted with it) and keeps
what it uses (services/forwards/forward_deps.py refuses taking it away); it outlives the ports its targets are on
(services/forwards/forward_targets.py). A floating IP associated to nothing (Neutron's face) is listed among the
forwards of
the external network its address comes from, so that every address either face refuses is one it shows.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from cloudnet.errors import BadRequest, Conflict, NotFound, PreconditionFailed
from cloudnet.services import common, quotas
from cloudnet.services.context import Context
from cloudnet.services.forwards import floating_common, forward_deps, forward_targets, uplinks
from cloudnet.services.forwards.forward_rules import IP, canonical_ip, normalise, targets, validate
from cloudnet.services.forwards.uplinks import parse_ip, quoted
from cloudnet.services.rbac import grants
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

F = t.forwards
N = t.networks
BODY_KEYS = {"listen_address", "description", "config", "ports"}
MAX_DESCRIPTION = 255  # the column's size


def _check_description(value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise BadRequest("Invalid description: expected a string")
    if value is not None and len(value) > MAX_DESCRIPTION:
        raise BadRequest(f"Invalid description: longer than {MAX_DESCRIPTION} characters")


# -- representation -----------------------------------------------------------------------------


def _stored(row: Any) -> dict[str, Any]:
    return {
        "listen_address": row.listen_address,
        "description": row.description,
        "config": row.config or {},
        "ports": _without_ids(row.ports or []),
    }


def _without_ids(ports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Port specifications as LXD has them: their ids are for Neutron's face (port forwardings) only."""
    return [{k: v for k, v in p.items() if k != "id"} for p in ports]


def to_dict(row: Any, network_name: str = "") -> dict[str, Any]:
    d = _stored(row)
    # (a floating IP associated to nothing shows under the external network that lists it)
    d.update({"id": row.id, "network_id": row.network_id or row.floating_network_id, "network": network_name,
              "location": "", "project_id": row.project_id, "created_at": common.fmt_time(row.created_at),
              "updated_at": common.fmt_time(row.updated_at), "revision_number": row.revision_number})  # fmt: skip
    return d


def etag(row: Any) -> str:
    """SHA-256 over [listen_address, description, config, ports], as LXD computes it."""
    s = _stored(row)
    data = [s["listen_address"], s["description"], s["config"], s["ports"]]
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _clean_ports(ports: list[dict[str, Any]], current: Any = None) -> list[dict[str, Any]]:
    """The port specifications as stored: each with the id the port forwarding API shows it by, kept across
    changes while its protocol and listen ports stay (`current`: the forward's row, if it exists)."""
    specs = current.ports or [] if current is not None else []
    ids = {(p["protocol"], p["listen_port"]): floating_common.spec_id(current.id, p) for p in specs}
    return [
        {"id": ids.get((p["protocol"], p["listen_port"])) or common.new_id(), "description": p.get("description") or "",
         "protocol": p["protocol"], "listen_port": p["listen_port"], "target_port": p.get("target_port") or "",
         "target_address": p["target_address"]}
        for p in ports
    ]  # fmt: skip


def _clean_config(config: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(config.items()) if v != ""}  # empty values are not stored (LXD)


# -- lookups ------------------------------------------------------------------------------------


def resolve_network(conn: Connection, ctx: Context, ident: str, *, external: bool = False) -> Any:
    """`{network}` in the path: an id, else a unique name (visible to the caller; `external`: an external network
    is, for the floating IPs on it the caller may see)."""

    def visible(r: Any) -> bool:
        if ctx.is_admin or r.project_id == ctx.project_id:
            return True
        return bool(external and r.router_external and grants.actions_for(conn, "network", r.id, ctx.project_id))

    row = conn.execute(select(N).where(N.c.id == ident)).first()
    if row is None:
        rows = [r for r in conn.execute(select(N).where(N.c.name == ident)).all() if visible(r)]
        if len(rows) > 1:
            raise Conflict(f"More than one network named {ident!r}; use its id", type="NetworkNameAmbiguous")
        row = rows[0] if rows else None
    if row is None or not visible(row):
        raise NotFound("Network not found", type="NetworkNotFound")
    return row


def _listen(value: str) -> IP:
    try:
        return parse_ip(value)
    except ValueError:
        raise BadRequest(f"Failed parsing address forward listen address {quoted(value)}: invalid IP address") from None


def _check_not_taken(conn: Connection, ctx: Context, network_id: str, listen: IP) -> None:
    held = conn.execute(
        select(F.c.id, F.c.network_id, F.c.floating_network_id, F.c.project_id).where(F.c.listen_address == str(listen))
    ).first()
    if held is not None and held.network_id == network_id:
        raise Conflict("A forward for that listen address already exists", type="NetworkForwardExists")
    if held is not None and held.network_id is None:  # a floating IP (Neutron's face) holding it, associated to
        raise floating_common.address_held(ctx, str(listen), held)  # nothing; another network's: LXD's words below


def _listed(net: Any) -> Any:
    """The forwards a network lists: its own; an external network's, also the floating IPs on it associated to
    nothing (they are no network's forwards, and would otherwise be shown by no forwards list)."""
    if not net.router_external:
        return F.c.network_id == net.id
    return (F.c.network_id == net.id) | (F.c.network_id.is_(None) & (F.c.floating_network_id == net.id))


def _visible(ctx: Context, net: Any) -> Any:
    """What the caller sees of what a network lists (on an external network: their own floating IPs)."""
    return _listed(net) if ctx.is_admin or net.project_id == ctx.project_id else (
        _listed(net) & (F.c.project_id == ctx.project_id))  # fmt: skip


def _get(conn: Connection, ctx: Context, net: Any, listen: str) -> Any:
    row = conn.execute(select(F).where(_visible(ctx, net), F.c.listen_address == canonical_ip(listen))).first()
    if row is None:
        raise NotFound("Network forward not found", type="NetworkForwardNotFound")
    return row


# -- operations ---------------------------------------------------------------------------------


def list_forwards(store: Store, ctx: Context, network: str) -> list[dict[str, Any]]:
    with store.read() as conn:
        net = resolve_network(conn, ctx, network, external=True)
        rows = conn.execute(select(F).where(_visible(ctx, net)).order_by(F.c.listen_address)).all()
        return [to_dict(r, net.name) for r in rows]


def get_forward(store: Store, ctx: Context, network: str, listen: str) -> tuple[dict[str, Any], str]:
    with store.read() as conn:
        net = resolve_network(conn, ctx, network, external=True)
        row = _get(conn, ctx, net, listen)
        return to_dict(row, net.name), etag(row)


def create_forward(store: Store, ctx: Context, network: str, body: Any) -> dict[str, Any]:
    body = _body(body, create=True)
    with store.write() as tx:
        net = resolve_network(tx.conn, ctx, network)
        if "listen_address" not in body or not isinstance(body["listen_address"], str):
            raise BadRequest("Missing listen_address")
        listen = _listen(body["listen_address"])
        _check_not_taken(tx.conn, ctx, net.id, listen)
        uplink = uplinks.require_uplink(tx.conn, net.id, lock=True)
        _check_not_taken(tx.conn, ctx, net.id, listen)  # again: a racing create may have committed it meanwhile
        uplinks.check_external_address(tx.conn, uplink, net.id, listen, what="Listen address")
        link = forward_deps.require_link(
            tx.conn, uplink, net.id, listen.version, f"Listen address {quoted(str(listen))}"
        )
        _check_description(body.get("description"))
        validate(listen, body, link.subnets.values())
        forward_deps.require_reachable(link, targets(body.get("config"), body.get("ports")))
        quotas.enforce(tx, net.project_id, "forward", 1)
        row = {
            "id": common.new_id(), "network_id": net.id, "floating_network_id": uplink.network_id,
            "listen_address": str(listen),
            "description": body.get("description") or "", "config": _clean_config(body.get("config") or {}),
            "ports": _clean_ports(body.get("ports") or []), "project_id": net.project_id,
            "created_at": tx.now, "updated_at": tx.now, "revision_number": 0, "origin": forward_targets.FORWARD,
        }  # fmt: skip
        try:
            tx.conn.execute(insert(F).values(**row))
        except IntegrityError:  # taken through another uplink since the checks (listen addresses are unique)
            raise Conflict("A forward for that listen address already exists", type="NetworkForwardExists") from None
        tx.record("forward", row["id"], "create", net.project_id)
        return to_dict(tx.conn.execute(select(F).where(F.c.id == row["id"])).one(), net.name)


def update_forward(
    store: Store, ctx: Context, network: str, listen: str, body: Any, *, patch: bool, if_match: str | None
) -> dict[str, Any]:
    body = _body(body, create=False)
    with store.write() as tx:
        net = resolve_network(tx.conn, ctx, network, external=True)
        # Its router link is not taken away meanwhile (forward_deps), and concurrent updates of it take turns (each
        # checks If-Match against what the one before it committed).
        uplinks.lock_networks(tx.conn, {net.id})
        row = _get(tx.conn, ctx, net, listen)
        if row.network_id is None:
            raise Conflict(
                f"Forward {row.listen_address} is floating IP {row.id}, associated to nothing: associate it through "
                "/v2.0/floatingips, or delete it",
                type="FloatingIPNotAssociated",
            )
        _check_etag(row, if_match)
        current = _stored(row)
        if patch:
            # LXD merges config (request wins) and keeps ports when absent; we keep the description too.
            if body.get("config") is not None and not isinstance(body["config"], dict):
                raise BadRequest("Invalid config: expected a map of strings")
            config = {**current["config"], **(body.get("config") or {})}
            merged = {
                "description": body.get("description", current["description"]),
                "config": config,
                "ports": body["ports"] if body.get("ports") is not None else current["ports"],
            }
        else:
            merged = {"description": body.get("description") or "", "config": body.get("config") or {},
                      "ports": body.get("ports") or []}  # fmt: skip
        _check_description(merged["description"])
        link = forward_deps.link_of(tx.conn, net.id)
        validate(ipaddress.ip_address(row.listen_address), merged, link.subnets.values())
        forward_deps.require_reachable(link, targets(merged["config"], merged["ports"]))
        values = {"description": merged["description"] or "", "config": _clean_config(merged["config"]),
                  "ports": _clean_ports(merged["ports"], row)}  # fmt: skip
        if {**values, "ports": _without_ids(values["ports"])} == {k: current[k] for k in values}:
            return to_dict(row, net.name)  # nothing changed: nothing to apply
        tx.conn.execute(
            update(F)
            .where(F.c.id == row.id)
            .values(**values, updated_at=tx.now, revision_number=F.c.revision_number + 1)
        )
        tx.record("forward", row.id, "update", net.project_id)
        return to_dict(tx.conn.execute(select(F).where(F.c.id == row.id)).one(), net.name)


def delete_forward(store: Store, ctx: Context, network: str, listen: str) -> None:
    with store.write() as tx:
        net = resolve_network(tx.conn, ctx, network, external=True)
        row = _get(tx.conn, ctx, net, listen)
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == row.id))
        tx.conn.execute(delete(F).where(F.c.id == row.id))
        tx.record("forward", row.id, "delete", row.project_id)


def delete_for_network(tx: Tx, network_id: str) -> None:
    """The network's forwards (LXD), and the floating IPs on it (an external network) that are associated to nothing
    (as Neutron deletes those; an associated one needs a router gateway there, which keeps the network). Floating
    IPs made through Neutron's face that target the network are disassociated instead, as their ports going would."""
    unassociated = (F.c.floating_network_id == network_id) & F.c.network_id.is_(None)
    rows = tx.conn.execute(select(F).where((F.c.network_id == network_id) | unassociated).order_by(F.c.id)).all()
    for row in rows:
        if row.network_id is not None and row.origin == forward_targets.FLOATINGIP:
            forward_targets.disassociate(tx, row)
            continue
        fid, project = row.id, row.project_id
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == fid))
        tx.conn.execute(delete(F).where(F.c.id == fid))
        tx.record("forward", fid, "delete", project)


def _body(body: Any, *, create: bool) -> dict[str, Any]:
    if isinstance(body, dict) and set(body) == {"forward"} and isinstance(body["forward"], dict):
        body = body["forward"]  # Neutron-style envelope, accepted as well as LXD's bare body
    if not isinstance(body, dict):
        raise BadRequest("Body contains invalid data")
    allowed = BODY_KEYS if create else BODY_KEYS - {"listen_address"}
    extra = set(body) - allowed
    if extra:
        raise BadRequest(f"Unrecognized attribute(s) '{', '.join(sorted(extra))}'")
    return normalise(body)


def _check_etag(row: Any, if_match: str | None) -> None:
    if not if_match:
        return
    client = if_match.strip().strip('"')
    server = etag(row)
    if client != server:
        raise PreconditionFailed(
            f"ETag does not match: {server} vs {client}. The configuration has been modified since this change "
            "began. Please retrieve the updated configuration before proceeding."
        )

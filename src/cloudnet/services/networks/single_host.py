"""The Linux dataplane is single-host: each of its networks lives on the one host its first bound port is on.

With `--dataplane linux` (the embedded default) a port bound to another host than the one its network is already
realised on fails to bind (binding:vif_type binding_failed, status ERROR, the reason in binding:vif_details, so its
instance is ERROR with a status_reason that names OVN); its host's agent is never asked to plug it. A router is
realised where the networks behind it are, so it must be on one host only: the networks joined by routers' legs
live together (a placement is checked against the whole group), a router leg that would join networks of two hosts
is refused (409), and so is a port pool on another host than its network's. With `--dataplane ovn` there is no
such limit: OVN carries a network over every chassis.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, select, update

from cloudnet.errors import Conflict
from cloudnet.services.ports.port_specs import METADATA_OWNER, ROUTER_GATEWAY, ROUTER_INTERFACE
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

P = t.ports
HOSTLESS = (ROUTER_INTERFACE, ROUTER_GATEWAY, METADATA_OWNER)  # (shared by every host of a network)
# Marks a binding this module refused, in binding:vif_details: such a port is left out of its host's desired state.
# A binding that failed on the agent (a step that failed) carries no mark: it stays in the state and is retried.
REFUSED = "single_host_refused"
MAX_HOPS = 16


def refused(vif_details: Any) -> bool:
    return isinstance(vif_details, dict) and vif_details.get(REFUSED) is True


class Scope:
    """What the server's dataplane allows (one per store; the server sets it at start)."""

    def __init__(self) -> None:
        self.multi_host = False
        self.dataplane = "linux"

    def changed(self, _events: Any, _tx: Any) -> None:
        pass


def scope(store: Store | None) -> Scope:
    return store.changes.follower(Scope) if store is not None else Scope()


def configure(store: Store, dataplane: str) -> None:
    scope(store).multi_host = dataplane == "ovn"
    scope(store).dataplane = dataplane


def reason(network_id: str, host: str) -> str:
    return (f"network {network_id} is realised on host {host}; the Linux dataplane is single-host: "
            "use --dataplane ovn for more hosts")  # fmt: skip


def check_bindings(tx: Tx, port_ids: Iterable[str], host: str) -> list[str]:
    """Fail the binding of those ports (bound to `host`) whose network is already on another host; returns them.
    A port this module refused before and that now fits (bound again, to the right host, or to none) is unbound
    again."""
    if scope(tx.store).multi_host:
        return []
    failed = []
    rows = tx.conn.execute(select(P.c.id, P.c.network_id, P.c.vif_details).where(P.c.id.in_(list(port_ids))))
    for port_id, network_id, details in rows.all():
        other = _placed(tx.conn, network_id, host, but=port_id) if host else None
        if other is None:
            if refused(details):
                tx.conn.execute(update(P).where(P.c.id == port_id).values(vif_type="unbound", vif_details={},
                                                                         status="DOWN"))  # fmt: skip
                tx.record("port", port_id, "update", None)
            continue
        tx.conn.execute(update(P).where(P.c.id == port_id).values(
            vif_type="binding_failed", vif_details={"reason": reason(network_id, other), REFUSED: True},
            status="ERROR"))  # fmt: skip
        tx.record("port", port_id, "update", None)
        failed.append(port_id)
    return failed


def check_placement(tx: Tx, network_id: str, host: str) -> None:
    """Refuse (409) what would plumb `network_id` on `host` (a port pool) when it is realised on another host."""
    if scope(tx.store).multi_host:
        return
    other = _placed(tx.conn, network_id, host)
    if other is not None:
        text = reason(network_id, other)
        raise Conflict(f"{text[0].upper()}{text[1:]}.", type="NetworkOnAnotherHost")


def check_join(tx: Tx, router_id: str, network_id: str) -> None:
    """Refuse (409) a leg of `router_id` on `network_id` when the router's networks and that one live on two hosts:
    a router is realised on one host."""
    if scope(tx.store).multi_host:
        return
    legs = set(tx.conn.execute(select(P.c.network_id).where(P.c.device_owner == ROUTER_INTERFACE,
                                                             P.c.device_id == router_id)).scalars())  # fmt: skip
    if not legs or network_id in legs:
        return
    theirs, ours = _host_of(tx.conn, _group(tx.conn, {network_id})), _host_of(tx.conn, _group(tx.conn, legs))
    if theirs is not None and ours is not None and theirs[0] != ours[0]:
        raise Conflict(
            f"Router {router_id} is realised on host {ours[0]} (network {ours[1]}) and network {network_id} on host "
            f"{theirs[0]}; the Linux dataplane is single-host: use --dataplane ovn for more hosts.",
            type="RouterSpansHosts",
        )


def _placed(conn: Connection, network_id: str, host: str, but: str | None = None) -> str | None:
    """The host other than `host` that `network_id`'s group (the networks routers join to it) is realised on."""
    found = _host_of(conn, _group(conn, {network_id}), not_on=host, but=but)
    return found[0] if found is not None else None


def _host_of(
    conn: Connection, network_ids: set[str], not_on: str | None = None, but: str | None = None
) -> tuple[str, str] | None:
    """(host, network) of the first bound port, in order of creation, on these networks (and not on `not_on`)."""
    query = select(P.c.host_id, P.c.network_id).where(
        P.c.network_id.in_(network_ids), P.c.host_id != "", P.c.device_owner.not_in(HOSTLESS),
        P.c.vif_type != "binding_failed")  # fmt: skip
    if not_on is not None:
        query = query.where(P.c.host_id != not_on)
    if but is not None:
        query = query.where(P.c.id != but)
    row = conn.execute(query.order_by(P.c.created_at, P.c.id).limit(1)).first()
    return (row[0], row[1]) if row is not None else None


def _group(conn: Connection, network_ids: set[str]) -> set[str]:
    """These networks and those routers' legs join to them, transitively (bounded: a router has few legs, and
    MAX_HOPS rounds reach further than any sane topology)."""
    group, frontier = set(network_ids), set(network_ids)
    for _round in range(MAX_HOPS):
        routers = select(P.c.device_id).where(P.c.device_owner == ROUTER_INTERFACE, P.c.network_id.in_(frontier))
        joined = set(conn.execute(select(P.c.network_id).where(P.c.device_owner == ROUTER_INTERFACE,
                                                               P.c.device_id.in_(routers))).scalars())  # fmt: skip
        frontier = joined - group
        if not frontier:
            break
        group |= frontier
    return group

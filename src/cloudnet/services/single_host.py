"""The Linux dataplane is single-host: each of its networks lives on the one host its first bound port is on.

With `--dataplane linux` (the embedded default) a port bound to another host than the one its network is already
realised on fails to bind (binding:vif_type binding_failed, status ERROR, the reason in binding:vif_details, so its
instance is ERROR with a status_reason that names OVN); its host's agent is never asked to plug it. Routers follow
their networks (a router is realised where the networks behind it are). With `--dataplane ovn` there is no such
limit: OVN carries a network over every chassis.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select, update

from cloudnet.services import metadata_ports
from cloudnet.services.port_specs import ROUTER_GATEWAY, ROUTER_INTERFACE
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

P = t.ports
HOSTLESS = (ROUTER_INTERFACE, ROUTER_GATEWAY, metadata_ports.DEVICE_OWNER)  # (shared by every host of a network)
# Marks a binding this module refused, in binding:vif_details: such a port is left out of its host's desired state.
# A binding that failed on the agent (a step that failed) carries no mark: it stays in the state and is retried.
REFUSED = "single_host_refused"


def refused(vif_details: Any) -> bool:
    return isinstance(vif_details, dict) and vif_details.get(REFUSED) is True


class Scope:
    """What the server's dataplane allows (one per store; the server sets it at start)."""

    def __init__(self) -> None:
        self.multi_host = False

    def changed(self, _events: Any, _tx: Any) -> None:
        pass


def scope(store: Store | None) -> Scope:
    return store.changes.follower(Scope) if store is not None else Scope()


def configure(store: Store, dataplane: str) -> None:
    scope(store).multi_host = dataplane == "ovn"


def reason(network_id: str, host: str) -> str:
    return (f"network {network_id} is realised on host {host}; the Linux dataplane is single-host: "
            "use --dataplane ovn for more hosts")  # fmt: skip


def check_bindings(tx: Tx, port_ids: Iterable[str], host: str) -> list[str]:
    """Fail the binding of those ports (bound to `host`) whose network is already on another host; returns them."""
    if not host or scope(tx.store).multi_host:
        return []
    failed = []
    for port_id, network_id in tx.conn.execute(select(P.c.id, P.c.network_id).where(P.c.id.in_(list(port_ids)))):
        other = tx.conn.execute(
            select(P.c.host_id)
            .where(P.c.network_id == network_id, P.c.host_id != "", P.c.host_id != host, P.c.id != port_id,
                   P.c.device_owner.not_in(HOSTLESS), P.c.vif_type != "binding_failed")
            .order_by(P.c.created_at, P.c.id)
            .limit(1)
        ).scalar()  # fmt: skip
        if other is None:
            continue
        tx.conn.execute(update(P).where(P.c.id == port_id).values(
            vif_type="binding_failed", vif_details={"reason": reason(network_id, other), REFUSED: True},
            status="ERROR"))  # fmt: skip
        tx.record("port", port_id, "update", None)
        failed.append(port_id)
    return failed

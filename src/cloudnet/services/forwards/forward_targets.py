"""A forward's targets and the ports holding them: what a port going does to a forward, and what the dataplane does.

A target is an address, not a port. Which face made the forward (`origin`) decides what its ports going does to it:
- made through the forwards API (LXD): nothing. The forward stays, listed with its targets; traffic finds no one
  until a port of its network holds a target address again (LXD keeps a forward when its instance goes);
- made through Neutron's API (a floating IP): the targets on the addresses that went are dropped, as Neutron
  disassociates a floating IP from a deleted port and deletes the port forwardings to it; one left targeting nothing
  is a floating IP associated to nothing again (no network; the forwards face lists it under its external network).
The same holds for an address taken off a port (`fixed_ips` update) and for a network deleted with its forwards
(services/forwards/forwards.py: the forwards API's are deleted with it, Neutron's floating IPs disassociated).

The dataplane realises only the targets a port holds (`live`): while no port holds one, neither nft nor NB has a
rule for it, and it comes back with the port that takes the address (a port event, which the agents follow). IPAM
never hands a target address out by itself (`on_network`): the next port on it is one that asks for it, so that no
port (of another project, on a shared network) is given a forward's traffic it did not ask for.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, update

from cloudnet.services.forwards import uplinks
from cloudnet.store import tables as t
from cloudnet.store.db import Tx

F, A = t.forwards, t.ip_allocations
FORWARD, FLOATINGIP = "forward", "floatingip"  # forwards.origin: the face that made it


def kept_network(row: Any, targeting: bool) -> str | None:
    """The network a forward is on after a change (`targeting`: whether it still targets something): one made
    through the forwards API stays its network's; a floating IP targeting nothing is associated to nothing."""
    return row.network_id if targeting or row.origin == FORWARD else None


def _without(row: Any, ips: set[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A forward's config and port specifications without the targets on `ips`."""
    config = {k: v for k, v in (row.config or {}).items() if not (k == "target_address" and v in ips)}
    return config, [s for s in row.ports or [] if s["target_address"] not in ips]


def disassociate(tx: Tx, row: Any, ips: set[str] | None = None) -> None:
    """Drop a floating IP's targets on `ips`, as Neutron does when their port goes; None: its network goes, and the
    floating IP is associated to nothing."""
    config, specs = _without(row, targets_of(row) if ips is None else ips)
    targeting = bool(config.get("target_address") or specs)
    if ips is not None and (config, specs) == (row.config or {}, list(row.ports or [])):
        return
    network = row.network_id if ips is not None and targeting else None
    tx.conn.execute(
        update(F).where(F.c.id == row.id).values(network_id=network, config=config, ports=specs, updated_at=tx.now,
                                                 revision_number=F.c.revision_number + 1)
    )  # fmt: skip
    tx.record("forward", row.id, "update", row.project_id)


def release(tx: Tx, network_id: str, ips: set[str]) -> None:
    """No port of the network holds `ips` any more (their port goes, or they were taken off it): floating IPs
    targeting them are disassociated from them; forwards made through the forwards API keep them."""
    if not ips:
        return
    neutron = (F.c.network_id == network_id) & (F.c.origin == FLOATINGIP)
    if tx.conn.execute(select(F.c.id).where(neutron).limit(1)).first() is None:
        return  # the usual case: one indexed look, nothing more on a port delete
    uplinks.lock_networks(tx.conn, {network_id})  # as every writer of the network's forwards
    for row in tx.conn.execute(select(F).where(neutron).order_by(F.c.id)).all():
        disassociate(tx, row, ips)


def targets_of(row: Any) -> set[str]:
    """Every address a forward sends traffic to."""
    whole = (row.config or {}).get("target_address")
    return ({whole} if whole else set()) | {s["target_address"] for s in row.ports or []}


def targets(conn: Connection) -> set[tuple[str, str]]:
    """(network, address) of every forward target: a port taking or leaving one changes what the dataplane holds."""
    rows = conn.execute(select(F.c.network_id, F.c.config, F.c.ports).where(F.c.network_id.is_not(None))).all()
    return {(r.network_id, ip) for r in rows for ip in targets_of(r)}


def on_network(conn: Connection, network_id: str) -> set[str]:
    """The addresses the network's forwards send traffic to."""
    rows = conn.execute(select(F.c.config, F.c.ports).where(F.c.network_id == network_id)).all()
    return {ip for r in rows for ip in targets_of(r)}


def held(conn: Connection, pairs: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which (network, address) pairs a port holds."""
    by_net: dict[str, set[str]] = defaultdict(set)
    for nid, ip in pairs:
        by_net[nid].add(ip)
    out: set[tuple[str, str]] = set()
    for nid, ips in sorted(by_net.items()):
        ordered = sorted(ips)
        for i in range(0, len(ordered), 1000):  # (bounded IN lists)
            query = select(A.c.ip_address).where(A.c.network_id == nid, A.c.ip_address.in_(ordered[i : i + 1000]))
            out |= {(nid, ip) for ip in conn.execute(query).scalars()}
    return out


@dataclass(frozen=True)
class Live:
    """A forward as the dataplane realises it: only the targets a port holds. `idle`: the targets left out."""

    id: str
    network_id: str
    listen_address: str
    revision_number: int
    config: dict[str, Any]
    ports: list[dict[str, Any]]
    idle: tuple[str, ...]


def live(conn: Connection, rows: Iterable[Any]) -> list[Live]:
    """Forwards of networks (rows with a network) as the dataplane realises them."""
    rows = [r for r in rows if r.network_id is not None]
    holding = held(conn, {(r.network_id, ip) for r in rows for ip in targets_of(r)})
    out = []
    for r in rows:
        idle = {ip for ip in targets_of(r) if (r.network_id, ip) not in holding}
        config, specs = _without(r, idle)
        out.append(Live(r.id, r.network_id, r.listen_address, r.revision_number, config, specs, tuple(sorted(idle))))
    return out

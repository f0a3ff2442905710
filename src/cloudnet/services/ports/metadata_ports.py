"""One metadata port per network (Neutron OVN's `network:distributed` port): the address the metadata
namespace of every host has on the network, and the next hop instances use for 169.254.169.254."""

from __future__ import annotations

from sqlalchemy import Connection, select

from cloudnet.services.context import Context
from cloudnet.services.ports import port_specs, ports
from cloudnet.store import tables as t
from cloudnet.store.db import Tx

DEVICE_OWNER = port_specs.METADATA_OWNER


def find(conn: Connection, network_id: str) -> str | None:
    """The network's metadata port, if it has one."""
    P = t.ports
    stmt = select(P.c.id).where(P.c.network_id == network_id, P.c.device_owner == DEVICE_OWNER)
    existing = conn.execute(stmt).scalar()
    return str(existing) if existing else None


def ensure(tx: Tx, network_id: str) -> str | None:
    """The network's metadata port, created with an address on each of its subnets; None without subnets."""
    existing = find(tx.conn, network_id)
    if existing:
        return existing
    network = tx.conn.execute(select(t.networks.c.project_id).where(t.networks.c.id == network_id)).first()
    has_subnet = tx.conn.execute(select(t.subnets.c.id).where(t.subnets.c.network_id == network_id)).first()
    if network is None or has_subnet is None:
        return None
    spec = port_specs.PortCreate(
        network_id=network_id, project_id=network.project_id, name="metadata", device_id=f"ovnmeta-{network_id}",
        device_owner=DEVICE_OWNER,
    )  # fmt: skip
    (port_id,) = ports.create_in_tx(tx, Context.admin(network.project_id), [spec], quota=False)
    return port_id

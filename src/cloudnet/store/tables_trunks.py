"""Trunks (Neutron's `trunk` extension): a parent port and its VLAN subports. On tables.py's MetaData.

What the database enforces: a port is the parent of one trunk at most (`uq_trunks_port_id`) and the subport of one
trunk at most (the subports' primary key), and a trunk's segmentation ids are unique (`uq_subports_trunk_id_...`).
That a parent is no subport and a subport no parent is checked by services/trunks/trunks.py under the write.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, ForeignKey, Integer, String, Table, UniqueConstraint

from cloudnet.store.tables import ID, _standard, metadata

trunks = Table(
    "trunks",
    metadata,
    *_standard(),
    Column("port_id", ID, ForeignKey("ports.id"), nullable=False),
    Column("admin_state_up", Boolean, nullable=False, default=True),
    UniqueConstraint("port_id", name="uq_trunks_port_id"),
)

subports = Table(
    "subports",
    metadata,
    Column("port_id", ID, ForeignKey("ports.id"), primary_key=True),
    Column("trunk_id", ID, ForeignKey("trunks.id"), nullable=False, index=True),
    Column("segmentation_type", String(32), nullable=False),
    Column("segmentation_id", Integer, nullable=False),
    UniqueConstraint("trunk_id", "segmentation_type", "segmentation_id",
                     name="uq_subports_trunk_id_segmentation_type_segmentation_id"),
)  # fmt: skip

__all__ = ["subports", "trunks"]

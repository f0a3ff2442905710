"""SR-IOV VF reservations

One row per VF a direct port holds: unique per (host, pci_slot) and per port.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 01:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sriov_reservations",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pci_slot", sa.String(length=32), nullable=False),
        sa.Column("port_id", sa.String(length=36), nullable=False),
        sa.Column("pf", sa.String(length=64), nullable=False),
        sa.Column("vf_index", sa.Integer(), nullable=False),
        sa.Column("physical_network", sa.String(length=64), nullable=False),
        sa.Column("pci_vendor_info", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["port_id"], ["ports.id"], name=op.f("fk_sriov_reservations_port_id_ports"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("host", "pci_slot", name=op.f("pk_sriov_reservations")),
        sa.UniqueConstraint("port_id", name=op.f("uq_sriov_reservations_port_id")),
    )


def downgrade() -> None:
    op.drop_table("sriov_reservations")

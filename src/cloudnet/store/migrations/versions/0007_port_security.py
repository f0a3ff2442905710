"""Port security on networks, allowed address pairs on ports

`networks.port_security_enabled` (what a new port of the network gets when it says nothing; true for the
networks that exist), `allowed_address_pairs` (port, resolved MAC, IP or CIDR), and the index of a group's
members covering their port ids.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("networks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("port_security_enabled", sa.Boolean(), nullable=False, server_default=sa.true()))
    op.create_table(
        "allowed_address_pairs",
        sa.Column("port_id", sa.String(length=36), nullable=False),
        sa.Column("mac_address", sa.String(length=32), nullable=False),
        sa.Column("ip_address", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["port_id"], ["ports.id"], name=op.f("fk_allowed_address_pairs_port_id_ports"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("port_id", "mac_address", "ip_address", name=op.f("pk_allowed_address_pairs")),
    )
    # A group's members from the index alone (the agents' desired state reads them on every event).
    with op.batch_alter_table("port_security_groups", schema=None) as batch_op:
        batch_op.drop_index("ix_port_security_groups_security_group_id")
        batch_op.create_index(
            "ix_port_security_groups_security_group_id_port_id", ["security_group_id", "port_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("port_security_groups", schema=None) as batch_op:
        batch_op.drop_index("ix_port_security_groups_security_group_id_port_id")
        batch_op.create_index("ix_port_security_groups_security_group_id", ["security_group_id"], unique=False)
    op.drop_table("allowed_address_pairs")
    with op.batch_alter_table("networks", schema=None) as batch_op:
        batch_op.drop_column("port_security_enabled")

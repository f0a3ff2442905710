"""Port security on networks, allowed address pairs on ports

`networks.port_security_enabled` (what a new port of the network gets when it says nothing; true for the
networks that exist) and `allowed_address_pairs` (port, resolved MAC, IP or CIDR).

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


def downgrade() -> None:
    op.drop_table("allowed_address_pairs")
    with op.batch_alter_table("networks", schema=None) as batch_op:
        batch_op.drop_column("port_security_enabled")

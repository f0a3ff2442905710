"""floating IPs as forwards

A forward may exist without a network while it targets nothing (a floating IP not associated to a port), and
records the external network its address comes from. Existing forwards keep their network; their external
network is their uplink's, found when needed.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("forwards", schema=None) as batch_op:
        batch_op.alter_column("network_id", existing_type=sa.String(length=36), nullable=True)
        batch_op.add_column(sa.Column("floating_network_id", sa.String(length=36), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_forwards_floating_network_id_networks"), "networks", ["floating_network_id"], ["id"]
        )
        batch_op.create_index(batch_op.f("ix_forwards_floating_network_id"), ["floating_network_id"], unique=False)


def downgrade() -> None:
    op.execute("DELETE FROM forwards WHERE network_id IS NULL")
    with op.batch_alter_table("forwards", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_forwards_floating_network_id"))
        batch_op.drop_constraint(batch_op.f("fk_forwards_floating_network_id_networks"), type_="foreignkey")
        batch_op.drop_column("floating_network_id")
        batch_op.alter_column("network_id", existing_type=sa.String(length=36), nullable=False)

"""forwards.origin

The face that made a forward: "forward" (the forwards API, LXD's rules: it outlives its targets' ports) or
"floatingip" (Neutron's API: its port going disassociates it). A forward an earlier version made without a network
was a floating IP made through Neutron's API; the others are taken as made through the forwards API.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 18:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("forwards", schema=None) as batch_op:
        batch_op.add_column(sa.Column("origin", sa.String(length=16), nullable=False, server_default="forward"))
    op.execute("UPDATE forwards SET origin = 'floatingip' WHERE network_id IS NULL")


def downgrade() -> None:
    with op.batch_alter_table("forwards", schema=None) as batch_op:
        batch_op.drop_column("origin")

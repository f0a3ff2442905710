"""instance_ports.ifname

The name an instance's interface gets inside its namespace, when the runtime chooses it (a CNI runtime's
CNI_IFNAME); NULL keeps eth<position>.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 06:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instance_ports", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ifname", sa.String(length=15), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instance_ports", schema=None) as batch_op:
        batch_op.drop_column("ifname")

"""instances.handoff

An instance whose plugged device the runtime takes out of the namespace cloudnet provided (Docker's Join): the
agent then keeps the host end on the bridge as the port's device and never re-creates the other end.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-12 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("handoff", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("handoff")

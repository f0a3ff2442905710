"""instances.kind

"container" (today's instances: a network namespace each) or "vm" (a tap device per NIC that a VMM opens; no
namespace). Existing rows are containers.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28 21:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="container"))


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("kind")

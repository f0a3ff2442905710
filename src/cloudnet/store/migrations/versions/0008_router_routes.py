"""Routers' extra routes (Neutron's extraroute): a JSON list of {destination, nexthop}, empty for the routers
that exist.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-10 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("routers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("routes", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("routers", schema=None) as batch_op:
        batch_op.drop_column("routes")

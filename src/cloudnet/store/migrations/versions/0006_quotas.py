"""Quotas per project

One row per (project, resource) with a limit of its own (NULL: the server's default); PostgreSQL creates lock the
row of what they create until commit.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 18:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quotas",
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("resource", sa.String(length=64), nullable=False),
        sa.Column("limit", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("project_id", "resource", name=op.f("pk_quotas")),
    )


def downgrade() -> None:
    op.drop_table("quotas")

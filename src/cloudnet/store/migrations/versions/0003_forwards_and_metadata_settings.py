"""forwards, network config, instance metadata settings

Existing rows get defaults: an empty config and routes, optional IMDSv2 tokens.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 00:20:40.358713
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "forwards",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("network_id", sa.String(length=36), nullable=False),
        sa.Column("listen_address", sa.String(length=64), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("ports", sa.JSON(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["network_id"], ["networks.id"], name=op.f("fk_forwards_network_id_networks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_forwards")),
        sa.UniqueConstraint("listen_address", name=op.f("uq_forwards_listen_address")),
    )
    with op.batch_alter_table("forwards", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_forwards_network_id"), ["network_id"], unique=False)

    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("metadata_tokens", sa.String(length=16), nullable=False, server_default="optional")
        )
        batch_op.add_column(sa.Column("internal_meta", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.add_column(sa.Column("password", sa.Text(), nullable=True))

    with op.batch_alter_table("networks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("config", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.add_column(sa.Column("routes", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("networks", schema=None) as batch_op:
        batch_op.drop_column("routes")
        batch_op.drop_column("config")

    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("password")
        batch_op.drop_column("internal_meta")
        batch_op.drop_column("metadata_tokens")

    with op.batch_alter_table("forwards", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_forwards_network_id"))

    op.drop_table("forwards")

"""subnet pools and address scopes

address_scopes, subnetpools, subnetpool_allocations (store/tables_subnetpools.py) and subnets.subnetpool_id.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29 07:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def _standard() -> list[sa.Column]:
    return [
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("project_id", sa.String(255), nullable=False, index=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("description", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger, nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "address_scopes",
        *_standard(),
        sa.Column("ip_version", sa.Integer, nullable=False),
        sa.Column("shared", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_address_scopes"),
    )
    op.create_table(
        "subnetpools",
        *_standard(),
        sa.Column("ip_version", sa.Integer, nullable=False),
        sa.Column("prefixes", sa.JSON, nullable=False),
        sa.Column("min_prefixlen", sa.Integer, nullable=False),
        sa.Column("max_prefixlen", sa.Integer, nullable=False),
        sa.Column("default_prefixlen", sa.Integer, nullable=False),
        sa.Column("default_quota", sa.Integer, nullable=True),
        sa.Column("address_scope_id", sa.String(36), nullable=True, index=True),
        sa.Column("shared", sa.Boolean, nullable=False),
        sa.Column("is_default", sa.Boolean, nullable=False),
        sa.Column("default_for_version", sa.Integer, nullable=True),
        sa.Column("hash", sa.String(36), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_subnetpools"),
        sa.ForeignKeyConstraint(
            ["address_scope_id"], ["address_scopes.id"], name="fk_subnetpools_address_scope_id_address_scopes"
        ),
        sa.UniqueConstraint("default_for_version", name="uq_subnetpools_default_for_version"),
    )
    op.create_table(
        "subnetpool_allocations",
        sa.Column("subnet_id", sa.String(36), nullable=False),
        sa.Column("subnetpool_id", sa.String(36), nullable=False),
        sa.Column("project_id", sa.String(255), nullable=False),
        sa.Column("first", sa.String(32), nullable=False),
        sa.Column("last", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("subnet_id", name="pk_subnetpool_allocations"),
        sa.ForeignKeyConstraint(["subnet_id"], ["subnets.id"], name="fk_subnetpool_allocations_subnet_id_subnets"),
        sa.ForeignKeyConstraint(
            ["subnetpool_id"], ["subnetpools.id"], name="fk_subnetpool_allocations_subnetpool_id_subnetpools"
        ),
        sa.UniqueConstraint("subnetpool_id", "first", name="uq_subnetpool_allocations_subnetpool_id_first"),
    )
    with op.batch_alter_table("subnets") as batch:
        batch.add_column(sa.Column("subnetpool_id", sa.String(36), nullable=True))
        batch.create_index("ix_subnets_subnetpool_id", ["subnetpool_id"])


def downgrade() -> None:
    with op.batch_alter_table("subnets") as batch:
        batch.drop_index("ix_subnets_subnetpool_id")
        batch.drop_column("subnetpool_id")
    op.drop_table("subnetpool_allocations")
    op.drop_table("subnetpools")
    op.drop_table("address_scopes")

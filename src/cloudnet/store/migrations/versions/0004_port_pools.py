"""port pools

Pools of ready ports per (host, project, network) and the pool membership of their ports. New tables only:
no existing row changes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 01:14:54.617817
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "port_pools",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("network_id", sa.String(length=36), nullable=False),
        sa.Column("security_groups", sa.JSON(), nullable=False),
        sa.Column("min", sa.Integer(), nullable=True),
        sa.Column("max", sa.Integer(), nullable=True),
        sa.Column("batch", sa.Integer(), nullable=True),
        sa.Column("ttl", sa.Integer(), nullable=True),
        sa.Column("update_interval", sa.Integer(), nullable=True),
        sa.Column("last_refill", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["network_id"], ["networks.id"], name=op.f("fk_port_pools_network_id_networks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_port_pools")),
        sa.UniqueConstraint("host", "project_id", "network_id", name=op.f("uq_port_pools_host_project_id_network_id")),
    )
    with op.batch_alter_table("port_pools", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_port_pools_network_id"), ["network_id"], unique=False)

    op.create_table(
        "pool_ports",
        sa.Column("port_id", sa.String(length=36), nullable=False),
        sa.Column("pool_id", sa.String(length=36), nullable=False),
        sa.Column("idle_since", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["pool_id"], ["port_pools.id"], name=op.f("fk_pool_ports_pool_id_port_pools"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["port_id"], ["ports.id"], name=op.f("fk_pool_ports_port_id_ports"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("port_id", name=op.f("pk_pool_ports")),
    )
    with op.batch_alter_table("pool_ports", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pool_ports_pool_id_idle_since"), ["pool_id", "idle_since"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("pool_ports", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pool_ports_pool_id_idle_since"))

    op.drop_table("pool_ports")
    with op.batch_alter_table("port_pools", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_port_pools_network_id"))

    op.drop_table("port_pools")

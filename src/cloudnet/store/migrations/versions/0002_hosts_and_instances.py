"""hosts and instances

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 23:40:33.559759
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hosts",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("agent_version", sa.String(length=64), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dead_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_hosts")),
    )
    op.create_table(
        "instances",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("netns", sa.String(length=4096), nullable=False),
        sa.Column("user_data", sa.Text(), nullable=True),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("ssh_keys", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_instances_host"), ["host"], unique=False)
        batch_op.create_index(batch_op.f("ix_instances_project_id"), ["project_id"], unique=False)

    op.create_table(
        "instance_ports",
        sa.Column("instance_id", sa.String(length=36), nullable=False),
        sa.Column("port_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("created_by_instance", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["instance_id"], ["instances.id"], name=op.f("fk_instance_ports_instance_id_instances"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["port_id"], ["ports.id"], name=op.f("fk_instance_ports_port_id_ports"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("instance_id", "port_id", name=op.f("pk_instance_ports")),
        sa.UniqueConstraint("port_id", name=op.f("uq_instance_ports_port_id")),
    )


def downgrade() -> None:
    op.drop_table("instance_ports")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instances_project_id"))
        batch_op.drop_index(batch_op.f("ix_instances_host"))

    op.drop_table("instances")
    op.drop_table("hosts")

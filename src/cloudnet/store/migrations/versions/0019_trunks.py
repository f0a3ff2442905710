"""trunks and subports (Neutron's trunk extension)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29 07:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "trunks",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("project_id", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("description", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.Column("port_id", sa.String(36), nullable=False),
        sa.Column("admin_state_up", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["port_id"], ["ports.id"], name="fk_trunks_port_id_ports"),
        sa.PrimaryKeyConstraint("id", name="pk_trunks"),
        sa.UniqueConstraint("port_id", name="uq_trunks_port_id"),
    )
    op.create_index("ix_trunks_project_id", "trunks", ["project_id"])
    op.create_table(
        "subports",
        sa.Column("port_id", sa.String(36), nullable=False),
        sa.Column("trunk_id", sa.String(36), nullable=False),
        sa.Column("segmentation_type", sa.String(32), nullable=False),
        sa.Column("segmentation_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["port_id"], ["ports.id"], name="fk_subports_port_id_ports"),
        sa.ForeignKeyConstraint(["trunk_id"], ["trunks.id"], name="fk_subports_trunk_id_trunks"),
        sa.PrimaryKeyConstraint("port_id", name="pk_subports"),
        sa.UniqueConstraint("trunk_id", "segmentation_type", "segmentation_id",
                            name="uq_subports_trunk_id_segmentation_type_segmentation_id"),
    )  # fmt: skip
    op.create_index("ix_subports_trunk_id", "subports", ["trunk_id"])


def downgrade() -> None:
    op.drop_index("ix_subports_trunk_id", table_name="subports")
    op.drop_table("subports")
    op.drop_index("ix_trunks_project_id", table_name="trunks")
    op.drop_table("trunks")

"""QoS: policies, their rules, and the policy of networks and ports

`qos_policies` (standard attributes, shared, is_default with its per-project uniqueness), `qos_rules` (one table
for bandwidth limit, DSCP marking and minimum bandwidth rules, one per type and direction in a policy), and
`qos_policy_id` on networks and ports (NULL for those that exist), indexed for the in-use check of a deletion.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29 07:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "qos_policies",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("project_id", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("description", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.Column("shared", sa.Boolean(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("default_for_project", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_qos_policies")),
        sa.UniqueConstraint("default_for_project", name=op.f("uq_qos_policies_default_for_project")),
    )
    op.create_index(op.f("ix_qos_policies_project_id"), "qos_policies", ["project_id"], unique=False)
    op.create_table(
        "qos_rules",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("qos_policy_id", sa.String(36), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("direction", sa.String(16), nullable=False),
        sa.Column("max_kbps", sa.Integer(), nullable=True),
        sa.Column("max_burst_kbps", sa.Integer(), nullable=True),
        sa.Column("dscp_mark", sa.Integer(), nullable=True),
        sa.Column("min_kbps", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["qos_policy_id"],
            ["qos_policies.id"],
            name=op.f("fk_qos_rules_qos_policy_id_qos_policies"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_qos_rules")),
        sa.UniqueConstraint("qos_policy_id", "type", "direction", name="uq_qos_rules_policy_type_direction"),
    )
    op.create_index(op.f("ix_qos_rules_qos_policy_id"), "qos_rules", ["qos_policy_id"], unique=False)
    # (plain ADD COLUMN: no table rebuild; a policy in use is held by the services, which lock its row)
    for table in ("networks", "ports"):
        op.add_column(table, sa.Column("qos_policy_id", sa.String(36), nullable=True))
        op.create_index(op.f(f"ix_{table}_qos_policy_id"), table, ["qos_policy_id"], unique=False)


def downgrade() -> None:
    for table in ("ports", "networks"):
        op.drop_index(op.f(f"ix_{table}_qos_policy_id"), table_name=table)
        # plain DROP COLUMN (its index gone first): a batch's copy of networks would drop the table under the rows
        # that refer to it, which SQLite's foreign keys refuse
        op.drop_column(table, "qos_policy_id")
    op.drop_index(op.f("ix_qos_rules_qos_policy_id"), table_name="qos_rules")
    op.drop_table("qos_rules")
    op.drop_index(op.f("ix_qos_policies_project_id"), table_name="qos_policies")
    op.drop_table("qos_policies")

"""rbac_policies: Neutron's RBAC policies (network, security_group)

Existing shared networks get their wildcard `access_as_shared` policy and external networks their wildcard
`access_as_external` one, as Neutron's own migration to RBAC made them (owned by the network's project).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29 07:20:00.000000
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "rbac_policies",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("project_id", sa.String(255), nullable=False),
        sa.Column("object_type", sa.String(32), nullable=False),
        sa.Column("object_id", sa.String(36), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target_project", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_rbac_policies"),
        sa.UniqueConstraint(
            "object_type",
            "object_id",
            "action",
            "target_project",
            name="uq_rbac_policies_object_type_object_id_action_target_project",
        ),
    )
    op.create_index("ix_rbac_policies_project_id", "rbac_policies", ["project_id"])
    op.create_index("ix_rbac_policies_target_project_object_type", "rbac_policies", ["target_project", "object_type"])
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, project_id, shared, router_external FROM networks")).all()
    policies = []
    for network_id, project_id, shared, external in rows:
        for flag, action in ((shared, "access_as_shared"), (external, "access_as_external")):
            if flag:
                policies.append({"id": str(uuid.uuid4()), "project_id": project_id, "object_type": "network",
                                 "object_id": network_id, "action": action, "target_project": "*"})  # fmt: skip
    if policies:
        op.bulk_insert(table, policies)


def downgrade() -> None:
    op.drop_index("ix_rbac_policies_target_project_object_type", table_name="rbac_policies")
    op.drop_index("ix_rbac_policies_project_id", table_name="rbac_policies")
    op.drop_table("rbac_policies")

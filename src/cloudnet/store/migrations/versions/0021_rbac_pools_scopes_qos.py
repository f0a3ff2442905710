"""rbac for subnet pools, address scopes and QoS policies: their wildcard access_as_shared policies

Subnet pools, address scopes and QoS policies already shared get the wildcard `access_as_shared` policy their
`shared` column now mirrors (owned by the object's project), as 0016 made them for networks.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 08:25:00.000000
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

TABLES = (("subnetpools", "subnetpool"), ("address_scopes", "address_scope"), ("qos_policies", "qos_policy"))


def upgrade() -> None:
    conn = op.get_bind()
    policies = sa.table(
        "rbac_policies",
        *(sa.column(name, sa.String) for name in ("id", "project_id", "object_type", "object_id", "action",
                                                   "target_project")),
    )  # fmt: skip
    rows = []
    for table, object_type in TABLES:
        for object_id, project_id in conn.execute(sa.text(f"SELECT id, project_id FROM {table} WHERE shared")):
            rows.append({"id": str(uuid.uuid4()), "project_id": project_id, "object_type": object_type,
                         "object_id": object_id, "action": "access_as_shared", "target_project": "*"})  # fmt: skip
    if rows:
        op.bulk_insert(policies, rows)


def downgrade() -> None:
    conn = op.get_bind()
    types = ", ".join(f"'{object_type}'" for _, object_type in TABLES)
    conn.execute(sa.text(f"DELETE FROM rbac_policies WHERE object_type IN ({types})"))

"""events: type, request_id, detail

What followers of the event stream see of each change (`cloudnet monitor`): its type (port.active, host.down, ...),
the id of the request that caused it, and a reason; and an index for members following their own project.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29 03:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("type", sa.String(64), nullable=True))
        batch.add_column(sa.Column("request_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("detail", sa.String(1000), nullable=True))
    # Earlier events get the type they would have had: <resource>.<operation>d.
    op.execute(
        "UPDATE events SET type = resource || '.' || CASE operation WHEN 'create' THEN 'created' "
        "WHEN 'update' THEN 'updated' WHEN 'delete' THEN 'deleted' ELSE operation END"
    )
    op.create_index("ix_events_project_id_revision", "events", ["project_id", "revision"])


def downgrade() -> None:
    op.drop_index("ix_events_project_id_revision", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("detail")
        batch.drop_column("request_id")
        batch.drop_column("type")

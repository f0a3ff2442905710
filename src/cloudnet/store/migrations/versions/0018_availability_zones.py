"""availability zones: hosts.availability_zone, networks/routers.availability_zone_hints

The zone each host's agent reports (Neutron's agents' `availability_zone`, default `nova`), and the zones a network
or a router was asked to be realised in (Neutron's `availability_zone_hints`, a JSON list).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 07:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("availability_zone", sa.String(255), nullable=False, server_default="nova"))
    for table in ("networks", "routers"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("availability_zone_hints", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN (SQLite >= 3.35 too): a batch's copy of networks would drop the table under the rows
    # that refer to it, which SQLite's foreign keys refuse.
    for table in ("routers", "networks"):
        op.drop_column(table, "availability_zone_hints")
    op.drop_column("hosts", "availability_zone")

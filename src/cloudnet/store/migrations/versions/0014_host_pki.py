"""join_tokens and host_certificates

Join tokens a host redeems once for its certificate (the secret's hash only), and the certificates the cloud's CA
signed for hosts, with their revocation.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29 00:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "join_tokens",
        sa.Column("id", sa.String(12), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_join_tokens"),
    )
    op.create_table(
        "host_certificates",
        sa.Column("serial", sa.String(40), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("not_after", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("serial", name="pk_host_certificates"),
    )
    op.create_index("ix_host_certificates_host", "host_certificates", ["host"])


def downgrade() -> None:
    op.drop_index("ix_host_certificates_host", table_name="host_certificates")
    op.drop_table("host_certificates")
    op.drop_table("join_tokens")

"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-21 23:35:10.915510
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("revision", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("resource", sa.String(length=64), nullable=False),
        sa.Column("resource_id", sa.String(length=255), nullable=False),
        sa.Column("operation", sa.String(length=16), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("revision", name=op.f("pk_events")),
    )
    op.create_table(
        "networks",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.Column("admin_state_up", sa.Boolean(), nullable=False),
        sa.Column("shared", sa.Boolean(), nullable=False),
        sa.Column("mtu", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("router_external", sa.Boolean(), nullable=False),
        sa.Column("network_type", sa.String(length=16), nullable=False),
        sa.Column("physical_network", sa.String(length=64), nullable=True),
        sa.Column("segmentation_id", sa.Integer(), nullable=True),
        sa.Column("segment_key", sa.String(length=128), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_networks")),
        sa.UniqueConstraint("segment_key", name=op.f("uq_networks_segment_key")),
    )
    with op.batch_alter_table("networks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_networks_project_id"), ["project_id"], unique=False)

    op.create_table(
        "revision_counter",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_revision_counter")),
    )
    op.create_table(
        "security_groups",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.Column("stateful", sa.Boolean(), nullable=False),
        sa.Column("default_for_project", sa.String(length=255), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_security_groups")),
        sa.UniqueConstraint("default_for_project", name=op.f("uq_security_groups_default_for_project")),
    )
    with op.batch_alter_table("security_groups", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_security_groups_project_id"), ["project_id"], unique=False)

    op.create_table(
        "tags",
        sa.Column("resource_id", sa.String(length=36), nullable=False),
        sa.Column("tag", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("resource_id", "tag", name=op.f("pk_tags")),
    )
    with op.batch_alter_table("tags", schema=None) as batch_op:
        batch_op.create_index("ix_tags_tag", ["tag"], unique=False)

    op.create_table(
        "ports",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.Column("network_id", sa.String(length=36), nullable=False),
        sa.Column("mac_address", sa.String(length=32), nullable=False),
        sa.Column("admin_state_up", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("device_id", sa.String(length=255), nullable=False),
        sa.Column("device_owner", sa.String(length=255), nullable=False),
        sa.Column("port_security_enabled", sa.Boolean(), nullable=False),
        sa.Column("vnic_type", sa.String(length=32), nullable=False),
        sa.Column("host_id", sa.String(length=255), nullable=False),
        sa.Column("profile", sa.JSON(), nullable=False),
        sa.Column("vif_type", sa.String(length=32), nullable=False),
        sa.Column("vif_details", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["network_id"], ["networks.id"], name=op.f("fk_ports_network_id_networks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ports")),
        sa.UniqueConstraint("network_id", "mac_address", name="uq_ports_network_mac"),
    )
    with op.batch_alter_table("ports", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ports_device_id"), ["device_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_ports_host_id"), ["host_id"], unique=False)
        batch_op.create_index("ix_ports_network_id_device_owner", ["network_id", "device_owner"], unique=False)
        batch_op.create_index(batch_op.f("ix_ports_project_id"), ["project_id"], unique=False)

    op.create_table(
        "security_group_rules",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.Column("security_group_id", sa.String(length=36), nullable=False),
        sa.Column("direction", sa.String(length=16), nullable=False),
        sa.Column("ethertype", sa.String(length=8), nullable=False),
        sa.Column("protocol", sa.String(length=40), nullable=True),
        sa.Column("port_range_min", sa.Integer(), nullable=True),
        sa.Column("port_range_max", sa.Integer(), nullable=True),
        sa.Column("remote_ip_prefix", sa.String(length=64), nullable=True),
        sa.Column("remote_group_id", sa.String(length=36), nullable=True),
        sa.ForeignKeyConstraint(
            ["remote_group_id"],
            ["security_groups.id"],
            name=op.f("fk_security_group_rules_remote_group_id_security_groups"),
        ),
        sa.ForeignKeyConstraint(
            ["security_group_id"],
            ["security_groups.id"],
            name=op.f("fk_security_group_rules_security_group_id_security_groups"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_security_group_rules")),
    )
    with op.batch_alter_table("security_group_rules", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_security_group_rules_project_id"), ["project_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_security_group_rules_security_group_id"), ["security_group_id"], unique=False
        )

    op.create_table(
        "subnets",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.Column("network_id", sa.String(length=36), nullable=False),
        sa.Column("ip_version", sa.Integer(), nullable=False),
        sa.Column("cidr", sa.String(length=64), nullable=False),
        sa.Column("gateway_ip", sa.String(length=64), nullable=True),
        sa.Column("allocation_pools", sa.JSON(), nullable=False),
        sa.Column("dns_nameservers", sa.JSON(), nullable=False),
        sa.Column("host_routes", sa.JSON(), nullable=False),
        sa.Column("enable_dhcp", sa.Boolean(), nullable=False),
        sa.Column("ipv6_ra_mode", sa.String(length=32), nullable=True),
        sa.Column("ipv6_address_mode", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(["network_id"], ["networks.id"], name=op.f("fk_subnets_network_id_networks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_subnets")),
    )
    with op.batch_alter_table("subnets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_subnets_network_id"), ["network_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_subnets_project_id"), ["project_id"], unique=False)

    op.create_table(
        "ip_allocations",
        sa.Column("subnet_id", sa.String(length=36), nullable=False),
        sa.Column("ip_address", sa.String(length=64), nullable=False),
        sa.Column("network_id", sa.String(length=36), nullable=False),
        sa.Column("port_id", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(
            ["port_id"], ["ports.id"], name=op.f("fk_ip_allocations_port_id_ports"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["subnet_id"], ["subnets.id"], name=op.f("fk_ip_allocations_subnet_id_subnets")),
        sa.PrimaryKeyConstraint("subnet_id", "ip_address", name=op.f("pk_ip_allocations")),
    )
    with op.batch_alter_table("ip_allocations", schema=None) as batch_op:
        batch_op.create_index("ix_ip_allocations_network_id_ip_address", ["network_id", "ip_address"], unique=False)
        batch_op.create_index(batch_op.f("ix_ip_allocations_port_id"), ["port_id"], unique=False)

    op.create_table(
        "port_security_groups",
        sa.Column("port_id", sa.String(length=36), nullable=False),
        sa.Column("security_group_id", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(
            ["port_id"], ["ports.id"], name=op.f("fk_port_security_groups_port_id_ports"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["security_group_id"],
            ["security_groups.id"],
            name=op.f("fk_port_security_groups_security_group_id_security_groups"),
        ),
        sa.PrimaryKeyConstraint("port_id", "security_group_id", name=op.f("pk_port_security_groups")),
    )
    with op.batch_alter_table("port_security_groups", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_port_security_groups_security_group_id"), ["security_group_id"], unique=False
        )

    op.create_table(
        "routers",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision_number", sa.BigInteger(), nullable=False),
        sa.Column("admin_state_up", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("gw_port_id", sa.String(length=36), nullable=True),
        sa.Column("enable_snat", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["gw_port_id"], ["ports.id"], name=op.f("fk_routers_gw_port_id_ports")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_routers")),
    )
    with op.batch_alter_table("routers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_routers_project_id"), ["project_id"], unique=False)
    counter = sa.table("revision_counter", sa.column("id", sa.Integer), sa.column("value", sa.BigInteger))
    op.bulk_insert(counter, [{"id": 1, "value": 0}])


def downgrade() -> None:
    with op.batch_alter_table("routers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_routers_project_id"))

    op.drop_table("routers")
    with op.batch_alter_table("port_security_groups", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_port_security_groups_security_group_id"))

    op.drop_table("port_security_groups")
    with op.batch_alter_table("ip_allocations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ip_allocations_port_id"))
        batch_op.drop_index("ix_ip_allocations_network_id_ip_address")

    op.drop_table("ip_allocations")
    with op.batch_alter_table("subnets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_subnets_project_id"))
        batch_op.drop_index(batch_op.f("ix_subnets_network_id"))

    op.drop_table("subnets")
    with op.batch_alter_table("security_group_rules", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_security_group_rules_security_group_id"))
        batch_op.drop_index(batch_op.f("ix_security_group_rules_project_id"))

    op.drop_table("security_group_rules")
    with op.batch_alter_table("ports", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ports_project_id"))
        batch_op.drop_index("ix_ports_network_id_device_owner")
        batch_op.drop_index(batch_op.f("ix_ports_host_id"))
        batch_op.drop_index(batch_op.f("ix_ports_device_id"))

    op.drop_table("ports")
    with op.batch_alter_table("tags", schema=None) as batch_op:
        batch_op.drop_index("ix_tags_tag")

    op.drop_table("tags")
    with op.batch_alter_table("security_groups", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_security_groups_project_id"))

    op.drop_table("security_groups")
    op.drop_table("revision_counter")
    with op.batch_alter_table("networks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_networks_project_id"))

    op.drop_table("networks")
    op.drop_table("events")

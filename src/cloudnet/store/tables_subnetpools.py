"""Subnet pools and address scopes (Neutron's subnet_allocation, address-scope), on tables.py's MetaData.

Invariants the database enforces:
- one default pool per IP version (`subnetpools.default_for_version`);
- one allocation per first address in a pool (`subnetpool_allocations`' unique pair): two writers that raced past
  the pool's row lock cannot both take the same prefix;
- a pool with allocations cannot be deleted, nor a scope with pools (foreign keys).
"""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, ForeignKey, Integer, String, Table, UniqueConstraint

from cloudnet.store.tables import ID, PROJECT, _standard, metadata

address_scopes = Table(
    "address_scopes",
    metadata,
    *_standard(),
    Column("ip_version", Integer, nullable=False),
    Column("shared", Boolean, nullable=False, default=False),
)

subnetpools = Table(
    "subnetpools",
    metadata,
    *_standard(),
    Column("ip_version", Integer, nullable=False),
    Column("prefixes", JSON, nullable=False),  # CIDRs, compacted and sorted
    Column("min_prefixlen", Integer, nullable=False),
    Column("max_prefixlen", Integer, nullable=False),
    Column("default_prefixlen", Integer, nullable=False),
    Column("default_quota", Integer, nullable=True),
    Column("address_scope_id", ID, ForeignKey("address_scopes.id"), nullable=True, index=True),
    Column("shared", Boolean, nullable=False, default=False),
    Column("is_default", Boolean, nullable=False, default=False),
    # The IP version while is_default, else NULL: unique, so only one default pool per version can exist.
    Column("default_for_version", Integer, nullable=True, unique=True),
    # A new random value on every change of its prefixes or allocations (Neutron's subnetpools.hash): what a
    # server's cached free space of the pool is valid for.
    Column("hash", String(36), nullable=False, default=""),
)

# A subnet's prefix taken from a pool: first and last address as 32 hex digits (sortable, IPv6 included).
subnetpool_allocations = Table(
    "subnetpool_allocations",
    metadata,
    Column("subnet_id", ID, ForeignKey("subnets.id"), primary_key=True),
    Column("subnetpool_id", ID, ForeignKey("subnetpools.id"), nullable=False),
    Column("project_id", PROJECT, nullable=False),
    Column("first", String(32), nullable=False),
    Column("last", String(32), nullable=False),
    UniqueConstraint("subnetpool_id", "first", name="uq_subnetpool_allocations_subnetpool_id_first"),
)

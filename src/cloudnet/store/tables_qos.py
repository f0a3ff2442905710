"""QoS tables (Neutron's `qos` extension), on the schema's MetaData: policies and their rules. Which policy a
network or a port uses is a column of theirs (`qos_policy_id`, store/tables.py)."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, DateTime, ForeignKey, Integer, String, Table, UniqueConstraint

from cloudnet.store.tables import ID, PROJECT, _standard, metadata

qos_policies = Table(
    "qos_policies",
    metadata,
    *_standard(),
    Column("shared", Boolean, nullable=False, default=False),
    Column("is_default", Boolean, nullable=False, default=False),
    # The project id when this is the project's default policy, else NULL: unique, so that two concurrent
    # requests cannot both make one (Neutron's QoSPolicyDefaultAlreadyExists).
    Column("default_for_project", PROJECT, nullable=True, unique=True),
)

# One table for every rule type: `type` says which columns mean something. At most one rule of a type per
# direction in a policy (Neutron's QoSRulesConflict), held by the database (a DSCP rule's direction is "egress").
qos_rules = Table(
    "qos_rules",
    metadata,
    Column("id", ID, primary_key=True),
    Column("qos_policy_id", ID, ForeignKey("qos_policies.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("type", String(32), nullable=False),
    Column("direction", String(16), nullable=False),
    Column("max_kbps", Integer, nullable=True),
    Column("max_burst_kbps", Integer, nullable=True),
    Column("dscp_mark", Integer, nullable=True),
    Column("min_kbps", Integer, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("qos_policy_id", "type", "direction", name="uq_qos_rules_policy_type_direction"),
)

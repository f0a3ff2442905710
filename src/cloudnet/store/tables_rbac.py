"""RBAC policies (Neutron's `rbac-policies`): who else may use an object, and how. On tables.py's MetaData.

One table for every object type (Neutron keeps one per type: networkrbacs, securitygrouprbacs, ...); `object_id`
has no foreign key for that reason, and an object's policies go with it (services/rbac/policies.py `forget`).
A network's `shared` column mirrors its wildcard `access_as_shared` policy (kept in the same transaction), so the
hot paths that read a network's row (port creates) need no second read for the common case.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, String, Table, UniqueConstraint

from cloudnet.store.tables import ID, PROJECT, metadata

rbac_policies = Table(
    "rbac_policies",
    metadata,
    Column("id", ID, primary_key=True),
    Column("project_id", PROJECT, nullable=False, index=True),
    Column("object_type", String(32), nullable=False),
    Column("object_id", ID, nullable=False),
    Column("action", String(32), nullable=False),
    # A project id, or "*" for every project.
    Column("target_project", PROJECT, nullable=False),
    UniqueConstraint("object_type", "object_id", "action", "target_project"),
)

# What a project was granted, of one type: the visibility subquery of every list.
Index("ix_rbac_policies_target_project_object_type", rbac_policies.c.target_project, rbac_policies.c.object_type)

__all__ = ["rbac_policies"]

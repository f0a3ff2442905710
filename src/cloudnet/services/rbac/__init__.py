"""RBAC policies: what they grant (grants), their API (policies), the object types they apply to (object_types)."""

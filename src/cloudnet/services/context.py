"""Who is asking: the project a request acts for, and whether it may see everything."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Context:
    project_id: str
    is_admin: bool = False

    @classmethod
    def admin(cls, project_id: str = "admin") -> Context:
        return cls(project_id=project_id, is_admin=True)

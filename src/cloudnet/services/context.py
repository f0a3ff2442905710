"""Who is asking: the project a request acts for, and its role.

Roles, as Neutron's policy knows them: `admin` sees and changes everything; `service` is the platform that starts
instances (Nova and Zun are this to Neutron): a member of its own project that may also name host resources, such
as an existing network namespace; `member` sees and changes its own project's objects only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["admin", "service", "member"]
ROLES: tuple[Role, ...] = ("admin", "service", "member")


@dataclass(frozen=True)
class Context:
    project_id: str
    is_admin: bool = False
    is_service: bool = False

    @classmethod
    def admin(cls, project_id: str = "admin") -> Context:
        return cls(project_id=project_id, is_admin=True)

    @classmethod
    def of_role(cls, project_id: str, role: Role) -> Context:
        return cls(project_id=project_id, is_admin=role == "admin", is_service=role == "service")

    @property
    def role(self) -> Role:
        return "admin" if self.is_admin else "service" if self.is_service else "member"

    @property
    def names_host_resources(self) -> bool:
        """May name what exists on a host (a network namespace): admin and the service role."""
        return self.is_admin or self.is_service

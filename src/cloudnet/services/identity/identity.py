"""The projects cloudnet knows, in Keystone's v3 shapes: what clients look a project up by before they ask for its
quota (`openstack quota show PROJECT` finds the project through the identity service first).

cloudnet has no users or domains of its own: a project is one the tokens file names (any name, with no tokens
file, where every caller is an admin of the project it names). A member sees only its own project.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from cloudnet.errors import NotFound
from cloudnet.services.context import Context

DOMAIN = "default"


def project_body(project_id: str, base: str) -> dict[str, Any]:
    return {
        "id": project_id, "name": project_id, "domain_id": DOMAIN, "enabled": True, "description": "",
        "parent_id": DOMAIN, "is_domain": False, "tags": [], "options": {},
        "links": {"self": f"{base}/projects/{project_id}"},
    }  # fmt: skip


def _visible(ctx: Context, known: Collection[str] | None) -> set[str] | None:
    """The projects the caller may see (None: any name, no tokens file)."""
    if not ctx.is_admin:
        return {ctx.project_id}
    return None if known is None else set(known)


def get_project(ctx: Context, project_id: str, known: Collection[str] | None, base: str) -> dict[str, Any]:
    visible = _visible(ctx, known)
    if len(project_id) > 255 or "\x00" in project_id or (visible is not None and project_id not in visible):
        raise NotFound(f"Could not find project: {project_id[:255]}.", type="ProjectNotFound")
    return project_body(project_id, base)


def list_projects(ctx: Context, known: Collection[str] | None, name: str | None, base: str) -> list[dict[str, Any]]:
    visible = _visible(ctx, known)
    if visible is None:  # any name exists
        return [project_body(name, base)] if name and len(name) <= 255 and "\x00" not in name else []
    return [project_body(p, base) for p in sorted(visible) if name is None or p == name]

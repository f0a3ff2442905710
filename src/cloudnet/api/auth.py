"""X-Auth-Token -> Context, from `<state>/tokens.json`.

The file maps each token to its project and role (services/context.py):
    {"tokens": {"s3cret": {"project_id": "demo"},                       member (the default)
                "zun-token": {"project_id": "services", "role": "service"},
                "root-token": {"project_id": "ops", "role": "admin"}}}
`"admin": true` is the older spelling of `"role": "admin"`. Without the file (allowed on a loopback bind only)
every request is an admin of the project named in `X-Project-Id`, or of "admin".
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from cloudnet.errors import CloudnetError, NotAuthenticated
from cloudnet.services.context import ROLES, Context

log = logging.getLogger(__name__)
OPEN_PROJECT = "admin"


class TokenConfigError(CloudnetError):
    pass


class Authenticator:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._checked = 0.0
        self._tokens: dict[str, Context] | None = None
        self._reload()

    @property
    def open_mode(self) -> bool:
        return self._tokens is None

    def _reload(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime
        except FileNotFoundError:
            self._tokens, self._mtime = None, None
            return
        if mtime == self._mtime:
            return
        try:
            data = json.loads(self.path.read_text())
            tokens = {str(token): _context(entry) for token, entry in data["tokens"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TokenConfigError(f"cannot read tokens file {self.path}: {exc}") from exc
        self._tokens, self._mtime = tokens, mtime
        log.info("loaded %d tokens from %s", len(tokens), self.path)

    def projects(self) -> set[str] | None:
        """The projects the tokens file names (None without one: any project exists)."""
        tokens = self._tokens
        return None if tokens is None else {ctx.project_id for ctx in tokens.values()}

    def authenticate(self, token: str | None, project_header: str | None) -> Context:
        now = time.monotonic()
        if now - self._checked > 1.0:  # pick up edits to the file without a restart
            with self._lock:
                self._checked = now
                try:
                    self._reload()
                except TokenConfigError:
                    log.exception("keeping the previous tokens")
        if self._tokens is None:
            return Context(project_id=project_header or OPEN_PROJECT, is_admin=True)
        if not token:
            raise NotAuthenticated("Authentication required: send an X-Auth-Token header")
        ctx = self._tokens.get(token)
        if ctx is None:
            raise NotAuthenticated("The request you have made requires authentication.")
        return ctx


def _context(entry: dict[str, Any]) -> Context:
    role = entry.get("role", "admin" if entry.get("admin") is True else "member")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (one of {', '.join(ROLES)})")
    project = entry["project_id"]
    if not isinstance(project, str) or not project or len(project) > 255:
        raise ValueError(f"project_id must be a string of 1-255 characters, not {project!r}")
    return Context.of_role(project, role)

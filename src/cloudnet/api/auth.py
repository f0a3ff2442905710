"""X-Auth-Token -> Context, from `<state>/tokens.json`.

The file maps each token to its project and role (services/context.py):
    {"tokens": {"s3cret": {"project_id": "demo"},                       member (the default)
                "zun-token": {"project_id": "services", "role": "service"},
                "root-token": {"project_id": "ops", "role": "admin"}}}
`"admin": true` is the older spelling of `"role": "admin"`. The file's `users` (services/identity/keystone.py) log in
through the Keystone face (api/keystone.py) for tokens this class accepts as well. Without the file (allowed on a
loopback bind only) every request is an admin of the project named in `X-Project-Id`, or of "admin".
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
from cloudnet.services.identity import keystone

log = logging.getLogger(__name__)
OPEN_PROJECT = "admin"


class TokenConfigError(CloudnetError):
    pass


class Authenticator:
    def __init__(self, path: Path, signer: keystone.TokenSigner | None = None,
                 internal: dict[str, Context] | None = None) -> None:  # fmt: skip
        """`signer` checks the tokens the Keystone face issued (None: none are accepted); `internal` tokens are
        the server's own (the agent `cloudnet up` runs), whatever the file says."""
        self.path = path
        self.signer = signer
        self._internal = dict(internal or {})
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._checked = 0.0
        self._tokens: dict[str, Context] | None = None
        self._users: dict[str, keystone.User] = {}
        self._reload()

    @property
    def open_mode(self) -> bool:
        return self._tokens is None

    def _reload(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime
        except FileNotFoundError:
            self._tokens, self._users, self._mtime = None, {}, None
            return
        if mtime == self._mtime:
            return
        try:
            data = json.loads(self.path.read_text())
            tokens = {str(token): _context(entry) for token, entry in data.get("tokens", {}).items()}
            users = keystone.parse_users(data.get("users", {}))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TokenConfigError(f"cannot read tokens file {self.path}: {exc}") from exc
        self._tokens, self._users, self._mtime = tokens, users, mtime
        log.info("loaded %d tokens and %d users from %s", len(tokens), len(users), self.path)

    def projects(self) -> set[str] | None:
        """The projects the tokens file names (None without one: any project exists)."""
        tokens, users = self._tokens, self._users
        if tokens is None:
            return None
        return {ctx.project_id for ctx in tokens.values()} | {p for user in users.values() for p in user.projects}

    def users(self) -> dict[str, keystone.User]:
        """The users as the file has them now (a login reads it: one stat, and `cloudnet user set` takes effect at
        once rather than within the second requests wait)."""
        self._refresh(force=True)
        return self._users

    def issued(self, token: str | None) -> keystone.Issued | None:
        """The claims of a token the Keystone face issued, if it is one, valid and unexpired."""
        if not token or self.signer is None or self._tokens is None:
            return None
        return self.signer.verify(token)

    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._checked > 1.0:  # pick up edits to the file without a restart
            with self._lock:
                self._checked = now
                try:
                    self._reload()
                except TokenConfigError:
                    log.exception("keeping the previous tokens")

    def authenticate(self, token: str | None, project_header: str | None) -> Context:
        self._refresh()
        if token and token in self._internal:
            return self._internal[token]
        if self._tokens is None:
            return Context(project_id=project_header or OPEN_PROJECT, is_admin=True)
        if not token:
            raise NotAuthenticated("Authentication required: send an X-Auth-Token header")
        ctx = self._tokens.get(token)
        if ctx is None:
            # A token just written to the file (`cloudnet token create`, then its first use) is known at once, not
            # after the periodic check: an unknown token costs one stat, the file is read only when it changed.
            self._refresh(force=True)
            ctx = (self._tokens or {}).get(token)
        if ctx is None:
            issued = self.issued(token)
            role = None if issued is None else keystone.role_of(self._users, issued)
            if issued is None or role is None:
                raise NotAuthenticated(keystone.REFUSED)
            ctx = Context.of_role(issued.project or "", role)
        return ctx


def _context(entry: dict[str, Any]) -> Context:
    role = entry.get("role", "admin" if entry.get("admin") is True else "member")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r} (one of {', '.join(ROLES)})")
    project = entry["project_id"]
    if not isinstance(project, str) or not project or len(project) > 255:
        raise ValueError(f"project_id must be a string of 1-255 characters, not {project!r}")
    return Context.of_role(project, role)

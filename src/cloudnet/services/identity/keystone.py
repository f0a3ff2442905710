"""Keystone v3 authentication over the tokens file's users: the password and token methods, project scoping,
signed tokens, and a limit on failed attempts (api/keystone.py is the HTTP face).

Users live in the tokens file beside the static tokens, with a password hash (services/identity/passwords.py) and a role
in each of their projects:
    {"users": {"alice": {"password_hash": "scrypt$...", "projects": {"alice": "member"}}}}
An issued token is `cnk1.PAYLOAD.MAC`: who, which project, when it expires, signed with the server's secret
(`<state>/keystone_secret`; servers sharing a database share it by copy, as the metadata secret). It carries no
role: the role is looked up in the file at every use, so removing a user or a project from a user takes effect
at once, and a token cannot outlive its user's membership.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from cloudnet.errors import BadRequest, CloudnetError, NotAuthenticated
from cloudnet.services.context import ROLES, Role
from cloudnet.services.identity import passwords

DOMAIN = {"id": "default", "name": "Default"}
PREFIX = "cnk1."
TTL = 3600  # seconds, Keystone's default token lifetime
MAX_TOKEN = 2048
MAX_NAME = 255
REFUSED = "The request you have made requires authentication."


class TooManyAttempts(CloudnetError):
    status = 429
    type = "TooManyRequests"

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"Too many failed authentication attempts: try again in {retry_after} s.")
        self.retry_after = retry_after


@dataclass(frozen=True)
class User:
    name: str
    password_hash: str
    projects: Mapping[str, Role]
    default_project: str | None


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME or "\x00" in value:
        raise ValueError(f"{what} must be a string of 1-{MAX_NAME} characters, not {value!r}")
    return value


def parse_users(entries: object) -> dict[str, User]:
    """The `users` of the tokens file (ValueError on anything malformed: the file is refused, not half-read)."""
    if not isinstance(entries, dict):
        raise ValueError("users must be an object of user name -> user")
    users = {}
    for name, entry in entries.items():
        _name(name, "a user name")
        if not isinstance(entry, dict) or not isinstance(entry.get("projects"), dict) or not entry["projects"]:
            raise ValueError(f"user {name}: needs password_hash and projects (project -> role)")
        passwords.parse_hash(entry.get("password_hash", ""))
        projects: dict[str, Role] = {}
        for project, role in entry["projects"].items():
            if role not in ROLES:
                raise ValueError(f"user {name}: unknown role {role!r} (one of {', '.join(ROLES)})")
            projects[_name(project, "a project")] = cast(Role, role)
        default = entry.get("default_project", next(iter(projects)) if len(projects) == 1 else None)
        if default is not None and default not in projects:
            raise ValueError(f"user {name}: default_project {default!r} is not one of its projects")
        users[name] = User(name, entry["password_hash"], projects, default)
    return users


def user_entry(password: str, projects: Mapping[str, Role], default_project: str | None = None) -> dict[str, Any]:
    """A user as the tokens file holds it (what `cloudnet user set` writes)."""
    entry: dict[str, Any] = {"password_hash": passwords.hash_password(password), "projects": dict(projects)}
    if default_project is not None:
        entry["default_project"] = default_project
    parse_users({"check": entry})
    return entry


# -- tokens --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Issued:
    user: str
    project: str | None  # None: unscoped (good for listing one's projects, nothing else)
    methods: tuple[str, ...]
    issued_at: int
    expires_at: int
    audit_id: str


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class TokenSigner:
    def __init__(self, secret: str, ttl: int = TTL) -> None:
        self._key = hashlib.sha256(b"cloudnet keystone token\0" + secret.encode()).digest()
        self.ttl = ttl

    def _mac(self, payload: str) -> str:
        return _b64(hmac.digest(self._key, payload.encode(), "sha256"))

    def issue(self, user: str, project: str | None, methods: tuple[str, ...], expires_at: int | None = None,
              now: float | None = None) -> tuple[str, Issued]:  # fmt: skip
        issued_at = int(time.time() if now is None else now)
        expires = min(expires_at, issued_at + self.ttl) if expires_at is not None else issued_at + self.ttl
        issued = Issued(user, project, methods, issued_at, expires, _b64(secrets.token_bytes(12)))
        body = {"u": user, "p": project, "m": list(methods), "i": issued_at, "e": expires, "a": issued.audit_id}
        payload = _b64(json.dumps(body, separators=(",", ":")).encode())
        return f"{PREFIX}{payload}.{self._mac(payload)}", issued

    def verify(self, token: str, now: float | None = None) -> Issued | None:
        """The token's claims if this server signed it and it has not expired, else None."""
        if not token.startswith(PREFIX) or len(token) > MAX_TOKEN:
            return None
        payload, _, mac = token[len(PREFIX) :].partition(".")
        if not hmac.compare_digest(self._mac(payload), mac):
            return None
        try:
            body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            issued = Issued(str(body["u"]), body["p"], tuple(body["m"]), int(body["i"]), int(body["e"]), body["a"])
        except (ValueError, KeyError, TypeError):
            return None
        return issued if issued.expires_at > (time.time() if now is None else now) else None


def role_of(users: Mapping[str, User], issued: Issued) -> Role | None:
    """The user's role in the token's project now (None: user gone, project taken away, or unscoped)."""
    user = users.get(issued.user)
    return None if user is None or issued.project is None else user.projects.get(issued.project)


# -- the request --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuthRequest:
    methods: tuple[str, ...]
    user: str | None = None  # password: by name (or id: the same here)
    password: str = ""
    token: str | None = None
    project: str | None = None  # scope, by name or id (the same here)
    unscoped: bool = False


def _obj(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"Invalid input for field '{where}': expected an object.", type="ValidationError")
    return value


def _str(value: object, where: str, limit: int = MAX_NAME) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise BadRequest(f"Invalid input for field '{where}': expected a string of 1-{limit} characters.",
                         type="ValidationError")  # fmt: skip
    return value


def _in_default_domain(holder: dict[str, Any], where: str) -> bool:
    """Whether the object's `domain` (if it names one) is the only domain there is."""
    if "domain" not in holder:
        return True
    domain = _obj(holder["domain"], where + ".domain")
    return domain.get("id", "default") == "default" and domain.get("name", "Default") == "Default"


def parse_request(body: object) -> AuthRequest:
    """`{"auth": {"identity": {...}, "scope": ...}}` as Keystone's schema has it; 400 on malformed input, 401 when
    it names something outside the one domain."""
    identity = _obj(_obj(_obj(body, "body").get("auth"), "auth").get("identity"), "auth.identity")
    methods = identity.get("methods")
    if not isinstance(methods, list) or not methods or not all(m in ("password", "token") for m in methods):
        raise NotAuthenticated("Expecting methods of ['password'] or ['token'].")
    fields: dict[str, Any] = {"methods": tuple(dict.fromkeys(methods))}
    if "password" in methods:
        user = _obj(_obj(identity.get("password"), "identity.password").get("user"), "password.user")
        fields["user"] = _str(user.get("name", user.get("id")), "password.user.name")
        fields["password"] = _str(user.get("password"), "password.user.password", passwords.MAX_PASSWORD)
        if not _in_default_domain(user, "password.user"):
            raise NotAuthenticated(REFUSED)
    if "token" in methods:
        fields["token"] = _str(_obj(identity.get("token"), "identity.token").get("id"), "token.id", MAX_TOKEN)
    scope = _obj(body, "body")["auth"].get("scope")
    if scope == "unscoped":
        fields["unscoped"] = True
    elif scope is not None:
        scope = _obj(scope, "auth.scope")
        if "project" not in scope:
            raise NotAuthenticated("cloudnet issues project-scoped tokens only (no domain or system scope).")
        project = _obj(scope["project"], "scope.project")
        fields["project"] = _str(project.get("id", project.get("name")), "scope.project.name")
        if not _in_default_domain(project, "scope.project"):
            raise NotAuthenticated(REFUSED)
    return AuthRequest(**fields)


def scope_of(user: User, request: AuthRequest, current: str | None) -> str | None:
    """The project the new token is for: the one asked for (the user must have a role in it), else the token's
    own (token method) or the user's default; None: unscoped."""
    if request.unscoped:
        return None
    project = request.project or current or user.default_project
    if project is not None and project not in user.projects:
        raise NotAuthenticated(REFUSED)  # as Keystone: no word on whether the project exists
    return project


# -- failed attempts ----------------------------------------------------------------------------------------------


class FailureLimiter:
    """At most `limit` failed attempts per key (a user name, a client address) in `window` seconds; beyond it,
    the key is refused (429) without a password check until its oldest failure ages out. Bounded memory: the
    least recently failed keys are forgotten first."""

    def __init__(self, limit: int, window: float = 60.0, max_keys: int = 10_000) -> None:
        self.limit, self.window, self.max_keys = limit, window, max_keys
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, key: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            recent = self._failures.get(key)
            while recent and recent[0] <= now - self.window:
                recent.popleft()
            if recent is not None and len(recent) >= self.limit:
                raise TooManyAttempts(max(1, int(recent[0] + self.window - now + 0.999)))

    def failed(self, key: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            recent = self._failures.pop(key, None) or deque(maxlen=self.limit)
            recent.append(now)
            self._failures[key] = recent
            while len(self._failures) > self.max_keys:
                self._failures.popitem(last=False)


# -- the token body -----------------------------------------------------------------------------------------------

REGION = "RegionOne"
ROLE_NAMES: dict[Role, tuple[str, ...]] = {
    "admin": ("admin", "member", "reader"), "service": ("service", "member", "reader"), "member": ("member", "reader"),
}  # fmt: skip


def _iso(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(seconds))


def _service(kind: str, name: str, url: str) -> dict[str, Any]:
    endpoints = [{"id": f"{name}-{interface}", "interface": interface, "region": REGION, "region_id": REGION,
                  "url": url} for interface in ("public", "internal", "admin")]  # fmt: skip
    return {"id": name, "type": kind, "name": name, "endpoints": endpoints}


def token_body(issued: Issued, role: Role | None, base: str) -> dict[str, Any]:
    """The `token` of Keystone's answer; `base` is this server's URL: the catalog's `network` endpoint is cloudnet
    itself (clients find /v2.0 by version discovery there), its `identity` this face."""
    token: dict[str, Any] = {
        "methods": list(issued.methods), "audit_ids": [issued.audit_id],
        "issued_at": _iso(issued.issued_at), "expires_at": _iso(issued.expires_at),
        "user": {"id": issued.user, "name": issued.user, "domain": DOMAIN, "password_expires_at": None},
    }  # fmt: skip
    if issued.project is not None and role is not None:
        token.update(
            project={"id": issued.project, "name": issued.project, "domain": DOMAIN}, is_domain=False,
            roles=[{"id": name, "name": name} for name in ROLE_NAMES[role]],
            catalog=[_service("network", "neutron", base), _service("identity", "keystone", base + "/v3")],
        )  # fmt: skip
    return token

"""/v3/auth: Keystone's token API over the tokens file's users (services/identity/keystone.py), so that a clouds.yaml
with `auth_type: password` and `auth_url: http://cloudnet:9696/v3` works unchanged.

These routes authenticate for themselves (the guard lets them through: a login has no token yet) and answer
Keystone's error body, which keystoneauth reads, rather than Neutron's.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api.auth import Authenticator
from cloudnet.api.deps import call, state
from cloudnet.api.neutron import JSON
from cloudnet.errors import BadRequest, CloudnetError, Forbidden, NotAuthenticated, NotFound
from cloudnet.services.context import Role
from cloudnet.services.identity import identity, keystone, passwords

router = APIRouter()
MAX_BODY = 16 * 1024  # a login is a few hundred bytes: nothing bigger is parsed or hashed
TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests"}


class Limits:
    """Failed logins: per user name (guessing one user's password) and per client address (trying many users)."""

    def __init__(self) -> None:
        self.users = keystone.FailureLimiter(limit=5)
        self.addresses = keystone.FailureLimiter(limit=20)


def _limits(request: Request) -> Limits:
    app_state = request.app.state
    if not hasattr(app_state, "keystone_limits"):
        app_state.keystone_limits = Limits()
    return app_state.keystone_limits  # type: ignore[no-any-return]


def _error(exc: CloudnetError, request: Request) -> Response:
    body = {"error": {"code": exc.status, "title": TITLES.get(exc.status, "Error"), "message": exc.message}}
    headers = {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = f'Keystone uri="{request.base_url}v3"'
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return JSON(body, status_code=exc.status, headers=headers)


async def _body(request: Request) -> Any:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
        raise BadRequest(f"Request is too large: an authentication request may have at most {MAX_BODY} bytes.")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise BadRequest(f"Request is too large: an authentication request may have at most {MAX_BODY} bytes.")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("Malformed request body: expected JSON.", type="ValidationError") from None


def _login(auth: Authenticator, limits: Limits, req: keystone.AuthRequest, address: str) -> tuple[str, keystone.Issued]:
    """Check the request's methods (blocking: a password check costs ~50 ms of CPU) and sign the new token."""
    users = auth.users()  # (first: it reads the file, which may have just been made)
    if auth.signer is None or auth.open_mode:
        raise NotAuthenticated("No users: this cloudnet runs without a tokens file (see `cloudnet user set`).")
    user: keystone.User | None = None
    current, expires = None, None
    if req.user is not None:
        limits.addresses.check(address)
        limits.users.check(req.user)
        user = users.get(req.user)
        if not passwords.verify_password(req.password, user.password_hash if user else None):
            limits.addresses.failed(address)
            limits.users.failed(req.user)
            raise NotAuthenticated(keystone.REFUSED)
    if req.token is not None:
        issued = auth.issued(req.token)
        if issued is None or (user is not None and issued.user != user.name) or issued.user not in users:
            raise NotAuthenticated(keystone.REFUSED)
        user, current, expires = users[issued.user], issued.project, issued.expires_at  # a token never extends
    assert user is not None  # parse_request requires a method
    project = keystone.scope_of(user, req, current)
    return auth.signer.issue(user.name, project, req.methods, expires)


def _answer(request: Request, token: str, issued: keystone.Issued, role: Role | None, status: int) -> Response:
    base = str(request.base_url).rstrip("/")
    return JSON({"token": keystone.token_body(issued, role, base)}, status_code=status,
                headers={"X-Subject-Token": token})  # fmt: skip


@router.post("/v3/auth/tokens")
async def issue_token(request: Request) -> Response:
    auth = state(request).auth
    address = request.client.host if request.client else "?"
    try:
        req = keystone.parse_request(await _body(request))
        token, issued = await call(_login, auth, _limits(request), req, address)
    except CloudnetError as exc:
        return _error(exc, request)
    return _answer(request, token, issued, keystone.role_of(auth.users(), issued), 201)


@router.get("/v3/auth/tokens")
async def validate_token(request: Request) -> Response:
    """Keystone's validation (also HEAD): the caller's own token, or any for admins and services."""
    auth = state(request).auth
    caller, subject = request.headers.get("x-auth-token"), request.headers.get("x-subject-token")
    try:
        ctx = auth.authenticate(caller, request.headers.get("x-project-id"))
        if subject != caller and not (ctx.is_admin or ctx.is_service):
            raise Forbidden("You are not authorized to perform the requested action: identity:validate_token.")
        issued = auth.issued(subject)
        role = None if issued is None else keystone.role_of(auth.users(), issued)
        if issued is None or (issued.project is not None and role is None):
            raise NotFound("Could not find token.")
    except CloudnetError as exc:
        return _error(exc, request)
    return _answer(request, subject or "", issued, role, 200)  # (HEAD: the same, the server sends no body)


def _projects(request: Request, names: list[str], path: str) -> Response:
    base = str(request.base_url) + "v3"
    links = {"self": base + path, "next": None, "previous": None}
    return JSON({"projects": [identity.project_body(name, base) for name in sorted(names)], "links": links})


@router.get("/v3/auth/projects")
async def my_projects(request: Request) -> Response:
    """The projects the caller may scope to: its user's (an issued token, even unscoped), or the project of a
    static token."""
    auth = state(request).auth
    token = request.headers.get("x-auth-token")
    issued = auth.issued(token)
    user = None if issued is None else auth.users().get(issued.user)
    if user is not None:
        return _projects(request, list(user.projects), "/auth/projects")
    try:
        return _projects(request, [auth.authenticate(token, request.headers.get("x-project-id")).project_id],
                         "/auth/projects")  # fmt: skip
    except CloudnetError as exc:
        return _error(exc, request)


@router.get("/v3/users/{user_id}/projects")
async def user_projects(request: Request, user_id: str) -> Response:
    """A user's projects (`openstack project list --my-projects`): one's own, or any user's for an admin."""
    auth = state(request).auth
    token = request.headers.get("x-auth-token")
    try:
        ctx = auth.authenticate(token, request.headers.get("x-project-id"))  # (the guard leaves it to this route)
    except CloudnetError as exc:
        return _error(exc, request)
    issued = auth.issued(token)
    user = auth.users().get(user_id)
    if user is None or not (ctx.is_admin or (issued is not None and issued.user == user_id)):
        return _error(NotFound(f"Could not find user: {user_id[:255]}."), request)
    return _projects(request, list(user.projects), f"/users/{user_id}/projects")

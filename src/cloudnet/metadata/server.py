"""The metadata API: the OpenStack and EC2 trees for requests an agent's proxy has vouched for.

A bare ASGI application rather than FastAPI: every guest boot sends dozens of requests and a boot storm
multiplies that, so the per-request path is a header scan, one HMAC, a dict lookup and a cached answer.

Order of checks, as nova's handler (reference/metadata.md §1.2):
1. `/` answers the EC2 version list before anything else;
2. a missing `X-Instance-ID`, `X-Instance-ID-Signature` or `X-Tenant-ID` is a 400;
3. a signature that does not match the instance id is a 403;
4. an unknown instance, or one of another project than `X-Tenant-ID`, is a 404;
5. IMDSv2: a presented token must be valid (401), and is required when the instance says so (401);
6. then the tree: unknown paths and versions are 404s.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sqlalchemy.exc import DBAPIError

from cloudnet.metadata import passwords, signing, trees
from cloudnet.metadata.model import REQUIRED, Settings
from cloudnet.metadata.tokens import TOKEN_HEADER, TTL_HEADER, TokenIssuer, parse_ttl
from cloudnet.metadata.trees import TEXT, Reply
from cloudnet.metadata.view import MAX_REPLIES, ViewCache
from cloudnet.store.db import Store

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_WANTED = {
    b"x-instance-id": "instance",
    b"x-tenant-id": "tenant",
    b"x-instance-id-signature": "signature",
    b"x-forwarded-for": "forwarded",
    TOKEN_HEADER.encode(): "token",
    TTL_HEADER.encode(): "ttl",
    b"content-length": "length",
}


def _plain(status: int, text: str, *headers: tuple[bytes, bytes]) -> tuple[Reply, tuple[tuple[bytes, bytes], ...]]:
    return Reply(status, text.encode()), headers


MISSING = {
    "instance": "X-Instance-ID header is missing from request.",
    "signature": "X-Instance-ID-Signature header is missing from request.",
    "tenant": "X-Tenant-ID header is missing from request.",
}
FORBIDDEN = _plain(403, "Invalid proxy request signature.")
UNAUTHORIZED = _plain(401, "401 Unauthorized")
BAD_TTL = _plain(400, f"{TTL_HEADER} must be a whole number of seconds from 1 to 21600.")
NOT_ALLOWED = _plain(405, "Method not allowed.", (b"allow", b"GET, HEAD"))
PASSWORD_METHODS = _plain(400, "GET and POST only are supported.")
PASSWORD_TOO_LARGE = _plain(400, f"Request is too large (at most {trees.MAX_PASSWORD} bytes).")
PASSWORD_SET = _plain(409, "Password already set.")
UNAVAILABLE = _plain(503, "The metadata service cannot reach its database; try again.", (b"retry-after", b"2"))
FAILED = _plain(500, "An unknown error has occurred. Please try your request again.")


class MetadataApp:
    """The ASGI application; `views` is its cache, `settings` the service-wide answers."""

    def __init__(
        self,
        store: Store,
        secret: str,
        settings: Settings | None = None,
        *,
        max_age: float = 15.0,
        poll_interval: float = 1.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not secret:
            raise signing.SecretError("refusing to serve metadata with an empty shared secret")
        self.store = store
        self.secret = secret
        self.settings = settings or Settings()
        self.views = ViewCache(store, max_age=max_age, poll_interval=poll_interval)
        self.tokens = TokenIssuer(secret) if clock is None else TokenIssuer(secret, clock)
        self._signatures: dict[str, bytes] = {}  # instance id -> its (verified) signature

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            try:
                reply, headers = await self._handle(scope, receive)
            except DBAPIError as exc:
                log.warning("metadata: database error: %s", exc)
                reply, headers = UNAVAILABLE
            except Exception:
                log.exception("metadata: unexpected error on %s %s", scope["method"], scope["path"])
                reply, headers = FAILED
            await _respond(send, scope["method"], reply, headers)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.views.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.views.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _handle(self, scope: Scope, receive: Receive) -> tuple[Reply, tuple[tuple[bytes, bytes], ...]]:
        path: str = scope["path"]
        method: str = scope["method"]
        if trees.is_root(path):
            return trees.ec2_versions(), ()
        found: dict[str, str] = {}
        for name, value in scope["headers"]:
            key = _WANTED.get(name)
            if key is not None:
                text = value.decode("latin-1")
                # A repeated header joins as webob does ("a, b"): a second identity can only spoil the first.
                found[key] = f"{found[key]}, {text}" if key in found else text
        for key in ("instance", "signature", "tenant"):
            if key not in found:
                return _plain(400, MISSING[key])
        instance_id = found["instance"]
        if not self._signed(instance_id, found["signature"]):
            return FORBIDDEN
        entry = self.views.fresh(instance_id) or await self.views.get(instance_id)
        if entry is None or entry.view.project_id != found["tenant"]:
            return trees.NOT_FOUND, ()
        view = entry.view
        if method == "PUT" and trees.is_token_request(path):
            ttl = parse_ttl(found.get("ttl"))
            if ttl is None:
                return BAD_TTL
            return Reply(200, self.tokens.issue(instance_id, ttl).encode()), ((TTL_HEADER.encode(), str(ttl).encode()),)
        token = found.get("token")
        if token is not None:
            if not self.tokens.valid(instance_id, token):
                return UNAUTHORIZED
        elif view.metadata_tokens == REQUIRED:
            return UNAUTHORIZED
        if trees.is_password(path) and method not in ("GET", "HEAD"):
            if method != "POST":
                return PASSWORD_METHODS
            return await self._post_password(view.id, view.project_id, found.get("length"), receive)
        reply = entry.replies.get(path)
        if reply is None:
            forwarded = found.get("forwarded")
            remote = forwarded.rsplit(",", 1)[-1].strip() if forwarded else None
            reply = trees.render(view, self.settings, path, remote_ip=remote)
            if reply.cacheable and len(entry.replies) < MAX_REPLIES:
                entry.replies[path] = reply
        if method not in ("GET", "HEAD") and reply.status != 404:
            return NOT_ALLOWED  # it exists, but the guest may only read it
        return reply, ()

    def _signed(self, instance_id: str, signature: str) -> bool:
        """signing.verify, with the expected signature of recently seen instances kept (an HMAC per request
        is a measurable share of the work); the comparison itself stays constant-time."""
        expected = self._signatures.get(instance_id)
        if expected is None:
            if not signing.verify(self.secret, instance_id, signature):
                return False  # never cached: a forger cannot fill the table
            if len(self._signatures) >= 65536:
                self._signatures.clear()
            self._signatures[instance_id] = signature.encode()
            return True
        return hmac.compare_digest(expected, signature.encode("utf-8", "surrogateescape"))

    async def _post_password(
        self, instance_id: str, project_id: str, length: str | None, receive: Receive
    ) -> tuple[Reply, tuple[tuple[bytes, bytes], ...]]:
        if length is not None and (not length.strip().isdigit() or int(length) > trees.MAX_PASSWORD):
            return PASSWORD_TOO_LARGE
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > trees.MAX_PASSWORD:
                return PASSWORD_TOO_LARGE
            if not message.get("more_body"):
                break
        if not body:
            return Reply(200, b""), ()  # nothing to store, and an empty password does not count as set (nova)
        try:
            password = body.decode()
        except UnicodeDecodeError:
            return _plain(400, "The password must be UTF-8 text (nova's clients post base64).")
        outcome = await asyncio.to_thread(passwords.store_password, self.store, instance_id, project_id, password)
        if outcome is passwords.Outcome.STORED:
            self.views.drop(instance_id)
            return Reply(200, b""), ()
        if outcome is passwords.Outcome.ALREADY_SET:
            return PASSWORD_SET
        return trees.NOT_FOUND, ()


async def _respond(send: Send, method: str, reply: Reply, extra: tuple[tuple[bytes, bytes], ...]) -> None:
    body = reply.payload()
    headers = [
        (b"content-type", reply.content_type.encode() if reply.content_type != TEXT else _TEXT),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})


_TEXT = TEXT.encode()

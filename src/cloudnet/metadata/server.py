"""The metadata API: the OpenStack and EC2 trees for requests an agent's proxy has vouched for.

Served by the lean HTTP/1.1 server (wire/http_server.py) rather than an ASGI stack: every guest boot sends
dozens of requests and a boot storm multiplies that, so the per-request path is a header scan, one HMAC, a
dict lookup and a cached answer, all without a coroutine (`answer_now`); only what needs the database (a view
not cached yet, a password to store) goes through `answer`.

Order of checks, as nova's handler (reference/metadata.md §1.2):
1. `/` answers the EC2 version list before anything else;
2. a missing `X-Instance-ID`, `X-Instance-ID-Signature` or `X-Tenant-ID` is a 400;
3. a signature that does not match the instance id is a 403;
4. an unknown instance, or one of another project than `X-Tenant-ID`, is a 404;
5. IMDSv2: a presented token must be valid (401), and is required when the instance says so (401);
6. then the tree: unknown paths and versions are 404s.

Every answer carries the request's id (X-OpenStack-Request-ID): the relay's, sent as the first header line so that
the lines after it (the ones the identity table is keyed by) stay the same for every request of a guest; a cached
answer's rendering is spliced, not made again (wire/http1.with_first_header).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError

from cloudnet.metadata import passwords, trees
from cloudnet.metadata.answers import Answer
from cloudnet.metadata.model import REQUIRED, Settings
from cloudnet.metadata.tokens import TOKEN_HEADER, TTL_HEADER, TokenIssuer, parse_ttl
from cloudnet.metadata.trees import Reply
from cloudnet.metadata.view import MAX_REPLIES, Entry, ViewCache
from cloudnet.store.db import Store
from cloudnet.wire import logs, metadata_paths, request_ids, signing
from cloudnet.wire.http1 import Request, Response, with_first_header

log = logging.getLogger(__name__)

# Header name (lower-case) -> what the checks call it.
_WANTED = {
    b"x-instance-id": "instance",
    b"x-tenant-id": "tenant",
    b"x-instance-id-signature": "signature",
    b"x-forwarded-for": "forwarded",
    TOKEN_HEADER.encode(): "token",
    TTL_HEADER.encode(): "ttl",
    b"content-length": "length",
}
MAX_IDENTIFIED = 4096
# Only heads this small are remembered (a proxied head is about 400 bytes): a guest's long User-Agent must not
# grow the table to MAX_IDENTIFIED times the head limit.
MAX_IDENTIFIED_HEAD = 2048
_ROOT = metadata_paths.tokens("/")


def _answer(reply: Reply, *headers: tuple[str, str]) -> Response:
    return Answer(reply, *headers).response()


def _plain(status: int, text: str, *headers: tuple[str, str]) -> Response:
    return _answer(Reply(status, text.encode()), *headers)


MISSING = {
    "instance": "X-Instance-ID header is missing from request.",
    "signature": "X-Instance-ID-Signature header is missing from request.",
    "tenant": "X-Tenant-ID header is missing from request.",
}
FORBIDDEN = _plain(403, "Invalid proxy request signature.")
UNAUTHORIZED = _plain(401, "401 Unauthorized")
BAD_TTL = _plain(400, f"{TTL_HEADER} must be a whole number of seconds from 1 to 21600.")
NOT_ALLOWED = _plain(405, "Method not allowed.", ("Allow", "GET, HEAD"))
PASSWORD_METHODS = _plain(400, "GET and POST only are supported.")
PASSWORD_TOO_LARGE = _plain(400, f"Request is too large (at most {trees.MAX_PASSWORD} bytes).")
PASSWORD_SET = _plain(409, "Password already set.")
PASSWORD_NOT_UTF8 = _plain(400, "The password must be UTF-8 text (nova's clients post base64).")
UNAVAILABLE = _plain(503, "The metadata service cannot reach its database; try again.", ("Retry-After", "2"))
FAILED = _plain(500, "An unknown error has occurred. Please try your request again.")
NOT_FOUND = _answer(trees.NOT_FOUND)
EMPTY = _answer(Reply(200, b""))
VERSIONS = Answer(trees.ec2_versions())


class MetadataApp:
    """The application the HTTP server asks; `views` is its cache, `settings` the service-wide answers."""

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
        # Header lines as received -> the identity they proved (steps 2 and 3 passed). A proxy sends the same
        # lines for every request of one guest, and reading them was the largest part of a cached answer.
        self._identified: dict[tuple[tuple[bytes, bytes], ...], tuple[str, dict[str, str]]] = {}

    # -- the HTTP server's side (http_server.Application) -------------------------------------------

    def start(self) -> None:
        """Follow commits of other processes (called on the serving loop)."""
        self.views.start()

    async def stop(self) -> None:
        await self.views.stop()

    def answer_now(self, request: Request) -> Response | None:
        """The answer when it needs no I/O (the usual case: a cached view); None when `answer` must be asked."""
        rid, headers = request_ids.split_first(request.raw_headers)
        try:
            path = request.path
            checked = self._identify(path, headers)
            if isinstance(checked, Response):
                return with_first_header(checked, request_ids.HEADER, rid)
            instance_id, found = checked
            entry = self.views.fresh(instance_id)
            response = None if entry is None else self._respond(request.method, path, found, entry)
            return None if response is None else with_first_header(response, request_ids.HEADER, rid)
        except Exception:
            # (the id only for this line: this runs in the connection's callback, whose context outlives it)
            token = request_ids.current.set(rid)
            log.exception("metadata: unexpected error on %s %s", request.method, logs.printable(request.target))
            request_ids.current.reset(token)
            return with_first_header(FAILED, request_ids.HEADER, rid)

    async def answer(self, request: Request) -> Response:
        # (a task of its own: the id stays with this request, in every line it logs)
        rid, headers = request_ids.split_first(request.raw_headers)
        request_ids.current.set(rid)
        return with_first_header(await self._answer(request, headers), request_ids.HEADER, rid)

    async def _answer(self, request: Request, headers: list[tuple[bytes, bytes]]) -> Response:
        try:
            path = request.path
            checked = self._identify(path, headers)
            if isinstance(checked, Response):
                return checked
            instance_id, found = checked
            entry = self.views.fresh(instance_id) or await self.views.get(instance_id)
            response = self._respond(request.method, path, found, entry)
            if response is None:
                assert entry is not None
                return await self._post_password(entry.view.id, entry.view.project_id, found.get("length"),
                                                 request.body)  # fmt: skip
            return response
        except DBAPIError as exc:
            log.warning("metadata: database error: %s", exc)
            return UNAVAILABLE
        except Exception:
            log.exception("metadata: unexpected error on %s %s", request.method, logs.printable(request.target))
            return FAILED

    # -- the checks, in nova's order ----------------------------------------------------------------

    def _identify(self, path: str, headers: list[tuple[bytes, bytes]]) -> Response | tuple[str, dict[str, str]]:
        """Steps 1 to 3: the answer that ends the request (the version list, a refusal), or the signed instance
        id and the headers of interest (from the header lines as received)."""
        if metadata_paths.tokens(path) == _ROOT:  # trees.is_root, without a call of its own on every request
            return VERSIONS.response()
        lines = tuple(headers)
        known = self._identified.get(lines)
        if known is not None:
            return known  # the same lines as a request already identified: the same answer
        found: dict[str, str] = {}
        for name, raw in headers:  # (only for lines not seen before: a proxy repeats its lines)
            key = _WANTED.get(name.lower())
            if key is None:
                continue
            value = raw.decode("latin-1").strip(" \t")
            # A repeated header joins as webob does ("a, b"): a second identity can only spoil the first.
            found[key] = f"{found[key]}, {value}" if key in found else value
        for key in ("instance", "signature", "tenant"):
            if key not in found:
                return _plain(400, MISSING[key])
        instance_id = found["instance"]
        if not self._signed(instance_id, found["signature"]):
            return FORBIDDEN  # never kept: a forger cannot fill the table
        identified = (instance_id, found)
        if sum(len(n) + len(v) for n, v in lines) <= MAX_IDENTIFIED_HEAD:
            if len(self._identified) >= MAX_IDENTIFIED:
                self._identified.clear()  # guests whose lines change with every request (tokens, lengths)
            self._identified[lines] = identified
        return identified

    def _respond(self, method: str, path: str, found: dict[str, str], entry: Entry | None) -> Response | None:
        """Steps 4 to 6 for the instance's cached entry; None for a password to store (a database write)."""
        if entry is None or entry.view.project_id != found["tenant"]:
            return NOT_FOUND
        view, instance_id = entry.view, found["instance"]
        if method == "PUT" and metadata_paths.is_token_request(path):
            ttl = parse_ttl(found.get("ttl"))
            if ttl is None:
                return BAD_TTL
            return _answer(Reply(200, self.tokens.issue(instance_id, ttl).encode()), (TTL_HEADER, str(ttl)))
        token = found.get("token")
        if token is not None:
            if not self.tokens.valid(instance_id, token):
                return UNAUTHORIZED
        elif view.metadata_tokens == REQUIRED:
            return UNAUTHORIZED
        if method not in ("GET", "HEAD") and trees.is_password(path):
            return None if method == "POST" else PASSWORD_METHODS
        answer = entry.replies.get(path)
        if answer is None:
            forwarded = found.get("forwarded")
            remote = forwarded.rsplit(",", 1)[-1].strip() if forwarded else None
            reply = trees.render(view, self.settings, path, remote_ip=remote)
            answer = Answer(reply)
            if reply.cacheable and len(entry.replies) < MAX_REPLIES:
                entry.replies[path] = answer
        if method not in ("GET", "HEAD") and answer.status != 404:
            return NOT_ALLOWED  # it exists, but the guest may only read it
        return answer.response()

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

    async def _post_password(self, instance_id: str, project_id: str, length: str | None, body: bytes) -> Response:
        if length is not None and (not length.strip().isdigit() or int(length) > trees.MAX_PASSWORD):
            return PASSWORD_TOO_LARGE
        if len(body) > trees.MAX_PASSWORD:
            return PASSWORD_TOO_LARGE
        if not body:
            return EMPTY  # nothing to store, and an empty password does not count as set (nova)
        try:
            password = body.decode()
        except UnicodeDecodeError:
            return PASSWORD_NOT_UTF8
        outcome = await asyncio.to_thread(passwords.store_password, self.store, instance_id, project_id, password)
        if outcome is passwords.Outcome.STORED:
            log.info("metadata: instance %s stored its password", instance_id)  # (a write: logged, as the API's)
            self.views.drop(instance_id)
            return EMPTY
        if outcome is passwords.Outcome.ALREADY_SET:
            return PASSWORD_SET
        return NOT_FOUND

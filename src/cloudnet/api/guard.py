"""The door of every request: who is asking, before a byte of the body is read, and how much body there may be.

A raw ASGI middleware (no framework layer on the hot path): it authenticates the token first (401 before the body
is read, so an anonymous caller cannot make the server buffer or parse anything), then refuses a body whose
announced length is over the limit (413 without reading it) and counts the bytes of one that did not announce its
length (413 the moment it crosses the limit). The caller's context goes into the scope for the routes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from cloudnet.api.auth import Authenticator
from cloudnet.api.neutron import error_response
from cloudnet.errors import CloudnetError, Forbidden
from cloudnet.pki.join_token import CA_PATH, CRL_PATH, JOIN_PATH
from cloudnet.pki.tls import PEER_KEY, Peer
from cloudnet.services.context import Context

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Version discovery answers anyone (keystoneauth asks before it authenticates), and so does the OpenAPI document
# (it describes the API, and holds no data); /v3/auth/* authenticate for themselves (api/keystone.py: a login has
# no token yet).
# A join authenticates with its join token, and the CA certificate is no secret (api/host_join.py).
PUBLIC_PATHS = frozenset({"/", "/v2.0", "/v2.0/", "/v3", "/v3/", "/v3/auth/tokens", "/v3/auth/projects",
                          "/openapi.json", "/v2.0/openapi.json", JOIN_PATH, CA_PATH})  # fmt: skip
# Keystone's face authenticates these for itself too, to answer Keystone's error body (api/keystone.py).
SELF_AUTHENTICATED = ("/v3/users/",)
CONTEXT_KEY = "cloudnet.context"
METRICS_PATH = "/metrics"  # (scraped by Prometheus, which sends its token as `Authorization: Bearer`)
# What is done for a host (api/hosts.py, api/instance_metadata.py): the host is in the path, or the instance is
# (it must be bound to the host). A host certificate may act for its own host only, whatever token comes with it.
HOST_SCOPED = re.compile(r"^/v2\.0/hosts/([^/]+)(?:/|$)")
INSTANCE_SCOPED = re.compile(r"^/v2\.0/instances/([^/]+)/(?:metadata|config-drive)(?:/|$)")
# What a certificate alone may do: its agent's calls (agent/client.py), nothing else (not even an admin's call on
# its own host, such as minting a join token for it or removing it).
AGENT_CALLS = [
    ({"GET", "PUT"}, re.compile(r"^/v2\.0/hosts/[^/]+$")),
    ({"GET"}, re.compile(r"^/v2\.0/hosts/[^/]+/state$")),
    ({"PUT"}, re.compile(r"^/v2\.0/hosts/[^/]+/ports$")),
    ({"GET"}, re.compile(r"^/v2\.0/events$")),
    ({"POST"}, re.compile(r"^/v2\.0/hosts/[^/]+/certificates$")),  # renewal
    ({"GET"}, re.compile(f"^{re.escape(CRL_PATH)}$")),  # the CA's revocation list (a cluster member's front)
    ({"GET", "PUT", "DELETE"}, re.compile(r"^/v2\.0/instances/[^/]+/metadata(?:/.+)?$")),
]
# Why a request over this client certificate is refused (revoked, unknown, an instance of another host), or None.
PeerCheck = Callable[[Peer, str | None], Awaitable[str | None]]


class PayloadTooLarge(CloudnetError):
    status = 413
    type = "RequestEntityTooLarge"

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request is too large: the body may have at most {limit} bytes.")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")  # type: ignore[no-any-return]
    return None


def context_of(scope: Scope) -> Context:
    return scope[CONTEXT_KEY]  # type: ignore[no-any-return]


class CertificateRefused(Forbidden):
    type = "HostCertificateRefused"


def _refuse(peer: Peer, scope: Scope, why: str) -> CertificateRefused:
    log.warning("refused %s %s from %s over host %s's certificate: %s", scope.get("method"), scope["path"],
                (scope.get("client") or ("?",))[0], peer.host, why)  # fmt: skip
    return CertificateRefused(f"Refused: {why}")


class Guard:
    def __init__(self, app: ASGIApp, auth: Authenticator, max_body: int, peer_check: PeerCheck | None = None) -> None:
        self.app = app
        self.auth = auth
        self.max_body = max_body
        self.peer_check = peer_check

    async def _agent(self, scope: Scope, peer: Peer, token: str | None) -> Context | None:
        """The context of a request over a host certificate (None: the token's, checked as any), or refused."""
        path = scope["path"]
        host = HOST_SCOPED.match(path)
        if host is not None and host.group(1) != peer.host:
            raise _refuse(peer, scope, f"host {peer.host}'s certificate may not act for host {host.group(1)}")
        instance = INSTANCE_SCOPED.match(path)
        if token is None and not any(scope["method"] in methods and p.match(path) for methods, p in AGENT_CALLS):
            raise _refuse(peer, scope, f"a host certificate alone makes only its agent's calls ({peer.host})")
        why = "no revocation list here" if self.peer_check is None else await self.peer_check(
            peer, None if instance is None else instance.group(1))  # fmt: skip
        if why is not None:
            raise _refuse(peer, scope, why)
        # The agent's own routes: an admin's view, within the host (the paths checked above).
        return Context.admin() if token is None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            peer: Peer | None = scope.get(PEER_KEY)
            token = _header(scope, b"x-auth-token")
            if token is None and scope["path"] == METRICS_PATH:  # Prometheus' `authorization` (type Bearer)
                bearer = _header(scope, b"authorization") or ""
                token = bearer[7:] if bearer[:7].lower() == "bearer " else None
            agent = None if peer is None else await self._agent(scope, peer, token)
            if agent is not None:
                scope[CONTEXT_KEY] = agent
            elif scope["path"] not in PUBLIC_PATHS and not scope["path"].startswith(SELF_AUTHENTICATED):
                scope[CONTEXT_KEY] = self.auth.authenticate(token, _header(scope, b"x-project-id"))
            length = _header(scope, b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                raise PayloadTooLarge(self.max_body)
        except CloudnetError as exc:
            response = error_response(exc)
            response.headers["Connection"] = "close"  # an unread body must not be taken for the next request
            await response(scope, receive, send)
            return
        if length is not None:  # the server delivers at most Content-Length bytes
            await self.app(scope, receive, send)
            return
        await self.app(scope, self._counted(receive), send)

    def _counted(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise PayloadTooLarge(self.max_body)
            return message

        return counted

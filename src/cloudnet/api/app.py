"""The application: routes, error translation, authentication state.

The route modules declare their routes with FastAPI's `APIRouter` decorators (every endpoint takes the request
and string path parameters, and answers a Response), but the application serving them is a plain Starlette
one with one flat route table: FastAPI's nested router matching cost ~250 µs per request, more than a whole
port create, and nothing else of FastAPI (validation, dependencies, OpenAPI) is used: the OpenAPI document is
built from this table by api/openapi.py. The hottest routes (port create and pool claim) come first in the table.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute
from sqlalchemy.exc import DataError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cloudnet.api import (
    events,
    extensions,
    forwards,
    host_join,
    hosts,
    identity,
    instance_metadata,
    keystone,
    metrics,
    openapi,
    port_forwardings,
    port_pools,
    qos,
    quotas,
    resources,
    subnetpools,
    tags,
    trunks,
    ui,
    zones,
)
from cloudnet.api.auth import Authenticator
from cloudnet.api.deps import AppState, call
from cloudnet.api.guard import Guard
from cloudnet.api.neutron import JSON, error_response
from cloudnet.api.request_ids import RequestIds, with_id
from cloudnet.config import ServerConfig
from cloudnet.errors import BadRequest, CloudnetError, ServiceUnavailable
from cloudnet.metadata import service as metadata_service
from cloudnet.pki.tls import Peer
from cloudnet.pki.x509 import Authority
from cloudnet.services import quotas as quota_service
from cloudnet.services.hosts import host_join as host_join_service
from cloudnet.services.networks import single_host
from cloudnet.store import errors as store_errors
from cloudnet.store.db import Store

log = logging.getLogger(__name__)
HTTP_TYPES = {404: "HTTPNotFound", 405: "HTTPMethodNotAllowed", 401: "HTTPUnauthorized", 403: "HTTPForbidden"}
# Matched first, in this order: what a busy server mostly answers (the table is scanned in order, ~1 µs a route).
HOT = [
    ("POST", "/v2.0/ports"), ("POST", "/v2.0/port-pools/claim"), ("POST", "/v2.0/instances"),
    ("GET", "/v2.0/events"), ("PUT", "/v2.0/hosts/{name}/ports"), ("GET", "/v2.0/hosts/{name}/state"),
    ("PUT", "/v2.0/hosts/{name}"), ("GET", "/v2.0/ports"), ("GET", "/v2.0/ports/{item_id}"),
]  # fmt: skip


async def _versions(request: Request) -> Response:
    href = str(request.base_url) + "v2.0/"
    return JSON({"versions": [{"id": "v2.0", "status": "CURRENT", "links": [{"href": href, "rel": "self"}]}]})


async def _v2_root(request: Request) -> Response:
    # keystoneauth runs version discovery on the endpoint it is given, even with auth_type none:
    # the `version` document is what lets clouds.yaml point straight at .../v2.0.
    base = str(request.base_url) + "v2.0/"
    names = [r.collection for r in resources.RESOURCES]
    return JSON(
        {
            "version": {"id": "v2.0", "status": "CURRENT", "links": [{"href": base, "rel": "self"}]},
            "resources": [{"name": n, "collection": n, "links": [{"href": base + n, "rel": "self"}]} for n in names],
        }
    )


def _plain(route: APIRoute) -> Route:
    """The route as a Starlette one: the endpoint gets its path parameters from the matched path."""
    endpoint = route.endpoint
    names = [p for p in inspect.signature(endpoint).parameters if p != "request"]

    async def handle(request: Request) -> Response:
        params = request.path_params
        result: Awaitable[Response] = endpoint(request=request, **{n: params[n] for n in names})
        return await result

    return Route(route.path, handle, methods=sorted(route.methods or ()), name=route.name)


def routes(routers: Iterable[APIRouter]) -> list[BaseRoute]:
    table: list[BaseRoute] = [Route("/", _versions, methods=["GET"]), Route("/v2.0", _v2_root, methods=["GET"]),
                              Route("/v2.0/", _v2_root, methods=["GET"])]  # fmt: skip
    table += [Route(path, openapi.serve, methods=["GET"], name="openapi") for path in openapi.PATHS]
    for router in routers:
        for route in router.routes:
            if not isinstance(route, APIRoute):
                raise TypeError(f"unexpected route {route!r}")
            table.append(_plain(route))

    def rank(route: BaseRoute) -> int:
        assert isinstance(route, Route)
        for i, (method, path) in enumerate(HOT):
            if route.path == path and method in (route.methods or ()):
                return i
        return len(HOT)

    return sorted(table, key=rank)  # stable: every other route keeps its place


def create_app(config: ServerConfig, store: Store, auth: Authenticator | None = None,
               authority: Authority | None = None) -> Starlette:  # fmt: skip
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        notifier = events.Notifier(asyncio.get_running_loop())
        app.state.notifier = notifier
        # Agents' port reports only: what wakes those waiting for an instance to be plugged (GET ?wait=S), who
        # would otherwise read again on every commit of the cloud.
        app.state.reports = events.Notifier(asyncio.get_running_loop())
        store.on_commit(notifier.committed)
        await port_pools.recover_pools(app.state.cloudnet)
        sweeper = asyncio.create_task(hosts.sweep_dead_hosts(app.state.cloudnet))
        pool_maintainer = asyncio.create_task(port_pools.maintain_pools(app.state.cloudnet))
        try:
            yield
        finally:
            sweeper.cancel()
            pool_maintainer.cancel()

    async def cloudnet_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, CloudnetError)
        return error_response(exc)

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        detail = "The resource could not be found." if exc.status_code == 404 else str(exc.detail)
        err = CloudnetError(detail, type=HTTP_TYPES.get(exc.status_code, "HTTPError"))
        err.status = exc.status_code
        return error_response(err)

    async def data_error(request: Request, exc: Exception) -> Response:
        # A value the database cannot hold (out of range, too long, a NUL character): the request's fault.
        reason = getattr(exc, "orig", exc)
        log.warning("database refused a value on %s %s: %s", request.method, request.url.path, reason)
        return error_response(BadRequest("Invalid input: a value in the request cannot be stored"))

    async def database_error(request: Request, exc: Exception) -> Response:
        # Handled here rather than as a bare Exception: Starlette re-raises those after answering, and the server
        # then drops the kept-alive connection under the client.
        why = store_errors.unavailable(exc)
        if why is None:
            return await unexpected(request, exc)
        # a full disk, a read-only database: the service's trouble, for a while
        log.error("database unavailable on %s %s: %s (%s)", request.method, request.url.path, why, exc)
        if store_errors.outcome_unknown(exc):
            changed = "It may have been stored as the connection went: look before you try again."
        else:
            changed = "Nothing was changed; try again once the operator has fixed it."
        return error_response(ServiceUnavailable(f"The request could not be stored: {why}. {changed}",
                                                 retry_after=5, type="DatabaseUnavailable"))  # fmt: skip

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        # (answered outside the middlewares, RequestIds included: the id is added here)
        return with_id(error_response(CloudnetError("Request Failed: internal server error while processing your "
                                                    "request.")))  # fmt: skip

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        CloudnetError: cloudnet_error,
        HTTPException: http_error,
        DataError: data_error,
        store_errors.DatabaseError: database_error,
        Exception: unexpected,
    }
    auth = auth or Authenticator(config.tokens_file)

    async def peer_check(peer: Peer, instance_id: str | None) -> str | None:
        # (a read per request over a host certificate: agents' requests are few; users' carry none)
        try:
            return await call(host_join_service.peer_refusal, store, peer.serial, peer.host, instance_id)
        except store_errors.DatabaseError as exc:
            # (in the guard, before any route and its handlers: a database away is answered as they answer it)
            why = store_errors.unavailable(exc)
            if why is None:
                raise
            log.error("database unavailable checking host %s's certificate: %s (%s)", peer.host, why, exc)
            raise ServiceUnavailable(f"The host's certificate could not be checked: {why}. Nothing was changed; "
                                     "try again.", retry_after=5, type="DatabaseUnavailable") from None  # fmt: skip

    quota_service.configure(store, config.quotas)
    single_host.configure(store, config.dataplane)
    app = Starlette(
        routes=routes([resources.build(), port_pools.router, extensions.router, events.router, tags.router,
                       hosts.router, host_join.router, forwards.router, port_forwardings.router,
                       instance_metadata.router, quotas.router, identity.router, keystone.router, metrics.router,
                       trunks.router, subnetpools.router, qos.build(), zones.router]),
        exception_handlers=handlers,
        middleware=[Middleware(RequestIds),  # type: ignore[arg-type]
                    *([Middleware(metrics.RequestMetrics)] if config.metrics else []),  # type: ignore[arg-type]
                    Middleware(ui.UiFiles),  # type: ignore[arg-type]
                    Middleware(Guard, auth=auth, max_body=config.max_body_size,  # type: ignore[arg-type]
                               peer_check=peer_check)],
        lifespan=lifespan,
    )  # fmt: skip
    # (with --no-metrics nothing watches the commits: the programming latency is a metric only)
    app.state.programming = metrics.Programming(store) if config.metrics else None
    app.state.cloudnet = AppState(config=config, store=store, auth=auth, metadata=metadata_service.settings(config),
                                  authority=authority)  # fmt: skip
    return app

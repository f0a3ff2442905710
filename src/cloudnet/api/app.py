"""The FastAPI application: routes, error translation, authentication state."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from cloudnet import __version__
from cloudnet.api import events, extensions, forwards, hosts, instance_metadata, port_pools, resources, tags
from cloudnet.api.auth import Authenticator
from cloudnet.api.deps import AppState
from cloudnet.api.neutron import JSON, error_response
from cloudnet.config import ServerConfig
from cloudnet.errors import BadRequest, CloudnetError
from cloudnet.store.db import Store

log = logging.getLogger(__name__)
HTTP_TYPES = {404: "HTTPNotFound", 405: "HTTPMethodNotAllowed", 401: "HTTPUnauthorized", 403: "HTTPForbidden"}


def create_app(config: ServerConfig, store: Store, auth: Authenticator | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        notifier = events.Notifier(asyncio.get_running_loop())
        app.state.notifier = notifier
        store.on_commit(notifier.committed)
        sweeper = asyncio.create_task(hosts.sweep_dead_hosts(app.state.cloudnet))
        pool_maintainer = asyncio.create_task(port_pools.maintain_pools(app.state.cloudnet))
        try:
            yield
        finally:
            sweeper.cancel()
            pool_maintainer.cancel()

    app = FastAPI(title="cloudnet", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.cloudnet = AppState(config=config, store=store, auth=auth or Authenticator(config.tokens_file))

    @app.exception_handler(CloudnetError)
    async def _cloudnet_error(_request: Request, exc: CloudnetError) -> Response:
        return error_response(exc)

    @app.exception_handler(HTTPException)
    async def _http_error(_request: Request, exc: HTTPException) -> Response:
        detail = "The resource could not be found." if exc.status_code == 404 else str(exc.detail)
        err = CloudnetError(detail, type=HTTP_TYPES.get(exc.status_code, "HTTPError"))
        err.status = exc.status_code
        return error_response(err)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> Response:
        return error_response(BadRequest(f"Invalid request: {exc.errors()[0].get('msg', 'bad input')}"))

    @app.exception_handler(DataError)
    async def _data_error(request: Request, exc: DataError) -> Response:
        # A value the database cannot hold (out of range, too long, a NUL character): the request's fault.
        log.warning("database refused a value on %s %s: %s", request.method, request.url.path, exc.orig)
        return error_response(BadRequest("Invalid input: a value in the request cannot be stored"))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(CloudnetError("Request Failed: internal server error while processing your request."))

    @app.get("/")
    async def versions(request: Request) -> Response:
        href = str(request.base_url) + "v2.0/"
        return JSON({"versions": [{"id": "v2.0", "status": "CURRENT", "links": [{"href": href, "rel": "self"}]}]})

    @app.get("/v2.0")
    @app.get("/v2.0/")
    async def v2_root(request: Request) -> Response:
        # keystoneauth runs version discovery on the endpoint it is given, even with auth_type none:
        # the `version` document is what lets clouds.yaml point straight at .../v2.0.
        base = str(request.base_url) + "v2.0/"
        names = [r.collection for r in resources.RESOURCES]
        return JSON(
            {
                "version": {"id": "v2.0", "status": "CURRENT", "links": [{"href": base, "rel": "self"}]},
                "resources": [
                    {"name": n, "collection": n, "links": [{"href": base + n, "rel": "self"}]} for n in names
                ],
            }
        )

    app.include_router(extensions.router)
    app.include_router(events.router)
    app.include_router(tags.router)
    app.include_router(hosts.router)
    app.include_router(forwards.router)
    app.include_router(port_pools.router)
    app.include_router(instance_metadata.router)
    app.include_router(resources.build())
    return app

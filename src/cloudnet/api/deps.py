"""Per-request plumbing shared by the route modules: the app state and the caller's context."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from cloudnet.api.auth import Authenticator
from cloudnet.config import ServerConfig
from cloudnet.services.context import Context
from cloudnet.store.db import Store

T = TypeVar("T")


@dataclass
class AppState:
    config: ServerConfig
    store: Store
    auth: Authenticator


def state(request: Request) -> AppState:
    return request.app.state.cloudnet  # type: ignore[no-any-return]


def context(request: Request) -> Context:
    return state(request).auth.context(request.headers.get("x-auth-token"), request.headers.get("x-project-id"))


async def call(fn: Callable[..., T], *args: Any) -> T:
    """Run a (blocking, database-bound) service call off the event loop."""
    return await run_in_threadpool(fn, *args)

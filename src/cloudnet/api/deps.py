"""Per-request plumbing shared by the route modules: the app state and the caller's context."""

from __future__ import annotations

import asyncio
import contextvars
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.exc import OperationalError
from starlette.requests import Request

from cloudnet.api.auth import Authenticator
from cloudnet.api.guard import context_of
from cloudnet.config import ServerConfig
from cloudnet.metadata.model import Settings
from cloudnet.pki.x509 import Authority
from cloudnet.services.context import Context
from cloudnet.services.hosts.crl import CrlCache
from cloudnet.store.db import Store

T = TypeVar("T")
WORKERS = 40


@dataclass
class AppState:
    config: ServerConfig
    store: Store
    auth: Authenticator
    # What the metadata API answers beside each instance's own data (vendor data, domain): config drives hold it.
    metadata: Settings
    # The cloud's CA (None: this app signs nothing, as in tests that build it without one): joins need it.
    authority: Authority | None = None
    crl: CrlCache = field(default_factory=CrlCache)  # the CA's revocation list, signed again only when due


def state(request: Request) -> AppState:
    return request.app.state.cloudnet  # type: ignore[no-any-return]


def context(request: Request) -> Context:
    """The caller, as the guard authenticated it before the body was read."""
    return context_of(request.scope)


# The worker threads of the service calls (as many as anyio's default thread limiter allows). A plain executor:
# the trip to a worker and back costs about half of anyio's (run_in_threadpool), on every request.
_workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="cloudnet-api")


async def call(fn: Callable[..., T], *args: Any) -> T:
    """Run a (blocking, database-bound) service call off the event loop, in the request's context (its request id:
    the log lines and the events the call records carry it; an executor alone runs it in the thread's own)."""
    return await asyncio.get_running_loop().run_in_executor(_workers, contextvars.copy_context().run, fn, *args)


async def quick(store: Store, fn: Callable[..., T], *args: Any) -> T:
    """A short write transaction that waits for no lock but the store's: on SQLite, run right here on the event
    loop when this process's write lock is free (a worker thread means two thread switches, ~0.1 ms of a 1 ms
    claim), else, or when another process holds the database, on a worker thread as `call`."""
    with store.writes_held_here() as held:
        if held:
            try:
                return fn(*args)
            except (sqlite3.OperationalError, OperationalError) as exc:
                if "locked" not in str(exc):
                    raise
    return await call(fn, *args)

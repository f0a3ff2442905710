"""Database transactions timed and their failures counted (cloudnet/metrics.py), by kind (read or write)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError

from cloudnet import metrics

_DURATION = {kind: metrics.DB_DURATION.labels(kind) for kind in ("read", "write")}
_ERRORS = {kind: metrics.DB_ERRORS.labels(kind) for kind in ("read", "write")}


@contextmanager
def timed(kind: str) -> Iterator[None]:
    """The transaction inside, timed; a failure of the database's own counted (a refusal a service raises inside
    it, such as a 404, is no database error)."""
    if not metrics.enabled:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    except (sqlite3.Error, DBAPIError):
        _ERRORS[kind].inc()
        raise
    finally:
        _DURATION[kind].observe(time.perf_counter() - started)

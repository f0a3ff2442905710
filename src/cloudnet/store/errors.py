"""What a database error means for the caller: a database that cannot take writes right now (a full disk, a
read-only database or file system) is the service's trouble, not the request's: 503, and it passes by itself."""

from __future__ import annotations

import sqlite3

import psycopg
from sqlalchemy.exc import DBAPIError as DatabaseError

__all__ = ["DatabaseError", "outcome_unknown", "unavailable"]

SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN = 8, 10, 13, 14
# PostgreSQL SQLSTATEs: disk_full, insufficient_resources' class, read_only_sql_transaction.
PG_DISK_FULL, PG_RESOURCES, PG_READ_ONLY = "53100", "53", "25006"
# connection_exception's class; admin/crash shutdown, cannot_connect_now (starting up, in recovery): "57P0x".
PG_CONNECTION, PG_SHUTDOWN = "08", "57P0"


def outcome_unknown(exc: BaseException) -> bool:
    """The connection went while a statement was in flight: a COMMIT may have been stored before it went (a
    restarted or failed-over PostgreSQL)."""
    return bool(getattr(exc, "connection_invalidated", False))


def unavailable(exc: BaseException) -> str | None:
    """Why the database cannot take this write now, as the end of a sentence; None for any other error."""
    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, sqlite3.Error):
        code = (getattr(orig, "sqlite_errorcode", None) or 0) & 0xFF  # (the primary code of an extended one)
        if code == SQLITE_FULL:
            return "the disk that holds the database is full"
        if code == SQLITE_READONLY:
            return "the database is read-only"
        if code == SQLITE_CANTOPEN:  # (in WAL mode, what a read-only file system gives: no -shm file)
            return "the database cannot be opened for writing (a read-only file system, or a missing file)"
        if code == SQLITE_IOERR:
            return "the database's disk failed a write (out of space, or an I/O error)"
        return None
    state = getattr(orig, "sqlstate", None)
    if isinstance(state, str):
        if state == PG_READ_ONLY:
            return "the database is read-only"
        if state == PG_DISK_FULL:
            return "the disk that holds the database is full"
        if state.startswith(PG_RESOURCES):
            return "the database is out of resources (disk, memory or connections)"
        if state.startswith(PG_SHUTDOWN):
            return "the database is restarting or shutting down"
        if state.startswith(PG_CONNECTION):
            return "the database cannot be reached"
    if outcome_unknown(exc):
        return "the connection to the database was lost"
    if isinstance(orig, psycopg.OperationalError) and state is None:  # (no connection made: no server answered)
        return "the database cannot be reached"
    return None

"""What a database error means for the caller: a database that cannot take writes right now (a full disk, a
read-only database or file system) is the service's trouble, not the request's: 503, and it passes by itself."""

from __future__ import annotations

import sqlite3

from sqlalchemy.exc import DBAPIError as DatabaseError

__all__ = ["DatabaseError", "unavailable"]

SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN = 8, 10, 13, 14
# PostgreSQL SQLSTATEs: disk_full, insufficient_resources' class, read_only_sql_transaction.
PG_DISK_FULL, PG_RESOURCES, PG_READ_ONLY = "53100", "53", "25006"


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
    return None

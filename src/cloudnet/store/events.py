"""An event of the revision log, and what the log's follower (store/changes.py) reads of the writing transaction
(store/db.py's Tx) that records it: both modules need these, and neither needs the other for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Connection


@dataclass(frozen=True)
class Event:
    resource: str
    resource_id: str
    operation: str  # create | update | delete
    project_id: str | None = None


class Transaction(Protocol):
    """The parts of a writing transaction the change feed uses."""

    conn: Connection
    events: list[Event]
    # Whether this process's caches were brought up to date in this transaction.
    synced: bool

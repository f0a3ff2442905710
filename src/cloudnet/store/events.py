"""An event of the revision log, and what the log's follower (store/changes.py) reads of the writing transaction
(store/db.py's Tx) that records it: both modules need these, and neither needs the other for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import Connection


@dataclass(frozen=True)
class Event:
    resource: str
    resource_id: str
    operation: str  # create | update | delete
    project_id: str | None = None
    # What followers of the stream see (`cloudnet monitor`), not what identifies the change (the change feed
    # compares events by the fields above): the event's type (default: `<resource>.<operation>d`, port.created),
    # what caused it (the request's id) and a reason (why a port failed, why a host is down).
    type: str | None = field(default=None, compare=False)
    request_id: str | None = field(default=None, compare=False)
    detail: str | None = field(default=None, compare=False)

    def typed(self) -> str:
        return self.type or default_type(self.resource, self.operation)


PAST = {"create": "created", "update": "updated", "delete": "deleted"}
MAX_DETAIL = 1000  # the column's length: a reason is cut to it


def default_type(resource: str, operation: str) -> str:
    return f"{resource}.{PAST.get(operation, operation)}"


class Transaction(Protocol):
    """The parts of a writing transaction the change feed uses."""

    conn: Connection
    events: list[Event]
    # Whether this process's caches were brought up to date in this transaction.
    synced: bool

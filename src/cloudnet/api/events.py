"""GET /v2.0/events?since=N&timeout=S[&type=T...][&project_id=P]: the revision log, long-polled, as typed events
(agents follow it; so do `cloudnet monitor` and the web UI, a member for their own project only).

Commits made by this process wake waiting requests at once; commits of other server processes
(several `cloudnet serve` on one PostgreSQL) are seen by polling the log while waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import call, context, state
from cloudnet.services import events

router = APIRouter()
POLL_INTERVAL = 0.5
# Members' long polls at once in one server process (any project's member may follow its events; agents and admins
# are not counted); beyond, the answer comes at once, as it is: bounded reads however many wait.
MAX_MEMBER_WAITERS = 256
T = TypeVar("T")


class Notifier:
    """Bridges commits (made on worker threads) to waiting requests on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.revision = 0
        self.closing = False  # the server is stopping: long polls answer now instead of holding it up
        self.waiters = 0  # long polls waiting on this notifier now (instance waits are capped by it)
        self.member_waiters = 0  # of them, members' event polls (MAX_MEMBER_WAITERS)
        self._changed = asyncio.Event()
        # Whether a marker was taken since the last wake-up: if not, nobody can be waiting and a commit needs no
        # trip to the loop (most commits, on a server no agent follows; a marker taken after the check is taken
        # after the commit, so the read that follows it sees the commit).
        self._handed = False

    def committed(self, revision: int) -> None:
        if revision > self.revision:
            self.revision = revision
        if self._handed:
            self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._handed:
            self._handed = False
            self._changed.set()
            self._changed = asyncio.Event()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._close)

    def _close(self) -> None:
        self.closing = True
        self._changed.set()

    def marker(self) -> asyncio.Event:
        """Take before reading the log; waiting on it then cannot miss a commit made after the read."""
        self._handed = True
        return self._changed

    async def wait(self, marker: asyncio.Event, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(marker.wait(), timeout)


@router.get("/v2.0/events")
async def list_events(request: Request) -> Response:
    st = state(request)
    ctx = context(request)
    params = request.query_params
    q = events.follow(ctx, params.get("since"), params.get("limit"), params.get("timeout"), st.config.max_event_wait,
                      params.get("project_id"), params.getlist("type"))  # fmt: skip
    notifier: Notifier = request.app.state.notifier
    member = not ctx.is_admin
    timeout = 0.0 if member and notifier.member_waiters >= MAX_MEMBER_WAITERS else q.timeout
    notifier.member_waiters += member
    try:
        items, latest = await long_poll(request, timeout, lambda: call(events.events_since, st.store, ctx, q),
                                        lambda found: bool(found[0]))  # fmt: skip
    finally:
        notifier.member_waiters -= member
    return neutron.JSON({"events": items, "revision": latest})


async def long_poll(
    request: Request, timeout: float, read: Callable[[], Awaitable[T]], done: Callable[[T], bool],
    notifier: Notifier | None = None,
) -> T:  # fmt: skip
    """What `read` answers once `done` holds for it, or after `timeout` seconds (or when the server stops or the
    caller goes): read again after every commit `notifier` hears of in this process (default: every commit), and
    every POLL_INTERVAL for other processes'."""
    notifier = notifier or request.app.state.notifier
    assert notifier is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    notifier.waiters += 1
    try:
        while True:
            marker = notifier.marker()  # a commit landing while the query runs still wakes the wait below
            found = await read()
            remaining = deadline - loop.time()
            if done(found) or remaining <= 0 or notifier.closing or await request.is_disconnected():
                return found
            await notifier.wait(marker, min(POLL_INTERVAL, remaining))
    finally:
        notifier.waiters -= 1

"""The long-poll notifier never loses a commit that lands between reading the log and starting to wait."""

from __future__ import annotations

import asyncio

from cloudnet.api.events import Notifier


def test_a_commit_after_the_marker_wakes_a_wait_started_later() -> None:
    async def scenario() -> tuple[bool, int]:
        notifier = Notifier(asyncio.get_running_loop())
        marker = notifier.marker()  # taken before the (simulated) read of the log
        notifier.committed(7)  # a commit lands while the read runs
        await asyncio.sleep(0)  # the loop delivers it (committed() is called from worker threads)
        woken = asyncio.create_task(notifier.wait(marker, timeout=3600))
        await asyncio.wait_for(woken, timeout=60)  # returns at once; a lost wake-up would hang here
        return marker.is_set(), notifier.revision

    assert asyncio.run(scenario()) == (True, 7)


def test_a_wait_without_a_commit_ends_at_its_timeout() -> None:
    async def scenario() -> bool:
        notifier = Notifier(asyncio.get_running_loop())
        marker = notifier.marker()
        await notifier.wait(marker, timeout=0.01)
        return marker.is_set()

    assert asyncio.run(scenario()) is False

"""Small numbers the firewall gives its objects (marks of ports, groups, remote sets and pairs; conntrack zones)."""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable


class Numbers:
    """Small numbers for objects (marks, zones): stable while an object lives, the lowest free one for a new one."""

    def __init__(self) -> None:
        self.of: dict[Hashable, int] = {}
        self._free: list[int] = []
        self._next = 1

    def seed(self, key: Hashable, number: int) -> None:
        """An object found with this number (in the kernel, after a restart)."""
        self.of[key] = number
        self._next = max(self._next, number + 1)

    def keep(self, keys: Iterable[Hashable]) -> None:
        """Number exactly `keys`: objects gone free their numbers (for new objects of this same pass)."""
        wanted = set(keys)
        for key in [k for k in self.of if k not in wanted]:
            heapq.heappush(self._free, self.of.pop(key))
        used = set(self.of.values())
        self._free = [n for n in self._free if n not in used]
        heapq.heapify(self._free)
        for key in sorted(wanted - self.of.keys(), key=str):
            if self._free:
                self.of[key] = heapq.heappop(self._free)
            else:
                self.of[key], self._next = self._next, self._next + 1

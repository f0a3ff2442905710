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
        self.held: set[int] = set()  # freed, and given to no object until released

    def seed(self, key: Hashable, number: int) -> None:
        """An object found with this number (in the kernel, after a restart)."""
        self.of[key] = number
        self._next = max(self._next, number + 1)

    def keep(self, keys: Iterable[Hashable], hold: bool = False) -> set[int]:
        """Number exactly `keys`. Objects gone free their numbers (returned): for new objects of this same pass, or
        with `hold`, for none until they are released."""
        wanted = set(keys)
        freed = {self.of.pop(key) for key in [k for k in self.of if k not in wanted]}
        if hold:
            self.held |= freed
        self._free = sorted((set(self._free) | (set() if hold else freed)) - set(self.of.values()) - self.held)
        for key in sorted(wanted - self.of.keys(), key=str):
            if self._free:
                self.of[key] = heapq.heappop(self._free)
            else:
                self.of[key], self._next = self._next, self._next + 1
        return freed

    def release(self, number: int) -> None:
        """A held number may be given again."""
        self.held.discard(number)
        if number not in self.of.values():
            heapq.heappush(self._free, number)

"""Token buckets per key (per instance, for the metadata proxy): a burst allowance refilled at a steady rate."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable


class RateLimiter:
    def __init__(self, burst: float, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 or rate <= 0:
            raise ValueError("a rate limit needs a burst of at least 1 and a positive refill rate")
        self.burst = float(burst)
        self.rate = float(rate)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when they were counted)

    def take(self, key: str) -> float:
        """0.0 if the request may go ahead (one token taken), else the seconds until a token is back."""
        now = self._clock()
        tokens, then = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate

    @staticmethod
    def retry_after(wait: float) -> str:
        """A Retry-After value in whole seconds (never 0: the guest would retry at once)."""
        return str(max(1, math.ceil(wait)))

    def keep_only(self, keys: Iterable[str]) -> None:
        """Forget the buckets of keys that are gone (instances that left the host)."""
        wanted = set(keys)
        for key in [k for k in self._buckets if k not in wanted]:
            del self._buckets[key]

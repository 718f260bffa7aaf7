"""Per-sender rate limits: a token bucket per key, on an injectable clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

MAX_TRACKED = 10_000


class RateLimiter:
    """Allows `per_minute` events per key on average, in bursts of up to `per_minute`."""

    def __init__(self, per_minute: int, clock: Callable[[], datetime]) -> None:
        self._rate = per_minute / 60.0
        self._capacity = float(per_minute)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key → (tokens, when)

    def acquire(self, key: str) -> float | None:
        """Take one token for key; None if allowed, else the seconds until one is free.

        A limit of 0 means no limit."""
        if self._capacity == 0:
            return None
        now = self._clock().timestamp()
        tokens, when = self._buckets.get(key, (self._capacity, now))
        tokens = min(self._capacity, tokens + (now - when) * self._rate)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self._rate
        self._buckets[key] = (tokens - 1, now)
        if len(self._buckets) > MAX_TRACKED:
            self._forget_full(now)
        return None

    def _forget_full(self, now: float) -> None:
        """Drop buckets that have refilled: they behave exactly like new ones."""
        full = [
            key
            for key, (tokens, when) in self._buckets.items()
            if tokens + (now - when) * self._rate >= self._capacity
        ]
        for key in full:
            del self._buckets[key]

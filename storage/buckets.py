"""Token buckets in process memory, for a store that one process serves (SQLite): exact there,
and far cheaper than a write per message."""

from __future__ import annotations

MAX_TRACKED = 10_000


class TokenBuckets:
    """A token bucket per key: capacity tokens, refilled at per_s, times in epoch seconds."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float, float]] = {}  # key → (tokens, at, full_at)

    def take(self, key: str, *, capacity: float, per_s: float, now: float) -> float | None:
        """Take one token: None if one was there, else the seconds until one is."""
        tokens, at, _ = self._buckets.get(key, (capacity, now, now))
        tokens = min(capacity, tokens + (now - at) * per_s)
        granted = tokens >= 1
        if granted:
            tokens -= 1
        self._buckets[key] = (tokens, now, now + (capacity - tokens) / per_s)
        if len(self._buckets) > MAX_TRACKED:
            self.forget_full(now)
        return None if granted else (1 - tokens) / per_s

    def forget_full(self, now: float) -> int:
        """Drop buckets that are full again (a new bucket behaves the same); returns how many."""
        full = [key for key, (_, _, full_at) in self._buckets.items() if full_at <= now]
        for key in full:
            del self._buckets[key]
        return len(full)

"""Per-sender rate limits: a token bucket per key, kept in the store so that a limit holds
across every worker sharing it, on an injectable clock."""

from __future__ import annotations

from bot.clock import Clock
from storage.delivery import DeliveryStore


class RateLimiter:
    """Allows `per_minute` events per key on average, in bursts of up to `per_minute`, counted
    once for all workers of one store. A limit of 0 means no limit (and costs nothing)."""

    def __init__(self, store: DeliveryStore, name: str, per_minute: int, clock: Clock) -> None:
        self._store = store
        self._name = name
        self._per_minute = per_minute
        self._clock = clock

    async def acquire(self, key: str) -> float | None:
        """Take one event for key: None if allowed, else the seconds until one is."""
        if self._per_minute == 0:
            return None
        return await self._store.take_token(
            f"{self._name}:{key}",
            capacity=self._per_minute,
            per_s=self._per_minute / 60,
            now=self._clock(),
        )

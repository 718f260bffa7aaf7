"""A clock that moves only when a test moves it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """Callable clock for PinService and ChatService; `advance` moves time forward."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        # Each reading moves a microsecond on, so creation order is strict as in real time.
        self.now += timedelta(microseconds=1)
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)

"""Time for the core: an injectable clock, so tests never wait for time to pass."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The real clock: now, in UTC."""
    return datetime.now(UTC)

"""What every platform frontend shares: the interface the runtime drives, retries with backoff
while a platform cannot be reached, the formatted-then-plain fallback of a send, and one log
line per refused webhook source a minute."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from bot.core.replies import Messenger, Sent

__all__ = ["Frontend", "Messenger", "RefusalLog", "Sent", "formatted_or_plain", "with_backoff"]

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRY_FIRST_S = 1.0  # waits between attempts double up to the maximum
RETRY_MAX_S = 60.0
REFUSAL_LOG_INTERVAL_S = 60.0
MAX_TRACKED_ADDRESSES = 10_000
Sleep = Callable[[float], Awaitable[None]]


class Frontend(Protocol):
    """A platform adapter as the runtime drives it."""

    async def start(self) -> None:
        """Connect and start receiving; ConfigError for what waiting cannot fix (a rejected
        token, a port in use, a second poller); what waiting can fix is retried."""

    async def stop(self) -> None:
        """Stop receiving, finish the messages in progress, disconnect."""


async def with_backoff(
    attempt: Callable[[], Awaitable[T]],
    *,
    transient: tuple[type[BaseException], ...],
    what: str,
    sleep: Sleep,
    detail: Callable[[BaseException], str] = str,
) -> T:
    """attempt(), tried again after 1, 2, 4 … (at most 60) seconds for as long as it fails with
    a transient error, each failure logged as "cannot reach {what} (…); retrying in N s"."""
    failures = 0
    while True:
        try:
            return await attempt()
        except transient as error:
            failures += 1
            wait = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (failures - 1))
            log.warning("cannot reach %s (%s); retrying in %.0f s", what, detail(error), wait)
            await sleep(wait)


async def formatted_or_plain(
    formatted: Callable[[], Awaitable[T]],
    plain: Callable[[], Awaitable[T]],
    *,
    refused_formatting: Callable[[Exception], bool],
    where: str,
) -> T:
    """Send the formatted form; if the platform refuses its formatting (as
    refused_formatting tells), send the plain form instead. Other errors propagate."""
    try:
        return await formatted()
    except Exception as error:
        if not refused_formatting(error):
            raise
        log.warning(
            "the platform refused the formatting in %s (%s); sending plain text", where, error
        )
        return await plain()


class RefusalLog:
    """One warning line per refused webhook request, at most one per source address a minute
    (with how many more were refused since), so nobody can flood the log."""

    def __init__(self, platform: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._platform = platform
        self._monotonic = monotonic
        self._seen: dict[str, tuple[float, int]] = {}  # address → (last logged, refused since)

    def note(self, address: str, detail: str) -> None:
        """Record a refused request; log it unless this address was logged in the last minute."""
        now = self._monotonic()
        last, quiet = self._seen.get(address, (-REFUSAL_LOG_INTERVAL_S, 0))
        if now - last < REFUSAL_LOG_INTERVAL_S:
            self._seen[address] = (last, quiet + 1)
            return
        more = f" ({quiet} more refused from there since the last line)" if quiet else ""
        log.warning(
            "refused a %s webhook request from %s: %s%s", self._platform, address, detail, more
        )
        self._seen[address] = (now, 0)
        if len(self._seen) > MAX_TRACKED_ADDRESSES:
            self._seen.clear()

"""What every platform frontend shares: the interface the runtime drives, the one way a message's
answer waits for the inbox's commit (`after_commit`), retries with backoff while a platform
cannot be reached, the formatted-then-plain fallback of a send, and one log line per refused
webhook source a minute."""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from bot.core.entry import Messenger, Reply, Sent
from storage.errors import Unavailable

__all__ = [
    "Frontend",
    "Lost",
    "Messenger",
    "Reachability",
    "RefusalLog",
    "Sent",
    "after_commit",
    "formatted_or_plain",
    "from_inbox",
    "in_inbox",
    "unless_lost",
    "with_backoff",
]

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRY_FIRST_S = 1.0  # waits between attempts double up to the maximum
RETRY_MAX_S = 60.0
REFUSAL_LOG_INTERVAL_S = 60.0
MAX_TRACKED_ADDRESSES = 10_000
Sleep = Callable[[float], Awaitable[None]]
Answer = Callable[[Reply], Awaitable[None]]


class Frontend(Protocol):
    """A platform adapter as the runtime drives it."""

    async def start(self) -> None:
        """Connect and start receiving; ConfigError for what waiting cannot fix (a rejected
        token, a port in use, a second poller); what waiting can fix is retried."""

    async def stop(self) -> None:
        """Stop receiving, finish the messages in progress, disconnect."""


class _Outbox:
    """What one update from the inbox answers, held back for the inbox to send; lost when its
    processing could not be recorded."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.lost = False


# The update being processed from the inbox, if any. A context variable, because a platform
# library may stand between the inbox and the handler that answers (python-telegram-bot does).
_OUTBOX: contextvars.ContextVar[_Outbox | None] = contextvars.ContextVar("outbox", default=None)


async def from_inbox(work: Awaitable[object]) -> list[Reply]:
    """Process one update from the inbox: every reply a surface built during work sends is
    held back and returned, for the inbox to send (see bot.core.entry.Inbox). Unavailable, and
    nothing returned, when the work found the database unreachable: the update's next
    processing answers it."""
    outbox = _Outbox()
    token = _OUTBOX.set(outbox)
    try:
        await work
    finally:
        _OUTBOX.reset(token)
    if outbox.lost:
        raise Unavailable("the database could not record the update's processing")
    return outbox.replies


def in_inbox() -> bool:
    """Whether the update being processed comes from the inbox (`Incoming.redelivered`)."""
    return _OUTBOX.get() is not None


class Lost:
    """An update from the inbox whose processing could not be recorded: nothing is sent for it,
    and its next processing answers it."""


async def unless_lost(work: Awaitable[T]) -> T | Lost:
    """work's result; for an update from the inbox whose work finds the database unreachable, a
    Lost (and from_inbox raises Unavailable: the update stays waiting). For a handler whose
    exceptions a platform library would swallow; elsewhere Unavailable goes up."""
    try:
        return await work
    except Unavailable:
        outbox = _OUTBOX.get()
        if outbox is None:
            raise
        outbox.lost = True
        return Lost()


def after_commit(answer: Answer) -> Answer:
    """answer, or, for a message from the inbox, a hold of the reply for the inbox to send
    once the message's processing is recorded: what a `ReplySurface` of the message sends
    through. Call it while the message is processed (it reads which of the two from there)."""
    outbox = _OUTBOX.get()
    if outbox is None:
        return answer

    async def held(reply: Reply) -> None:
        outbox.replies.append(reply)

    return held


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


class Reachability:
    """Whether a platform's API answers the bot's own requests: each request that got an
    answer (any HTTP status below 500) or failed to (network error, timeout, a 5xx) is noted,
    and the platform counts as unreachable once its requests have failed, with none answered
    since, for longer than a window. Nothing asked yet is nothing failed."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self.failing_since: float | None = None  # the first failure after the last answer
        # Told, with how long the requests had failed, when one is answered again.
        self.recovered: Callable[[float], None] | None = None

    def answered(self) -> None:
        """A request got an answer."""
        since, self.failing_since = self.failing_since, None
        if since is not None and self.recovered is not None:
            self.recovered(self._monotonic() - since)

    def failed(self) -> None:
        """A request got no answer."""
        if self.failing_since is None:
            self.failing_since = self._monotonic()

    def problem(self, what: str, window_s: float) -> str | None:
        """Why what is not reachable now (its requests failed for window_s and more), or None."""
        since = self.failing_since
        if since is None or self._monotonic() - since <= window_s:
            return None
        return f"{what} has answered none of the bot's requests for {window_s:g} s"

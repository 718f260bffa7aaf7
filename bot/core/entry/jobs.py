"""Periodic jobs (housekeeping, and whatever else must happen now and then rather than on a
user's message): each runs every so often, on one worker only, whichever holds the jobs' role."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.clock import Clock
from storage.delivery import DeliveryStore

log = logging.getLogger(__name__)
ROLE = "periodic jobs"


@dataclass
class Job:
    """Something to run every `every`; run gets the time it runs at."""

    name: str
    every: timedelta
    run: Callable[[datetime], Awaitable[None]]
    last: datetime | None = None


class Jobs:
    """The periodic jobs of one process; `run_due` runs those that are due, if this worker
    holds the jobs' role (exactly one live worker of a store does)."""

    def __init__(self, store: DeliveryStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._jobs: list[Job] = []

    def add(self, name: str, every: timedelta, run: Callable[[datetime], Awaitable[None]]) -> None:
        """Run run every `every`, the first time at the first check."""
        self._jobs.append(Job(name, every, run))

    async def run_due(self) -> list[str]:
        """Run every job that is due here; returns the names of those that ran. A job that
        fails is logged and tried again at its next turn."""
        if not self._jobs or not await self._store.hold_role(ROLE):
            return []
        ran = []
        for job in self._jobs:
            now = self._clock()
            if job.last is not None and now - job.last < job.every:
                continue
            job.last = now
            try:
                await job.run(now)
            except Exception as error:  # the database may be back at the next turn
                log.warning("periodic job %r failed: %s", job.name, error)
            ran.append(job.name)
        return ran

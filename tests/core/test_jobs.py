"""Periodic jobs: due ones run at their pace, a failure is retried at the next turn, and only
the worker holding the jobs' role runs them."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from bot.core.entry.jobs import ROLE, Jobs
from storage import Store
from tests.conftest import BotFactory, ask, dm
from tests.fakes.clock import FakeClock


class Roles:
    """A DeliveryStore's role holding, as far as Jobs uses it."""

    def __init__(self, held: bool) -> None:
        self.held = held
        self.asked: list[str] = []

    async def hold_role(self, role: str) -> bool:
        self.asked.append(role)
        return self.held


async def test_due_jobs_run_at_their_pace_and_a_failure_is_tried_again(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[tuple[str, datetime]] = []
    failures = [RuntimeError("database away")]

    async def hourly(now: datetime) -> None:
        ran.append(("hourly", now))

    async def daily(now: datetime) -> None:
        if failures:
            raise failures.pop()
        ran.append(("daily", now))

    roles = Roles(held=True)
    jobs = Jobs(roles, clock)  # type: ignore[arg-type]
    jobs.add("hourly", timedelta(hours=1), hourly)
    jobs.add("daily", timedelta(days=1), daily)
    assert await jobs.run_due() == ["hourly", "daily"]  # the first check runs everything
    assert "periodic job 'daily' failed: database away" in caplog.text
    clock.advance(minutes=59)
    assert await jobs.run_due() == []
    clock.advance(minutes=1)
    assert await jobs.run_due() == ["hourly"]
    clock.advance(days=1)
    assert await jobs.run_due() == ["hourly", "daily"]
    assert [name for name, _ in ran] == ["hourly", "hourly", "hourly", "daily"]
    assert roles.asked == [ROLE] * 4


async def test_a_worker_without_the_role_runs_nothing(clock: FakeClock) -> None:
    ran: list[datetime] = []

    async def job(now: datetime) -> None:
        ran.append(now)

    jobs = Jobs(Roles(held=False), clock)  # type: ignore[arg-type]
    jobs.add("job", timedelta(hours=1), job)
    assert await jobs.run_due() == [] and ran == []


async def test_the_bots_housekeeping_forgets_old_deliveries_on_the_role_holder(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = make_bot()
    await store.register_worker(now=clock())
    await store.record_update("p", "e1", chat="c", position=0, payload="", now=clock())
    pending = await store.next_update("c")
    assert pending is not None
    await store.finish_update(pending.seq, now=clock())
    assert "delivery housekeeping" in await bot.jobs.run_due()
    again = await store.record_update("p", "e1", chat="c", position=0, payload="", now=clock())
    assert not again.recorded
    clock.advance(days=8)
    assert "delivery housekeeping" in await bot.jobs.run_due()
    # processed over a week ago and forgotten: the id may come again as new
    new = await store.record_update("p", "e1", chat="c", position=0, payload="", now=clock())
    assert new.recorded


async def test_the_bots_search_index_job_indexes_changed_blocks(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = make_bot()
    await store.register_worker(now=clock())
    assert "search index" in await bot.jobs.run_due()
    reply = await ask(bot, dm(), "/pin add tone Answer in one sentence.")
    assert reply is not None and "Saved" in reply.text
    assert await store.catch_up_search() == 1  # noted, not yet indexed
    await ask(bot, dm(), "/pin edit tone Answer in two sentences.")
    clock.advance(minutes=1)
    assert "search index" in await bot.jobs.run_due()
    assert await store.catch_up_search() == 0  # the job indexed it

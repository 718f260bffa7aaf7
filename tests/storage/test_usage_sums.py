"""The kept usage sums give the answer of summing every usage row, on both backends: the top
lists of the 1-, 7- and 30-day windows as the days go by (forward by one day, by several, past
a whole window, and back), with usage recorded between views, and everyone's usage per day;
after a transfer load too."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from storage import Store
from storage.models import UsageRow, UsageTotals
from storage.usage_sums import WINDOWS
from tests.templates import migrated_database, migrated_sqlite

START = date(2026, 3, 1)
PLATFORMS = ("telegram", "feishu")


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    url = None
    if request.param == "postgres":
        url = await migrated_database(request.getfixturevalue("pg_cluster"))
    else:
        await migrated_sqlite(tmp_path / "u.sqlite3")
    opened = await Store.open(tmp_path / "u.sqlite3", url=url)
    yield opened
    await opened.close()


async def record(store: Store, rng: random.Random, days: range, calls: int) -> None:
    """calls model calls spread over the days (offsets from START), senders and groups; equal
    token counts are common, so ties are ordered by key."""
    for _ in range(calls):
        day = (START + timedelta(days=rng.choice(days))).isoformat()
        group = rng.choice(["", "", "g:group:1", "g:group:2", "g:group:3", "g:group:4"])
        sender = (
            rng.choice(["", "1", "2", "3", "4", "5", "6", "7"]) if group else str(rng.randint(1, 7))
        )
        usage = UsageTotals(1, rng.choice((100, 200, 300)), 50, 10, rng.randint(0, 1))
        if rng.random() < 0.5:
            usage = UsageTotals(1, usage.prompt_tokens, 50, 10, 0, rng.choice((0.1, 0.2, 0.7)), 1)
        await store.add_usage(
            platform=rng.choice(PLATFORMS),
            sender=sender,
            day=day,
            group_key=group,
            usage=usage,
            model=rng.choice(("a", "b")),
        )


def same(found: list[UsageRow], summed: list[UsageRow]) -> None:
    assert [(r.platform, r.key) for r in found] == [(r.platform, r.key) for r in summed]
    for kept, plain in zip(found, summed, strict=True):
        assert kept.totals.cost == pytest.approx(plain.totals.cost, abs=1e-9)
        assert {**vars_of(kept.totals), "cost": 0} == {**vars_of(plain.totals), "cost": 0}


def vars_of(totals: UsageTotals) -> dict[str, object]:
    return {name: getattr(totals, name) for name in totals.__dataclass_fields__}


async def same_answers(store: Store, today: date) -> None:
    for window in WINDOWS:
        first = (today - timedelta(days=window - 1)).isoformat()
        for limit in (3, 50):
            kept = await store.usage_report(first, limit, window=window)
            summed = await store.usage_report(first, limit)
            same(kept[0], summed[0])
            same(kept[1], summed[1])
    first = (today - timedelta(days=40)).isoformat()
    per_day = await store.usage_days(first)
    rows = await store._db.fetch(
        "SELECT day, SUM(calls), SUM(prompt_tokens), SUM(cached_tokens), "
        "SUM(completion_tokens), SUM(estimated_calls), SUM(cost), SUM(priced_calls) "
        "FROM usage WHERE day >= ? GROUP BY day ORDER BY day",
        first,
    )
    assert [d for d, _ in per_day] == [row[0] for row in rows]
    for (_, totals), row in zip(per_day, rows, strict=True):
        assert (totals.calls, totals.prompt_tokens, totals.priced_calls) == (row[1], row[2], row[7])
        assert totals.cost == pytest.approx(float(row[6]), abs=1e-9)


async def test_kept_windows_answer_as_summing_every_row_as_days_go_by(store: Store) -> None:
    rng = random.Random(31)
    await record(store, rng, range(0, 60), 300)
    today = START + timedelta(days=45)
    await same_answers(store, today)  # the windows are summed the first time
    for step in (1, 1, 3, 6, 0, 29, 31, -1, -5, -40, 2):
        today += timedelta(days=step)
        offset = (today - START).days
        await record(store, rng, range(offset - 35, offset + 2), 40)  # old days, today, after
        await same_answers(store, today)


async def test_a_transfer_load_and_a_usage_free_window(store: Store, tmp_path: Path) -> None:
    rng = random.Random(7)
    await record(store, rng, range(0, 10), 80)
    today = START + timedelta(days=9)
    await same_answers(store, today)
    dump = await store.dump()
    async with await Store.open(tmp_path / "loaded.sqlite3") as other:
        await other.load(dump)
        await same_answers(other, today)
    empty = (today + timedelta(days=400)).isoformat()
    assert await store.usage_report(empty, 50, window=1) == ([], [])
    await store.add_usage(
        platform="p", sender="9", day=empty, group_key="", usage=UsageTotals(1, 5)
    )
    users, groups = await store.usage_report(empty, 50, window=1)
    assert [(u.key, u.totals.prompt_tokens) for u in users] == [("9", 5)] and groups == []


async def test_forgotten_days_and_a_removed_groups_usage_keep_the_sums_right(store: Store) -> None:
    """Retention forgets the usage of old days (a kept window reaching back past them is summed
    again when next asked for), and a removed group's usage is folded into no group's: the kept
    sums still answer as summing every row does, and every sender's totals stay what they were."""
    rng = random.Random(11)
    await record(store, rng, range(0, 80), 400)
    today = START + timedelta(days=45)
    await same_answers(store, today)  # windows kept from days 45, 39 and 16
    first_kept = (START + timedelta(days=20)).isoformat()
    gone = await store.forget_usage_before(first_kept)
    assert gone > 0
    assert not await store._db.fetch("SELECT 1 FROM usage WHERE day < ?", first_kept)
    assert min(d for d, _ in await store.usage_days(START.isoformat())) >= first_kept
    for step in (5, 1, 0, 2):  # the 30-day window moves on from a day that is forgotten
        today += timedelta(days=step)
        offset = (today - START).days
        await record(store, rng, range(offset - 3, offset + 1), 20)
        await same_answers(store, today)
    senders = await store.usage_report(first_kept)
    now = datetime(2026, 6, 1, tzinfo=UTC)
    await store.group_removed("g:group:2", chat="g:2", now=now)
    folded = await store.forget_group(
        "g:group:2",
        members_prefix="g:group:2::u:",
        sessions_prefix="g:group:2:",
        chat="g:2",
        removed_before=now + timedelta(days=1),
    )
    assert folded is not None and folded["usage"] > 0
    users, groups = await store.usage_report(first_kept)
    same(users, senders[0])  # every sender's totals as they were
    assert [g.key for g in groups] == [g.key for g in senders[1] if g.key != "g:group:2"]
    await same_answers(store, today)

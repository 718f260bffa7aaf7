"""Retention on both backends (SQLite, and a real PostgreSQL server), on an injected clock and
through the Pinbot's own periodic jobs, as production runs it: each kind of data goes after its
days and stays before them; the older pins keys still decide where retention gives no days; and
a group the bot was removed from keeps everything while the bot is back within the grace period,
and loses it, its blocks through the one road, once the grace period is over (the real
python-telegram-bot Application against the fake Bot API server)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot import metrics
from bot.adapters.telegram import TelegramFrontend
from bot.core.entry.pinbot import Pinbot
from bot.llm.offline import OfflineChatModel
from storage import Store
from storage.decisions import PROPOSALS
from storage.models import NewProposal, UsageTotals
from tests.conftest import BotFactory, ask, dm, group, make_config
from tests.fakes.clock import FakeClock
from tests.fakes.telegram_server import (
    TOKEN,
    FakeTelegram,
    group_chat,
    message,
    private_chat,
    user,
)
from tests.integration.test_telegram import Harness, bot_member
from tests.templates import migrated_database, migrated_sqlite

# What each kind of data is, as rows of the tables a transfer copies.
TABLES = {
    "turns": "history",
    "versions": "block_versions",
    "usage": "usage",
    "audit": "shared_audit",
    "updates": "inbox",
}
RETENTION = {
    "inbox_days": 5,
    "conversation_days": 10,
    "versions_days": 20,
    "audit_days": 30,
    "usage_days": 40,
}
ADMIN = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}
SLOW_WATCH = {"takeover_check_s": 3600}  # only the test runs the jobs


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Every test here runs on both backends: SQLite, and a real PostgreSQL server."""
    url = None
    if request.param == "postgres":
        url = await migrated_database(request.getfixturevalue("pg_cluster"))
    else:
        await migrated_sqlite(tmp_path / "pins.sqlite3")
    async with await Store.open(tmp_path / "pins.sqlite3", url=url) as opened:
        yield opened


async def held(store: Store) -> dict[str, int]:
    """How many rows of each kind the store holds."""
    dump = await store.dump()
    return {kind: len(dump[table]) for kind, table in TABLES.items()}


async def retention_at(bot: Pinbot, clock: FakeClock, start: Any, days: float) -> None:
    """Run the Pinbot's due jobs at start + days; the retention job must be among them."""
    clock.now = start + timedelta(days=days)
    assert "retention" in await bot.jobs.run_due()


async def test_each_kind_goes_after_its_days_and_stays_before(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = make_bot(pins=ADMIN, retention=RETENTION)
    await store.register_worker(now=clock())  # as a frontend's inbox does: jobs run on workers
    start = clock.now
    await ask(bot, dm("42"), "hello")  # two turns, a usage row
    await ask(bot, group("7"), "/pin shared add rules Be kind")  # a version, an audit entry
    await ask(bot, group("7"), "/pin shared edit rules Be kinder")
    await store.record_update("console", "1", chat="c", position=1, payload="{}", now=clock())
    update = await store.next_update("c")
    assert update is not None
    await store.finish_update(update.seq, now=clock())  # a processed update
    everything = {"turns": 2, "versions": 2, "usage": 1, "audit": 2, "updates": 1}
    assert await held(store) == everything
    expected = dict(everything)
    for kind, days in (
        ("updates", 5),
        ("turns", 10),
        ("versions", 20),
        ("audit", 30),
        ("usage", 41),  # by UTC day: the day 40 days back is still kept
    ):
        await retention_at(bot, clock, start, days - 0.5)
        assert await held(store) == expected, f"{kind} before {days} days"
        await retention_at(bot, clock, start, days + 0.5)
        expected[kind] = 0
        assert await held(store) == expected, f"{kind} after {days} days"
    # Blocks themselves have no retention: the group's rule is there, and answers.
    (rules,) = await store.blocks(["console:group:-100123"])
    assert rules.content == "Be kinder"


async def test_the_older_pins_keys_decide_where_retention_gives_no_days(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    pins = {**ADMIN, "history_days": 3, "audit_retention_days": 6}
    bot = make_bot(pins=pins, retention={"usage_days": 31})
    await store.register_worker(now=clock())
    start = clock.now
    await ask(bot, group("7"), "/pin shared add rules Be kind")
    for days, versions, audit in ((2.5, 1, 1), (3.5, 0, 1), (5.5, 0, 1), (6.5, 0, 0)):
        await retention_at(bot, clock, start, days)
        found = await held(store)
        assert (found["versions"], found["audit"]) == (versions, audit), days


async def test_what_counts_as_the_bot_being_back(store: Store, clock: FakeClock) -> None:
    """Only an update of the group's chat recorded after the removal: not one that waited in
    the inbox when the removal came, nor one of another chat; a removal noted again counts
    from then; and a group the bot is back in is not forgotten, whatever the caller says."""
    group_key, chat = "telegram:group:-100", "telegram:-100"
    waiting = clock()
    await store.record_update("telegram", "1", chat=chat, position=1, payload="{}", now=waiting)
    removed = clock()
    await store.group_removed(group_key, chat=chat, now=removed)
    await store.record_update(
        "telegram", "2", chat="telegram:-1001", position=2, payload="{}", now=clock()
    )
    later = clock.now + timedelta(days=1)
    assert await store.groups_back() == []
    assert await store.removed_groups(later) == [(group_key, removed)]
    again = clock()
    await store.group_removed(group_key, chat=chat, now=again)  # kicked after leaving
    assert await store.removed_groups(later) == [(group_key, again)]
    assert await store.removed_groups(again) == []  # the grace counts from the later removal
    await store.record_update("telegram", "3", chat=chat, position=3, payload="{}", now=clock())
    forgotten = await store.forget_group(
        group_key,
        members_prefix=f"{group_key}::u:",
        sessions_prefix=f"{group_key}:",
        chat=chat,
        removed_before=later,
    )
    assert forgotten is None  # back: nothing went
    assert len((await store.dump())["inbox"]) == 3
    assert await store.groups_back() == [group_key]
    assert await store.removed_groups(later) == []


# --- a group the bot was removed from, on Telegram ---------------------------------------------

GROUP = -1001234
GROUP_KEY = f"telegram:group:{GROUP}"
OTHER = -1005678
OTHER_KEY = f"telegram:group:{OTHER}"
GRACE = 30
# Every other kind kept for a year here: what goes, goes for the removal.
LONG = {"conversation_days": 365, "versions_days": 365, "audit_days": 365, "inbox_days": 365}


@pytest.fixture
async def telegram_bot(
    fake_telegram: FakeTelegram, store: Store, clock: FakeClock
) -> AsyncIterator[tuple[Harness, Pinbot]]:
    """A Pinbot polling the fake Bot API through python-telegram-bot, whose jobs only the test
    runs."""
    config = make_config(
        telegram={"base_url": fake_telegram.base_url, "poll_timeout_s": 1},
        pins={"enable_in_group": True, "group_shared_admin_ids": [7]},
        retention={"removed_group_days": GRACE, **LONG},
        storage=SLOW_WATCH,
    )
    model = OfflineChatModel()
    pinbot = Pinbot(config, store, model, clock=clock)

    async def no_sleep(seconds: float) -> None:
        return None

    frontend = TelegramFrontend(pinbot, config.telegram, TOKEN, sleep=no_sleep)
    await frontend.start()
    yield Harness(fake_telegram, frontend, store), pinbot
    await frontend.stop()
    await model.close()


async def fill_group(bot: Harness, store: Store, chat_id: int, now: Any) -> None:
    """A group with everything a group holds: shared and personal blocks (with versions and
    an audit trail), a conversation (history, usage), and a proposal."""
    chat = group_chat(chat_id)
    await bot.reply_to(message(chat, "/pin shared add rules Be kind", user(7)))
    await bot.reply_to(message(chat, "/pin shared edit rules Be kinder", user(7)))
    await bot.reply_to(message(chat, "/pin add mine Call me Bo", user(42)))
    await bot.reply_to(message(chat, "@pin_bot hello all", user(42)))
    key = f"telegram:group:{chat_id}"
    proposal = NewProposal(key, "lunch", "Lunch at noon.", None, None, "asked", "model")
    await store.add_decision(PROPOSALS, proposal, now=now, expires_at=now, max_pending=5)


async def rows_of(store: Store, group_key: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table a transfer copies that belongs to group_key (its scopes, its
    sessions, its chat in the inbox, its usage), table by table."""
    chat = "telegram:" + group_key.rsplit(":", 1)[1]
    found: dict[str, list[tuple[Any, ...]]] = {}
    for table, rows in (await store.dump()).items():
        mine = [
            row
            for row in rows
            if any(
                isinstance(value, str)
                and (value in (chat, group_key) or value.startswith(f"{group_key}:"))
                for value in row
            )
        ]
        if mine:
            found[table] = mine
    return found


def lasting(rows: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """A group's rows but its updates in the inbox and the note of its removal."""
    return {table: found for table, found in rows.items() if table not in DELIVERY}


DELIVERY = ("inbox", "removed_groups")


async def test_a_group_the_bot_is_back_in_within_the_grace_period_keeps_everything(
    telegram_bot: tuple[Harness, Pinbot], store: Store, clock: FakeClock
) -> None:
    bot, pinbot = telegram_bot
    await fill_group(bot, store, GROUP, clock())
    before = lasting(await rows_of(store, GROUP_KEY))
    assert {"blocks", "block_versions", "shared_audit", "history", "usage", "proposals"} <= set(
        before
    )
    chat = group_chat(GROUP)
    removed_at = clock.now
    bot.server.push(bot_member(chat, user(7), "member", "kicked"))
    await bot.settle()
    assert [group for group, _ in await store.removed_groups(clock.now)] == [GROUP_KEY]
    clock.advance(days=GRACE - 1)
    bot.server.push(bot_member(chat, user(7), "left", "member"))  # added back: no message yet
    await bot.settle()
    await retention_at(pinbot, clock, removed_at, GRACE + 5)
    kept = await rows_of(store, GROUP_KEY)
    assert lasting(kept) == before and "removed_groups" not in kept
    assert await store.removed_groups(clock.now) == []  # back: nothing waits to go
    (reply,) = await bot.reply_to(message(chat, "@pin_bot again", user(42)))
    assert "rules (context, shared); mine (context, personal)" in reply


async def test_past_the_grace_period_a_removed_groups_data_goes_its_blocks_by_the_road(
    telegram_bot: tuple[Harness, Pinbot],
    store: Store,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bot, pinbot = telegram_bot
    day = clock.now.date().isoformat()
    await fill_group(bot, store, GROUP, clock())
    await fill_group(bot, store, OTHER, clock())
    await bot.reply_to(message(private_chat(42), "/pin add tone Be brief.", user(42)))
    await bot.reply_to(message(private_chat(42), "hi there", user(42)))
    used = await store.sender_usage("telegram", "42", day, day)
    other = await rows_of(store, OTHER_KEY)
    direct = await rows_of(store, "telegram:direct:42")
    ours = await rows_of(store, GROUP_KEY)
    assert len(ours["blocks"]) == 2 and ours["history"] and ours["usage"]
    removed_at = clock.now
    bot.server.push(bot_member(group_chat(GROUP), user(7), "member", "kicked"))
    await bot.settle()
    await retention_at(pinbot, clock, removed_at, GRACE - 0.5)  # within the grace period
    assert lasting(await rows_of(store, GROUP_KEY)) == lasting(ours)
    meters = metrics.enable(version="test", model="m", currency="USD")
    try:
        with caplog.at_level(logging.INFO, logger="bot.core.entry.retention"):
            await retention_at(pinbot, clock, removed_at, GRACE + 0.5)
        by_road = meters.registry.get_sample_value(
            "pinbot_blocks_written_total", {"channel": "cleanup"}
        )
    finally:
        metrics.disable()
    assert by_road == 2  # the shared block and the member's, each a reviewed block change
    assert await rows_of(store, GROUP_KEY) == {}  # nothing of the group is left in any table
    (said,) = [
        m for m in caplog.messages if m.startswith(f"retention: removed the data of {GROUP_KEY}")
    ]
    # The road recorded the removal like any change before everything went: the three
    # changes' versions and the removal's two, the two audit entries and the removal's.
    assert said.endswith(
        ": 2 blocks, 5 versions, 3 audit entries, 1 proposals, 2 history entries, 5 updates, "
        "1 usage rows"
    )
    # Everyone else's data as it was; the group's usage still counts for who used it.
    assert await rows_of(store, OTHER_KEY) == other
    assert await rows_of(store, "telegram:direct:42") == direct
    assert await store.sender_usage("telegram", "42", day, day) == used
    assert await store.group_usage(GROUP_KEY, day, day) == UsageTotals()
    # The bot added back later finds a group without pins.
    bot.server.push(bot_member(group_chat(GROUP), user(7), "left", "member"))
    (reply,) = await bot.reply_to(message(group_chat(GROUP), "/pin shared list", user(7)))
    assert reply.startswith("This group has no shared blocks.")

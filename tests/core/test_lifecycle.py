"""The lifecycle (SPEC section 4) through Pinbot.handle with a clock the tests move, and the
expiry rule on its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.config import PinsConfig
from bot.core.blocks.review import BlockPolicy, Rule, refusal
from storage import Store
from storage.models import Author, Block, Channel, Level, State
from tests.conftest import BotFactory, ask, dm, group, text_of
from tests.fakes.clock import FakeClock

DM_SCOPE = "console:direct:42"
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def idle(days: float, idle_calls: int = 0, state: State = State.IDLE) -> Block:
    return Block(
        id=1,
        scope="s",
        label="b",
        content="c",
        level=Level.CONTEXT,
        state=state,
        priority=0,
        created_at=NOW,
        updated_at=NOW,
        idle_since=NOW - timedelta(days=days),
        idle_calls=idle_calls,
    )


@pytest.mark.parametrize(
    ("block", "calls_before", "due"),
    [
        (idle(6.99), 100, False),  # enough calls, too few days
        (idle(7), 9, False),  # enough days, too few further calls
        (idle(7), 10, True),  # both
        (idle(7, idle_calls=5), 14, False),  # calls count from the idle mark
        (idle(7, idle_calls=5), 15, True),
        (idle(29.9), 0, False),
        (idle(30), 0, True),  # hard retention, whatever the calls
        (idle(400, state=State.PINNED), 1000, False),
        (idle(400, state=State.ACTIVE), 1000, False),
    ],
)
def test_expiry_rule(block: Block, calls_before: int, due: bool) -> None:
    assert BlockPolicy(PinsConfig()).expired(block, NOW, calls_before) is due


async def idle_block(make_bot: BotFactory, **pins: Any) -> Any:
    bot = make_bot(pins=pins)
    await ask(bot, dm(), "/pin add keep active one")
    await ask(bot, dm(), "/pin add gone idle one")
    await ask(bot, dm(), "/pin add safe pinned one --pinned")
    await ask(bot, dm(), "/pin idle gone")
    return bot


async def labels(store: Store) -> list[str]:
    return sorted(b.label for b in await store.blocks([DM_SCOPE]))


async def test_idle_block_goes_after_days_and_calls(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = await idle_block(make_bot)
    for _ in range(10):
        reply = text_of(await ask(bot, dm(), "hi"))
        assert reply and "gone" not in reply
    clock.advance(days=6, hours=23)
    await ask(bot, dm(), "hi")
    assert await labels(store) == ["gone", "keep", "safe"]
    clock.advance(hours=1)
    await ask(bot, dm(), "hi")  # 11 calls after idling: 7 days and 10 further calls have passed
    assert await labels(store) == ["keep", "safe"]


async def test_idle_block_stays_with_days_but_too_few_calls(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = await idle_block(make_bot)
    clock.advance(days=8)
    for _ in range(10):
        await ask(bot, dm(), "hi")
    assert await labels(store) == ["gone", "keep", "safe"]
    await ask(bot, dm(), "hi")
    assert await labels(store) == ["keep", "safe"]


async def test_idle_block_goes_after_hard_retention(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = await idle_block(make_bot)
    clock.advance(days=29)
    await ask(bot, dm(), "hi")
    assert await labels(store) == ["gone", "keep", "safe"]
    clock.advance(days=1)
    await ask(bot, dm(), "hi")
    assert await labels(store) == ["keep", "safe"]
    clock.advance(days=400)
    for _ in range(20):
        await ask(bot, dm(), "hi")
    assert await labels(store) == ["keep", "safe"]  # active and pinned never go by themselves


async def test_cleanup_happens_only_at_a_model_request(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = await idle_block(make_bot)
    clock.advance(days=31)
    await ask(bot, dm(), "/pin list")
    assert await labels(store) == ["gone", "keep", "safe"]
    await ask(bot, dm(), "hi")
    assert await labels(store) == ["keep", "safe"]


async def test_idle_cleanup_is_a_change_the_review_meets(
    make_bot: BotFactory, store: Store, clock: FakeClock, monkeypatch: Any
) -> None:
    bot = await idle_block(make_bot)
    clock.advance(days=31)
    review, asked = BlockPolicy.review, []

    async def held(self: BlockPolicy, change: Any, where: Any, **kwargs: Any) -> Any:
        asked.append((change.by, kwargs["speaker"], [w.label for w in change.wanted]))
        if change.by.channel is Channel.CLEANUP:
            return refusal(Rule.NOT_ALLOWED, reason="held by the test")
        return await review(self, change, where, **kwargs)

    monkeypatch.setattr(BlockPolicy, "review", held)
    await ask(bot, dm(), "hi")
    # The clean-up asks with the system's rights (no speaker), and a refusal removes nothing.
    assert (Author("cleanup", Channel.CLEANUP), None, ["gone"]) in asked
    assert await labels(store) == ["gone", "keep", "safe"]
    monkeypatch.setattr(BlockPolicy, "review", review)
    await ask(bot, dm(), "hi")
    assert await labels(store) == ["keep", "safe"]


async def test_reactivated_block_is_safe_and_reidling_restarts_the_clock(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = await idle_block(make_bot)
    clock.advance(days=20)
    await ask(bot, dm(), "/pin activate gone")
    await ask(bot, dm(), "/pin idle gone")
    clock.advance(days=20)
    await ask(bot, dm(), "hi")
    assert await labels(store) == ["gone", "keep", "safe"]


async def test_shared_scope_counts_every_members_calls(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    pins = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}
    bot = make_bot(pins=pins)
    await ask(bot, group("7"), "/pin shared add old stale")
    await ask(bot, group("7"), "/pin shared idle old")
    clock.advance(days=8)
    for member in range(11):
        await ask(bot, group(str(100 + member)), "hi")
    assert await store.blocks(["console:group:-100123"]) == []
    assert await store.model_calls("console:group:-100123") == 11
    assert await store.model_calls("console:group:-100123::u:100") == 1

"""Budgets are limits: every model call (the first of a turn, each tool round, each compaction
summary) is held against the budgets before it is made, atomically across chats and workers, so
a budget period is overshot by at most one call — on SQLite and on PostgreSQL. Messages without
a sender id count to their group only; usage has a cost when the model has a price."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.core.conversation.usage import estimated_usage
from bot.core.entry.pinbot import Pinbot
from bot.core.people import ChatKind, Conversation
from bot.core.replies import Result
from bot.llm.base import ModelReply, ModelRequest
from bot.llm.openai_backend import OpenAIChatModel
from storage import Store
from storage.errors import BudgetSpent
from storage.models import Budget, Hold
from tests.conftest import ask, dm, group, make_config, outcome_of, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.pg import fresh_database

CALL = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}  # every call's usage
TODAY = "2026-01-01"  # the fake clock's day


@pytest.fixture(params=["sqlite", "postgres"])
async def open_bot(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Any]:
    """Bots on one store of the parametrized backend, talking to the fake model server."""
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")
    fake_openai.usage = CALL
    url = None
    if request.param == "postgres":
        url = await fresh_database(request.getfixturevalue("pg_cluster"))
    opened: list[tuple[Store, OpenAIChatModel]] = []

    async def open_one(**sections: Any) -> Pinbot:
        llm = {
            "backend": "openai",
            "base_url": fake_openai.base_url,
            "api_key_env": "PINBOT_TEST_KEY",
            "max_retries": 0,
            **sections.pop("llm", {}),
        }
        config = make_config(llm=llm, pins={"enable_in_group": True}, **sections)
        store = await Store.open(tmp_path / "budgets.sqlite3", url=url)
        model = OpenAIChatModel.from_config(config.llm)
        opened.append((store, model))
        return Pinbot(config, store, model, clock=clock)

    yield open_one
    for store, model in opened:
        await store.close()
        await model.close()


async def billed(bot: Pinbot, sender: str = "42") -> int:
    return (await bot.store.sender_usage("console", sender, TODAY, TODAY)).billed_tokens


async def test_concurrent_chats_of_one_user_overshoot_by_one_call_at_most(
    open_bot: Any, fake_openai: FakeOpenAI
) -> None:
    bot = await open_bot(budgets={"user_daily_tokens": 100})
    fake_openai.release = asyncio.Event()  # the model answers when the test says so
    chats = [dm(), *(group(chat=f"-{n}") for n in range(1, 6))]
    turns = [asyncio.create_task(ask(bot, chat, f"question {n}")) for n, chat in enumerate(chats)]
    await fake_openai.wait_for_requests(1)
    done, _ = await asyncio.wait(turns, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    while len(done) < 5:  # the other five are refused while the first call is in flight
        more, _ = await asyncio.wait(
            [t for t in turns if not t.done()], timeout=30, return_when=asyncio.FIRST_COMPLETED
        )
        done |= more
    assert len(fake_openai.requests) == 1
    fake_openai.release.set()
    replies = await asyncio.gather(*turns)
    assert [outcome_of(r) for r in replies].count(Result.REFUSED) == 5
    assert all(
        "budget for today is used up" in text_of(r)
        for r in replies
        if r and r.outcome is Result.REFUSED
    )
    assert await billed(bot) == 60
    # One more call is admitted while 60 < 100 (the call that crosses the budget completes),
    # and none after it: the overshoot is bounded by one call.
    assert outcome_of(await ask(bot, dm(), "again")) is Result.DONE
    assert outcome_of(await ask(bot, dm(), "and again")) is Result.REFUSED
    assert len(fake_openai.requests) == 2 and await billed(bot) == 120 <= 100 + 60


async def test_tool_rounds_are_held_one_by_one_and_the_answer_so_far_is_kept(
    open_bot: Any, fake_openai: FakeOpenAI
) -> None:
    bot = await open_bot(
        budgets={"user_daily_tokens": 100}, llm={"agent_tools": True, "max_tool_rounds": 100}
    )
    said = iter(["Let me look.", "Still looking."])
    fake_openai.respond = lambda body: tool_calls(("pin_get", {}), text=next(said))
    reply = await ask(bot, dm(), "what is pinned?")
    assert len(fake_openai.requests) == 2  # 0 and 60 were under 100; 120 is not
    assert reply is not None and reply.text.startswith("Let me look.\n\nStill looking.")
    assert "token budget for today is used up (120 of 100 tokens" in reply.text
    history = await bot.store.history("console:direct:42")
    assert [(e.role, e.content) for e in history] == [
        ("user", "what is pinned?"),
        ("assistant", "Let me look.\n\nStill looking."),
    ]
    assert await billed(bot) == 120
    assert all(r["max_completion_tokens"] == 1024 for r in fake_openai.requests)


async def test_a_refused_summary_drops_the_older_turns(
    open_bot: Any, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = await open_bot(
        budgets={"user_daily_tokens": 10_000},
        chat={"history_max_turns": 2, "compaction_keep_turns": 1},
    )
    for n in range(3):
        assert outcome_of(await ask(bot, group(chat="-9"), f"turn {n}")) is Result.DONE
    assert len(await bot.store.history("console:group:-9")) == 6
    # The turn passes the budget's check; then, before its summary is asked, a call of the same
    # user elsewhere holds the rest of the budget.
    ledger = bot.usage
    check = ledger.budget_refusal

    async def then_elsewhere(context: Any) -> str | None:
        refusal: str | None = await check(context)
        hold = Hold("console", "42", "", 10_000, 0.0)
        now = ledger._clock()
        await bot.store.hold_budgets(hold, ledger._budgets_of(context, now), now=now, since=now)
        return refusal

    monkeypatch.setattr(ledger, "budget_refusal", then_elsewhere)
    reply = await ask(bot, group(chat="-9"), "turn 3")  # its summary is refused, then its call
    assert outcome_of(reply) is Result.REFUSED and len(fake_openai.requests) == 3
    assert [e.content for e in await bot.store.history("console:group:-9")] == [
        "turn 2",
        "reply 3",
    ]


async def test_messages_without_a_sender_count_to_their_group_only(
    open_bot: Any, fake_openai: FakeOpenAI
) -> None:
    bot = await open_bot(budgets={"user_daily_tokens": 70, "group_daily_tokens": 1000})
    anonymous = [
        Conversation("console", ChatKind.GROUP, chat_id=chat, sender_id=None)
        for chat in ("-1", "-2")
    ]
    for conversation in anonymous * 2:  # 4 calls, 240 tokens: no user budget pools them
        assert outcome_of(await ask(bot, conversation, "hi")) is Result.DONE
    for chat in ("-1", "-2"):
        used = await bot.store.group_usage(f"console:group:{chat}", TODAY, TODAY)
        assert used.calls == 2
    users, groups = await bot.store.usage_report(TODAY)
    assert users == [] and len(groups) == 2
    report = text_of(await ask(bot, anonymous[0], "/usage"))
    assert "count to this group's usage and budget only" in report and "2 call(s)" in report


async def test_the_bill_in_money_and_budgets_in_money(
    open_bot: Any, fake_openai: FakeOpenAI
) -> None:
    price = {"prompt": 2.0, "cached_prompt": 0.5, "completion": 8.0}
    fake_openai.usage = {**CALL, "prompt_tokens_details": {"cached_tokens": 40}}
    bot = await open_bot(
        llm={"model": "fake-model"},
        pricing={"currency": "EUR", "models": {"fake-model": price}},
        budgets={"user_daily_cost": 0.0003},
    )
    assert outcome_of(await ask(bot, dm(), "one")) is Result.DONE
    # 10 fresh prompt tokens at 2.0, 40 cached at 0.5, 10 completion at 8.0, per million
    cost = (10 * 2.0 + 40 * 0.5 + 10 * 8.0) / 1_000_000
    used = await bot.store.sender_usage("console", "42", TODAY, TODAY)
    assert used.known_cost == pytest.approx(cost) and used.priced_calls == 1
    report = text_of(await ask(bot, dm(), "/usage"))
    assert "0.0001 EUR" in report and "80% cache hits" in report
    assert outcome_of(await ask(bot, dm(), "two")) is Result.DONE  # 0.00012 < 0.0003
    assert outcome_of(await ask(bot, dm(), "three")) is Result.DONE  # 0.00024 < 0.0003
    refused = await ask(bot, dm(), "four")
    assert outcome_of(refused) is Result.REFUSED
    assert "budget in EUR for today is used up" in text_of(refused)
    assert "budgets.user_daily_cost" in text_of(refused)
    assert [r["model"] for r in fake_openai.requests] == ["fake-model"] * 3
    fake_openai.respond = lambda body: completion("unpriced")
    other = await open_bot(llm={"model": "no-price-model"})
    await ask(other, dm("7"), "hi")
    (row,) = [u for u in (await other.store.usage_report(TODAY))[0] if u.key == "7"]
    assert row.totals.known_cost is None


async def test_a_renewed_hold_counts_on_and_only_a_dead_processs_hold_expires(
    open_bot: Any, clock: FakeClock
) -> None:
    bot = await open_bot(budgets={"user_daily_tokens": 100})
    store, lifetime = bot.store, bot.usage.hold_lifetime
    alive, dead = (
        Budget("user_daily", TODAY, TODAY, ("console", sender), None, 100)
        for sender in ("42", "43")
    )

    async def hold(budget: Budget) -> int:
        now = clock()
        assert budget.sender is not None
        made = Hold("console", budget.sender[1], "", 1_000, 0.0)
        held = await store.hold_budgets(made, [budget], now=now, since=now - lifetime)
        assert isinstance(held, int)
        return held

    async def spent(budget: Budget) -> bool:
        now = clock()
        try:
            await store.hold_budgets(None, [budget], now=now, since=now - lifetime)
        except BudgetSpent:
            return True
        return False

    streaming = await hold(alive)
    await hold(dead)  # its process dies: nothing renews it
    for _ in range(3 * int(lifetime / timedelta(seconds=30))):  # three lifetimes of a stream
        clock.advance(seconds=30)
        await store.renew_hold(streaming, clock())  # as its chunks arrive
    assert await spent(alive) and not await spent(dead)
    assert await store.forget_holds_before(clock() - lifetime) == 1  # the dead process's only
    assert await spent(alive)
    await store.release_hold(streaming)
    assert not await spent(alive)


async def test_a_cancelled_call_releases_its_hold(open_bot: Any, fake_openai: FakeOpenAI) -> None:
    bot = await open_bot(budgets={"user_daily_tokens": 100})
    fake_openai.release = asyncio.Event()
    turn = asyncio.create_task(ask(bot, dm(), "never mind"))
    await fake_openai.wait_for_requests(1)
    turn.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await turn
    fake_openai.release.set()
    assert outcome_of(await ask(bot, group(chat="-5"), "next")) is Result.DONE
    assert await bot.store.forget_holds_before(bot.usage._clock() + timedelta(days=1)) == 0


def test_an_estimate_counts_a_wide_character_as_a_token() -> None:
    # servers without stream usage: a CJK turn is not undercounted at 4 characters a token
    request = ModelRequest([{"role": "user", "content": "你好世界" * 10}])
    usage = estimated_usage(request, ModelReply("谢谢你的问题" * 10))
    assert usage.estimated and usage.completion_tokens == 60
    assert usage.prompt_tokens >= 40

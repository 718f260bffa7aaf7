"""A budget holds through a long streamed answer (issue 36, finding 1): the real
python-telegram-bot Application against the fake Bot API, the real OpenAI client against the fake
model server streaming an answer that takes longer, by the fake clock, than a hold used to last.
Time moves only as the stream's chunks reach the bot (each moves the fake clock on): nothing here
sleeps, and how fast the machine is changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.adapters.telegram import TelegramFrontend
from bot.core.entry.pinbot import Pinbot
from bot.llm.base import ModelReply, ModelRequest, Progress, TextSink
from bot.llm.openai_backend import OpenAIChatModel
from storage import Store
from tests.conftest import make_config
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion
from tests.fakes.telegram_server import (
    TOKEN,
    FakeTelegram,
    group_chat,
    message,
    private_chat,
    user,
)
from tests.templates import migrated_database, migrated_sqlite

ME = 42
TODAY = "2026-01-01"  # the fake clock's day
CALL = {"prompt_tokens": 30, "completion_tokens": 200, "total_tokens": 230}  # every call's usage
CHUNK_S = 10.0  # how far the fake clock moves as each chunk of a stream reaches the bot
ANSWER = "".join(f"w{n:03d} " for n in range(60))  # 60 content chunks: over 600 s


class Arrivals:
    """The bot's side of a stream: each chunk that reaches it moves the fake clock CHUNK_S on
    (its opening does not), before the bot sees the chunk; counted, so the model server can wait
    until the bot has read what it wrote."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.count = 0
        self._changed = asyncio.Condition()

    async def arrived(self) -> None:
        async with self._changed:
            self.count += 1
            self._changed.notify_all()

    async def wait_for(self, count: int) -> None:
        async def waiter() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: self.count >= count)

        await asyncio.wait_for(waiter(), 10)  # a safety net, not a pause


class PacedModel(OpenAIChatModel):
    """The real OpenAI client; only the fake clock moves as each streamed chunk arrives."""

    arrivals: Arrivals

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        opened = False

        async def progress() -> None:
            nonlocal opened
            if opened:
                self.arrivals.clock.advance(seconds=CHUNK_S)
            opened = True
            if on_progress is not None:
                await on_progress()
            await self.arrivals.arrived()

        return await super().complete(request, on_text=on_text, on_progress=progress)


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "postgres":
        url = await migrated_database(request.getfixturevalue("pg_cluster"))
        opened = await Store.open(url=url)
    else:
        opened = await Store.open(await migrated_sqlite(tmp_path / "budget.sqlite3"))
    async with opened:
        yield opened


class PacingClock:
    """A monotonic clock that moves only when the front end sleeps on it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0)


@pytest.fixture
async def start(
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    store: Store,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Callable[..., Any]]:
    """Start the Telegram front end on a streaming model with a 300-token daily budget and
    200-token answers (the issue's numbers); llm settings may be overridden."""
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")
    fake_openai.usage = CALL
    running: list[tuple[TelegramFrontend, OpenAIChatModel]] = []

    async def begin(**llm: Any) -> tuple[Pinbot, Arrivals]:
        settings = {
            "backend": "openai",
            "base_url": fake_openai.base_url,
            "api_key_env": "PINBOT_TEST_KEY",
            "max_retries": 0,
            "stream": True,
            "max_completion_tokens": 200,
            **llm,
        }
        config = make_config(
            llm=settings,
            budgets={"user_daily_tokens": 300},
            telegram={"base_url": fake_telegram.base_url, "poll_timeout_s": 1},
        )
        model = PacedModel.from_config(config.llm, clock=clock)
        assert isinstance(model, PacedModel)
        model.arrivals = arrivals = Arrivals(clock)
        pinbot = Pinbot(config, store, model, clock=clock)
        # The preview edits' pacing (a second apart) on a clock of its own that sleeping
        # moves: what is measured here is the budget, on the test's clock, not the pacing.
        paced = PacingClock()
        frontend = TelegramFrontend(
            pinbot, config.telegram, TOKEN, sleep=paced.sleep, monotonic=paced.monotonic
        )
        await frontend.start()
        running.append((frontend, model))
        return pinbot, arrivals

    yield begin
    for frontend, model in running:
        await frontend.stop()
        await model.close()


def last_text(server: FakeTelegram, chat: int) -> str:
    """What the chat shows last: the final edit of a streamed answer, or the last message."""
    writes = [
        params["text"]
        for method, params in server.calls
        if method in ("sendMessage", "editMessageText") and int(params["chat_id"]) == chat
    ]
    return writes[-1] if writes else ""


async def billed(store: Store) -> int:
    return (await store.sender_usage("telegram", str(ME), TODAY, TODAY)).billed_tokens


async def test_a_stream_longer_than_the_old_hold_keeps_the_budget_at_one_call_over(
    start: Callable[..., Any],
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    store: Store,
    clock: FakeClock,
) -> None:
    pinbot, arrivals = await start(stream_timeout_s=3600)
    old_hold = pinbot.usage.hold_lifetime.total_seconds()  # what a hold lasted, made once
    assert len(ANSWER) // 5 * CHUNK_S > 3 * old_hold  # the stream outlasts it three times over
    # Past the old hold's end, twice that, and near the end, the same user asks in another chat.
    past = int(old_hold // CHUNK_S) + 1
    ask_at = {past: -1001, 2 * past: -1002, len(ANSWER) // 5 - 2: -1003}
    asked: list[int] = []
    opened_at = clock.now

    async def pace(request: int, chunks: int) -> None:
        if request == 0 and (chat := ask_at.get(chunks)) is not None:
            # The bot has read the opening, the role chunk and `chunks` content chunks.
            await arrivals.wait_for(chunks + 2)
            assert (clock.now - opened_at).total_seconds() > old_hold
            asked.append(chat)
            fake_telegram.push(message(group_chat(chat), "@pin_bot and this?", user(ME)))
            await fake_telegram.wait_for(lambda: bool(fake_telegram.sent(chat)))

    fake_openai.script = [completion(ANSWER), completion("second answer")]
    fake_openai.on_chunk = pace
    fake_telegram.push(message(private_chat(ME), "a long answer, please", user(ME)))
    await fake_telegram.wait_for(lambda: last_text(fake_telegram, ME) == ANSWER.strip())
    assert asked == list(ask_at.values())
    for chat in asked:  # refused while the stream went on, without asking the model
        (refusal,) = fake_telegram.sent(chat)
        assert "your token budget for today is used up" in refusal["text"]
    assert len(fake_openai.requests) == 1
    assert await billed(store) == 230

    # 230 of 300 used: one more call is admitted (the one that crosses the budget), none after.
    fake_telegram.push(message(private_chat(ME), "one more", user(ME)))
    await fake_telegram.wait_for(lambda: last_text(fake_telegram, ME) == "second answer")
    fake_telegram.push(message(private_chat(ME), "and another", user(ME)))
    await fake_telegram.wait_for(lambda: "used up" in last_text(fake_telegram, ME))
    assert len(fake_openai.requests) == 2
    assert await billed(store) == 460 <= 300 + 230  # at most one call over


async def test_a_stream_past_its_time_limit_ends_the_turn_with_what_arrived_and_says_so(
    start: Callable[..., Any],
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    store: Store,
    clock: FakeClock,
) -> None:
    await start(stream_timeout_s=100)
    fake_openai.script = [completion(ANSWER)]
    fake_telegram.push(message(private_chat(ME), "a long answer, please", user(ME)))
    await fake_telegram.wait_for(lambda: "Cut off" in last_text(fake_telegram, ME))
    shown = last_text(fake_telegram, ME)
    arrived = ANSWER[: 5 * 9].strip()  # the role chunk and nine content chunks: 100 s
    assert shown.startswith(arrived) and "w009" not in shown
    assert "after 100 seconds" in shown and "llm.stream_timeout_s" in shown
    history = await store.history(f"telegram:direct:{ME}")
    assert [e.role for e in history] == ["user", "assistant"]
    # The next turn's model sees what arrived and that it was cut short.
    kept = history[1].content
    assert kept.startswith(arrived) and kept.endswith(shown[-60:]) and "Cut off" in kept
    used = await store.sender_usage("telegram", str(ME), TODAY, TODAY)
    assert used.calls == 1 and used.estimated_calls == 1  # the cut stream reported no usage
    assert await store.forget_holds_before(clock() + timedelta(days=1)) == 0  # released

"""Pinbot.handle(event, surface): a message's reply goes to the surface once (and is returned),
the indicator runs only while the model works, previews reach the surface's sink, and a
redelivered update whose database is unreachable raises with nothing sent; a tap on a message too
old for its buttons says what to use instead, and the bot's removal from a group is logged and
counted, its blocks kept."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import pytest

from bot import metrics
from bot.core.entry import SILENT, BotRemoved, Incoming, Tap, Tapped
from bot.core.replies import Reply, Result
from bot.llm.base import ModelReply, ModelRequest, Progress, TextSink
from storage.errors import Unavailable
from tests.conftest import BotFactory, dm, group


class Recorder:
    """A surface that records what the core asked of it."""

    def __init__(self, previews: bool = False) -> None:
        self.sent: list[Reply] = []
        self.events: list[str] = []
        self.previews: list[str] = []
        self._streams = previews

    @property
    def on_text(self) -> TextSink | None:
        return self._preview if self._streams else None

    async def _preview(self, text: str) -> None:
        self.previews.append(text)

    def thinking(self) -> AbstractAsyncContextManager[None]:
        @contextlib.asynccontextmanager
        async def indicator() -> AsyncIterator[None]:
            self.events.append("thinking")
            yield
            self.events.append("done thinking")

        return indicator()

    async def send(self, reply: Reply) -> None:
        self.events.append("sent")
        self.sent.append(reply)


class StreamingModel:
    """Streams its answer in three pieces when given a sink."""

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        if on_text is not None:
            for text in ("one", "one two", "one two three"):
                await on_text(text)
        return ModelReply("one two three")

    async def close(self) -> None:
        pass


class UnreachableModel:
    """As if the database went away during the turn."""

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        raise Unavailable("the database is gone")

    async def close(self) -> None:
        pass


async def test_the_reply_is_sent_on_the_surface_once_and_returned(make_bot: BotFactory) -> None:
    bot = make_bot()
    surface = Recorder()
    reply = await bot.handle(Incoming(dm(), "/pin list"), surface)
    assert reply is not None and surface.sent == [reply]
    assert surface.events == ["sent"]  # no indicator for a command


async def test_a_message_not_for_the_bot_sends_nothing(make_bot: BotFactory) -> None:
    bot = make_bot(telegram={"group_trigger": "mention"})
    surface = Recorder()
    assert await bot.handle(Incoming(group(platform="telegram"), "hello"), surface) is None
    assert await bot.handle(Incoming(dm(), "   "), surface) is None
    assert surface.events == []
    assert await bot.handle(Incoming(group(platform="telegram"), "hi", mentioned=True), surface)
    assert len(surface.sent) == 1


async def test_the_indicator_runs_while_the_model_works_and_previews_reach_the_sink(
    make_bot: BotFactory,
) -> None:
    bot = make_bot(StreamingModel())
    surface = Recorder(previews=True)
    reply = await bot.handle(Incoming(dm(), "count"), surface)
    assert reply is not None and reply.text == "one two three"
    assert surface.previews == ["one", "one two", "one two three"]
    assert surface.events == ["thinking", "done thinking", "sent"]


async def test_an_unreachable_database_is_a_failed_reply_unless_redelivered(
    make_bot: BotFactory,
) -> None:
    bot = make_bot(UnreachableModel())
    surface = Recorder()
    reply = await bot.handle(Incoming(dm(), "hello"), surface)
    assert reply is not None and reply.outcome is Result.FAILED and surface.sent == [reply]
    surface = Recorder()
    with pytest.raises(Unavailable):  # the update's next processing answers it, once
        await bot.handle(Incoming(dm(), "hello", redelivered=True), surface)
    assert surface.sent == []


async def test_the_silent_surface_shows_nothing(make_bot: BotFactory) -> None:
    bot = make_bot()
    reply = await bot.handle(Incoming(dm(), "/help"), SILENT)
    assert reply is not None and reply.text
    assert SILENT.on_text is None


async def test_a_tap_on_a_message_too_old_for_its_buttons_says_what_to_use(
    make_bot: BotFactory,
) -> None:
    bot = make_bot()
    for data, use in (
        ("pinbot:suggestion:pin:1", "/pin suggestions"),
        ("pinbot:proposal:approve:1", "/pin shared proposals"),
        ("not ours", "/pin shared proposals"),
    ):
        tapped = await bot.handle(Tap(dm(), data, None), SILENT)
        assert tapped == Tapped(f"This message is too old for its buttons; use {use}.", None, dm())


async def test_the_bot_removed_from_a_group_is_logged_and_counted_and_its_blocks_stay(
    make_bot: BotFactory, caplog: pytest.LogCaptureFixture
) -> None:
    bot = make_bot(pins={"enable_in_group": True, "group_shared_admin_ids": ["7"]})
    await bot.handle(Incoming(group("7"), "/pin shared add rules Be kind"), SILENT)
    meters = metrics.enable(version="test", model="m", currency="USD")
    try:
        with caplog.at_level(logging.INFO, logger="bot.core.entry.pinbot"):
            await bot.handle(BotRemoved(group("7")), SILENT)
        count = meters.registry.get_sample_value("pinbot_handling_seconds_count", {"kind": "other"})
    finally:
        metrics.disable()
    assert "removed from console:group:-100123 by 7" in caplog.messages
    assert count == 1
    # Added again, the group finds its blocks as they were.
    listing = await bot.handle(Incoming(group("7"), "/pin shared list"), SILENT)
    assert listing is not None and "rules" in listing.text

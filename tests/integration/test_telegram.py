"""The real python-telegram-bot Application against a fake Bot API server on 127.0.0.1 (and a fake
OpenAI-compatible server where the model matters), judged by the calls the bot makes and the
blocks it stores."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from telegram.error import TelegramError

from bot.adapters.telegram import TYPING_REFRESH_S, TelegramFrontend
from bot.adapters.telegram_send import STREAM_EDIT_INTERVAL_S, formatted_parts
from bot.config import LoggingConfig
from bot.core.entry.pinbot import UNREADABLE_REPLY, Pinbot
from bot.core.replies import Reply
from bot.llm.offline import OfflineChatModel
from bot.llm.openai_backend import OpenAIChatModel
from bot.logs import REDACTOR, setup_logging
from storage import Store
from tests.conftest import TEST_KEY_ENV, agent_llm, ask, dm, make_config, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.http import free_port
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.fakes.telegram_server import (
    BOT_USER,
    TOKEN,
    FakeTelegram,
    group_chat,
    message,
    private_chat,
    service,
    tap,
    user,
)
from tests.process import run_pinbot_here
from tests.templates import migrated_database, migrated_sqlite

GROUP = -1001234
GROUP_KEY = f"telegram:group:{GROUP}"


class Harness:
    def __init__(self, server: FakeTelegram, frontend: TelegramFrontend, store: Store) -> None:
        self.server = server
        self.frontend = frontend
        self.store = store
        self.sleeps: list[float] = []

    async def reply_to(self, update: dict[str, Any], count: int = 1) -> list[str]:
        """Push an update and wait for `count` messages sent in reply to it."""
        body = next(iter(update.values()))
        pushed = self.server.push(update)
        mid = body["message_id"]

        def replies() -> list[dict[str, Any]]:
            return [
                p
                for p in self.server.sent()
                if p.get("reply_parameters", {}).get("message_id") == mid
            ]

        await self.server.wait_for(lambda: len(replies()) >= count)
        assert pushed
        return [p["text"] for p in replies()]

    async def settle(self) -> None:
        """Wait until every pushed update has been fetched and fully handled."""
        last = self.server.updates[-1]["update_id"] if self.server.updates else 0
        await self.server.wait_for(lambda: self.server.confirmed >= last)
        await self.frontend.inbox.idle()


StartBot = Callable[..., Any]


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Every test here runs on both backends: SQLite, and a real PostgreSQL server."""
    if request.param == "postgres":
        opened: Any = await Store.open(
            url=await migrated_database(request.getfixturevalue("pg_cluster"))
        )
    else:
        opened = await Store.open(await migrated_sqlite(tmp_path / "pins.sqlite3"))
    async with opened:
        yield opened


@pytest.fixture
async def start_bot(
    fake_telegram: FakeTelegram, store: Store, clock: FakeClock
) -> AsyncIterator[StartBot]:
    running: list[tuple[TelegramFrontend, Any]] = []

    async def start(
        model: Any = None,
        *,
        telegram: dict[str, Any] | None = None,
        webhook_secret: str | None = None,
        monotonic: Any = None,
        sleep: Any = None,
        **sections: Any,
    ) -> Harness:
        settings = {"base_url": fake_telegram.base_url, "poll_timeout_s": 1, **(telegram or {})}
        config = make_config(telegram=settings, **sections)
        model = model or OfflineChatModel()
        pinbot = Pinbot(config, store, model, clock=clock)
        sleeps: list[float] = []

        async def fake_sleep(seconds: float) -> None:
            sleeps.append(seconds)
            await (sleep(seconds) if sleep else asyncio.sleep(0))

        extra = {"monotonic": monotonic} if monotonic else {}
        frontend = TelegramFrontend(
            pinbot, config.telegram, TOKEN, webhook_secret=webhook_secret, sleep=fake_sleep, **extra
        )
        await frontend.start()
        running.append((frontend, model))
        harness = Harness(fake_telegram, frontend, store)
        harness.sleeps = sleeps
        return harness

    yield start
    for frontend, model in running:
        await frontend.stop()
        await model.close()


async def blocks(store: Store, scope: str) -> list[tuple[str, str, str]]:
    return [(b.label, b.content, b.level.value) for b in await store.blocks([scope])]


async def test_dm_pin_and_chat(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    bot = await start_bot()
    me = user(42)
    assert await bot.reply_to(message(private_chat(42), "/pin add tone Be brief.", me)) == [
        "Saved strong block 'tone'."
    ]
    (reply,) = await bot.reply_to(message(private_chat(42), "hello there", me))
    assert "pinned blocks: tone (strong, personal)" in reply and "You said: hello there" in reply
    assert await blocks(store, "telegram:direct:42") == [("tone", "Be brief.", "strong")]
    scopes = [c["scope"]["type"] for c in fake_telegram.called("setMyCommands")]
    assert scopes == ["all_private_chats", "all_group_chats"]
    for call in fake_telegram.called("setMyCommands"):
        names = [command["command"] for command in call["commands"]]
        assert names[0] == "pin" and {"sticky", "usage", "whoami"} <= set(names)
    assert fake_telegram.called("sendChatAction")[0]["action"] == "typing"


PINS = {
    "enable_in_group": True,
    "group_shared_admin_ids": [f"{GROUP_KEY}::u:7"],
    "group_strong_user_ids": [5],
}


async def test_group_roles_with_both_allowlist_forms(start_bot: StartBot, store: Store) -> None:
    bot = await start_bot(pins=PINS)
    chat = group_chat(GROUP)
    (reply,) = await bot.reply_to(message(chat, "/pin shared add-strong house No spam", user(7)))
    assert reply.startswith("Saved strong block 'house'")
    (reply,) = await bot.reply_to(message(chat, "/pin add-strong mine Call me Bo", user(5)))
    assert reply.startswith("Saved strong block 'mine'")
    (reply,) = await bot.reply_to(message(chat, "/pin add-strong x y", user(42)))
    assert "pins.group_strong_user_ids" in reply
    (reply,) = await bot.reply_to(message(chat, "/pin shared add x y", user(42)))
    assert "Only shared admins" in reply
    (reply,) = await bot.reply_to(message(chat, "/pin add note mine", user(42)))
    assert reply.startswith("Saved context block 'note'")
    (reply,) = await bot.reply_to(message(chat, "/pin shared list", user(42)))
    assert "1. house (strong, active)\nNo spam" in reply
    assert await blocks(store, GROUP_KEY) == [("house", "No spam", "strong")]
    assert await blocks(store, f"{GROUP_KEY}::u:42") == [("note", "mine", "context")]


async def test_pins_disabled_and_whitelist(start_bot: StartBot, store: Store) -> None:
    bot = await start_bot(pins={"enable_in_group": False})
    (reply,) = await bot.reply_to(message(group_chat(GROUP), "/pin add a b", user(1)))
    assert "pins.enable_in_group" in reply
    await bot.frontend.stop()
    bot = await start_bot(pins={"enable_in_group": True, "group_whitelist": ["-1009"]})
    (reply,) = await bot.reply_to(message(group_chat(GROUP), "/pin add a b", user(1)))
    assert "pins.group_whitelist" in reply and GROUP_KEY in reply
    (reply,) = await bot.reply_to(message(group_chat(-1009), "/pin add a b", user(1)))
    assert reply.startswith("Saved")
    assert await store.blocks([f"{GROUP_KEY}::u:1"]) == []


async def test_forum_topics_share_the_group_scope(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    bot = await start_bot(pins=PINS)
    forum = group_chat(GROUP, forum=True)
    await bot.reply_to(message(forum, "/pin shared add faq Read the FAQ", user(7), thread_id=3))
    await bot.reply_to(message(forum, "/pin add mine In topic 3", user(42), thread_id=3))
    (reply,) = await bot.reply_to(message(forum, "/pin list", user(42), thread_id=5))
    assert "mine (context, active)\nIn topic 3" in reply
    update = message(forum, "@pin_bot hi from topic 5", user(42), thread_id=5)
    (reply,) = await bot.reply_to(update)
    assert "faq (context, shared); mine (context, personal)" in reply
    assert "You said: hi from topic 5" in reply
    assert fake_telegram.sent()[-1]["message_thread_id"] == 5


async def test_anonymous_admin_and_channel_are_refused(start_bot: StartBot, store: Store) -> None:
    bot = await start_bot(pins=PINS)
    chat = group_chat(GROUP)
    anonymous = message(chat, "/pin shared add a b", user(1087968824, "Group"), sender_chat=chat)
    (reply,) = await bot.reply_to(anonymous)
    assert "no sender id" in reply
    channel = {"id": -100777, "type": "channel", "title": "News"}
    linked = message(chat, "/pin add a b", user(777000, "Telegram"), sender_chat=channel)
    (reply,) = await bot.reply_to(linked)
    assert "no sender id" in reply
    assert await store.blocks([GROUP_KEY]) == []


async def test_nothing_is_posted_into_a_channel(
    start_bot: StartBot, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    bot = await start_bot(pins=PINS)
    caplog.set_level(logging.INFO, logger="bot")
    channel = {"id": -100777, "type": "channel", "title": "News"}
    for text in ("/pin list", "/pin add a b", "@pin_bot hello", "/pin@pin_bot list"):
        fake_telegram.push(message(channel, text, None, kind="channel_post", sender_chat=channel))
    await bot.settle()
    to_channel = [p for _, p in fake_telegram.calls if str(p.get("chat_id")) == "-100777"]
    assert to_channel == []  # no sendMessage, no "typing…"
    quiet = [m for m in caplog.messages if m.startswith("a post in channel -100777")]
    assert len(quiet) == 4
    (reply,) = await bot.reply_to(message(private_chat(42), "/pin list", user(42)))
    assert reply.startswith("You have no blocks")
    # Through a webhook, from the inbox, the same.
    port = free_port()
    webhook = {
        "mode": "webhook",
        "webhook_port": port,
        "webhook_path": "hook",
        "webhook_url": "https://bot.example.test/hook",
    }
    hooked = await start_bot(telegram=webhook, webhook_secret="s3cret-token", pins=PINS)
    post = message(channel, "/pin list", None, kind="channel_post", sender_chat=channel)
    headers = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-token"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{port}/hook", json=post | {"update_id": 99}, headers=headers
        ) as response,
    ):
        assert response.status == 200
    await hooked.frontend.inbox.idle()
    assert [p for _, p in fake_telegram.calls if str(p.get("chat_id")) == "-100777"] == []
    assert len([m for m in caplog.messages if m.startswith("a post in channel -100777")]) == 5


async def test_commands_for_other_bots_and_edits_are_ignored(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    bot = await start_bot()
    me, chat = user(42), private_chat(42)
    fake_telegram.push(message(chat, "/pin@other_bot add a b", me))
    fake_telegram.push(
        message(chat, "/pin add c d", me, kind="edited_message", edit_date=1767225601)
    )
    (reply,) = await bot.reply_to(message(chat, "/pin@Pin_Bot add e f", me))
    assert reply == "Saved strong block 'e'."
    await bot.settle()
    assert len(fake_telegram.sent()) == 1
    assert [b[0] for b in await blocks(store, "telegram:direct:42")] == ["e"]


async def test_long_replies_are_split_on_lines_and_arrive_whole(
    start_bot: StartBot, store: Store
) -> None:
    bot = await start_bot()
    me, chat = user(42), private_chat(42)
    for i in range(20):
        content = f"{i:02d}xxxx" + " word" * 98 + " end"
        assert len(content) == 500
        await bot.reply_to(message(chat, f"/pin add b{i:02d} {content}", me))
    expected = text_of(await ask(bot.frontend.pinbot, dm("42", "telegram"), "/pin list"))
    parts = await bot.reply_to(message(chat, "/pin list", me), count=3)
    assert all(len(part) <= 4096 for part in parts)
    assert "\n".join(parts) == expected
    lines = set(expected.split("\n"))
    assert all(line in lines for part in parts for line in part.split("\n"))  # cut at line ends


async def test_a_long_sticky_view_is_split_like_any_reply(
    start_bot: StartBot, store: Store
) -> None:
    bot = await start_bot(pins={"max_blocks_per_session": 60})
    me, chat = user(42), private_chat(42)
    for i in range(60):
        await bot.reply_to(message(chat, f"/pin add slot-{i:02d}-{'x' * 12} note {i}", me))
    expected = text_of(await ask(bot.frontend.pinbot, dm("42", "telegram"), "/sticky"))
    assert len(expected) > 4096 and expected.count(" characters, about ") == 60
    parts = await bot.reply_to(message(chat, "/sticky", me), count=2)
    assert all(len(part) <= 4096 for part in parts)
    assert "\n".join(parts) == expected  # every line, in order, none cut


async def test_slow_model_in_one_chat_does_not_delay_another(
    start_bot: StartBot,
    fake_openai: FakeOpenAI,
    fake_telegram: FakeTelegram,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")
    settings = {
        "backend": "openai",
        "base_url": fake_openai.base_url,
        "api_key_env": "PINBOT_TEST_KEY",
        "max_retries": 0,
    }
    model = OpenAIChatModel.from_config(make_config(llm=settings).llm)
    bot = await start_bot(model, llm=settings)
    fake_openai.release = asyncio.Event()
    slow = message(private_chat(1), "think hard", user(1))
    fake_telegram.push(slow)
    await fake_openai.wait_for_requests(1)
    (reply,) = await bot.reply_to(message(private_chat(2), "/pin list", user(2)))
    assert "no blocks" in reply
    assert not [p for p in fake_telegram.sent() if p["chat_id"] == 1]
    fake_openai.release.set()
    await fake_telegram.wait_for(lambda: bool(fake_telegram.sent(1)))
    assert fake_telegram.sent(1)[0]["text"] == "reply 1"


async def test_one_chats_updates_apply_in_order(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    bot = await start_bot()
    me, chat = user(42), private_chat(42)
    for i in range(10):
        fake_telegram.push(message(chat, f"/pin add b{i} x", me))
        fake_telegram.push(message(chat, f"/pin remove b{i}", me))
    await fake_telegram.wait_for(lambda: len(fake_telegram.sent()) == 20)
    texts = [p["text"] for p in fake_telegram.sent()]
    assert texts == [
        t for i in range(10) for t in (f"Saved strong block 'b{i}'.", f"Removed block 'b{i}'.")
    ]
    assert await bot.store.blocks(["telegram:direct:42"]) == []


async def test_supergroup_migration_moves_everything_once(
    start_bot: StartBot, store: Store
) -> None:
    old, new = -4001, -1004001
    bot = await start_bot(
        pins={"enable_in_group": True, "group_shared_admin_ids": [7]},
        telegram={"group_trigger": "all"},
    )
    chat = group_chat(old, kind="group")
    await bot.reply_to(message(chat, "/pin shared add rules Be nice", user(7)))
    await bot.reply_to(message(chat, "/pin add mine My note", user(42)))
    await bot.reply_to(message(chat, "hello", user(42)))
    bot.server.push(service(chat, user(1), migrate_to_chat_id=new))
    bot.server.push(service(group_chat(new), user(1), migrate_from_chat_id=old))
    await bot.settle()
    assert await blocks(store, f"telegram:group:{new}") == [("rules", "Be nice", "context")]
    assert await blocks(store, f"telegram:group:{new}::u:42") == [("mine", "My note", "context")]
    assert await store.blocks([f"telegram:group:{old}", f"telegram:group:{old}::u:42"]) == []
    assert await store.model_calls(f"telegram:group:{new}") == 1
    assert [e.content for e in await store.history(f"telegram:group:{new}")] == [
        "hello",
        (await store.history(f"telegram:group:{new}"))[1].content,
    ]
    (reply,) = await bot.reply_to(message(group_chat(new), "again", user(42)))
    assert "rules (context, shared); mine (context, personal)" in reply
    assert "Earlier messages: 2" in reply


def bot_member(chat: dict[str, Any], by: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """An update saying the bot's membership of chat went from old to new (by whom)."""
    member = {"user": BOT_USER, "status": new} | ({"until_date": 0} if new == "kicked" else {})
    return {
        "my_chat_member": {
            "chat": chat,
            "from": by,
            "date": 1767225600,
            "old_chat_member": {"user": BOT_USER, "status": old},
            "new_chat_member": member,
        }
    }


async def test_the_bot_removed_from_a_group_is_logged_and_its_blocks_stay(
    start_bot: StartBot, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    bot = await start_bot(pins={"enable_in_group": True, "group_shared_admin_ids": [7]})
    caplog.set_level(logging.INFO, logger="bot")
    chat = group_chat(GROUP)
    await bot.reply_to(message(chat, "/pin shared add rules Be nice", user(7)))
    bot.server.push(bot_member(chat, user(7), "member", "kicked"))
    bot.server.push(bot_member(chat, user(7), "left", "member"))  # added again: nothing to do
    bot.server.push(bot_member(private_chat(7), user(7), "member", "kicked"))  # a DM blocked
    await bot.settle()
    removals = [m for m in caplog.messages if m.startswith("removed from")]
    assert removals == [f"removed from {GROUP_KEY} by 7"]
    assert await blocks(store, GROUP_KEY) == [("rules", "Be nice", "context")]


async def test_group_triggers(start_bot: StartBot, fake_telegram: FakeTelegram) -> None:
    bot = await start_bot(pins={"enable_in_group": True})
    chat = group_chat(GROUP)
    fake_telegram.push(message(chat, "just chatting", user(1)))
    fake_telegram.push(message(chat, "hey @someone_else", user(1)))
    (reply,) = await bot.reply_to(message(chat, "@pin_bot what now?", user(1)))
    assert reply.endswith("You said: what now?")
    bot_message = {
        "message_id": 1,
        "date": 0,
        "chat": chat,
        "from": {"id": 999, "is_bot": True, "first_name": "Pin", "username": "pin_bot"},
        "text": "earlier",
    }
    (reply,) = await bot.reply_to(message(chat, "and then?", user(1), reply_to=bot_message))
    assert reply.endswith("You said: and then?")
    await bot.settle()
    assert len(fake_telegram.sent()) == 2


async def test_group_trigger_all(start_bot: StartBot) -> None:
    bot = await start_bot(telegram={"group_trigger": "all"})
    (reply,) = await bot.reply_to(message(group_chat(GROUP), "anyone?", user(1)))
    assert reply.endswith("You said: anyone?")


async def test_inherited_platform_admins(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    now = [0.0]
    bot = await start_bot(
        pins={"enable_in_group": True, "inherit_platform_admins": True},
        telegram={"admin_cache_ttl_s": 60},
        monotonic=lambda: now[0],
    )
    chat = group_chat(GROUP)
    fake_telegram.admins.add((GROUP, 7))
    (reply,) = await bot.reply_to(message(chat, "/pin shared add a from admin", user(7)))
    assert reply.startswith("Saved")
    (reply,) = await bot.reply_to(message(chat, "/pin shared add b from member", user(8)))
    assert "Only shared admins" in reply
    await bot.reply_to(message(chat, "/pin shared add c again", user(7)))
    assert len(fake_telegram.called("getChatMember")) == 2  # the second admin check was cached
    fake_telegram.admins.clear()
    now[0] = 61
    (reply,) = await bot.reply_to(message(chat, "/pin shared remove a", user(7)))
    assert "Only shared admins" in reply
    assert [b[0] for b in await blocks(store, GROUP_KEY)] == ["a", "c"]


async def test_platform_admins_count_for_nothing_by_default(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    bot = await start_bot(pins={"enable_in_group": True})
    fake_telegram.admins.add((GROUP, 7))
    (reply,) = await bot.reply_to(message(group_chat(GROUP), "/pin shared add a b", user(7)))
    assert "Only shared admins" in reply
    assert fake_telegram.called("getChatMember") == []


async def test_api_errors_are_logged_without_the_token_and_never_stop_the_bot(
    start_bot: StartBot, fake_telegram: FakeTelegram, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging(LoggingConfig(level="debug"))
    REDACTOR.add(TOKEN)
    try:
        bot = await start_bot()
        fake_telegram.fail("sendMessage", 429, "Too Many Requests: retry after 7", retry_after=7)
        (reply,) = await bot.reply_to(message(private_chat(1), "/pin list", user(1)))
        assert "no blocks" in reply and bot.sleeps.count(7) == 1
        fake_telegram.fail("sendMessage", 403, "Forbidden: bot was blocked by the user")
        fake_telegram.fail("sendMessage", 400, "Bad Request: chat not found")
        fake_telegram.push(message(private_chat(2), "/pin list", user(2)))
        fake_telegram.push(message(private_chat(3), "/pin list", user(3)))
        await bot.settle()
        assert len(fake_telegram.failed) == 3
        (reply,) = await bot.reply_to(message(private_chat(4), "/pin list", user(4)))
        assert "no blocks" in reply
        logging.getLogger("pinbot.test").error("token in a message: %s", TOKEN)
    finally:
        logging.getLogger().handlers.clear()
    logged = capsys.readouterr().err
    assert "cannot write to chat 2" in logged and "cannot write to chat 3" in logged
    assert "blocked by the user" in logged.lower() and "chat not found" in logged.lower()
    assert "flood control" in logged and "token in a message: [redacted]" in logged
    assert TOKEN not in logged and TOKEN.split(":")[1] not in logged


async def test_webhook_mode_needs_the_secret_token(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    port = free_port()
    await start_bot(
        telegram={
            "mode": "webhook",
            "webhook_port": port,
            "webhook_path": "hook",
            "webhook_url": "https://bot.example.test/hook",
        },
        webhook_secret="s3cret-token",
    )
    (webhook,) = fake_telegram.called("setWebhook")
    assert webhook["url"] == "https://bot.example.test/hook"
    assert webhook["secret_token"] == "s3cret-token"
    url = f"http://127.0.0.1:{port}/hook"
    forged = message(private_chat(9), "/pin add forged x", user(9)) | {"update_id": 1}
    honest = message(private_chat(9), "/pin add honest x", user(9)) | {"update_id": 2}
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=forged) as response:
            assert response.status == 403
        async with session.post(
            url, json=forged, headers={"X-Telegram-Bot-Api-Secret-Token": "wrong"}
        ) as response:
            assert response.status == 403
        async with session.post(
            url, json=honest, headers={"X-Telegram-Bot-Api-Secret-Token": "s3cret-token"}
        ) as response:
            assert response.status == 200
    await fake_telegram.wait_for(lambda: len(fake_telegram.sent()) == 1)
    assert fake_telegram.sent()[0]["text"] == "Saved strong block 'honest'."
    assert [b[0] for b in await blocks(store, "telegram:direct:9")] == ["honest"]


async def test_a_repeated_webhook_delivery_is_counted_once(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    from bot import metrics

    meters = metrics.enable(version="test", model="m", currency="USD")
    try:
        port = free_port()
        webhook = {
            "mode": "webhook",
            "webhook_port": port,
            "webhook_path": "hook",
            "webhook_url": "https://bot.example.test/hook",
        }
        await start_bot(telegram=webhook, webhook_secret="s3cret-token")
        update = message(private_chat(9), "/pin add once x", user(9)) | {"update_id": 7}
        headers = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-token"}
        async with aiohttp.ClientSession() as session:
            for _ in range(3):  # Telegram delivers again when it missed the 200
                url = f"http://127.0.0.1:{port}/hook"
                async with session.post(url, json=update, headers=headers) as response:
                    assert response.status == 200
        await fake_telegram.wait_for(lambda: len(fake_telegram.sent()) == 1)
        counted = meters.registry.get_sample_value(
            "pinbot_updates_received_total", {"platform": "telegram", "kind": "message"}
        )
        assert counted == 1
    finally:
        metrics.disable()


class Monotonic:
    """A monotonic clock that moves only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_polling_readiness_follows_getupdates_on_the_injected_clock(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    clock = Monotonic()
    bot = await start_bot(monotonic=clock)
    frontend = bot.frontend
    await bot.reply_to(message(private_chat(42), "/pin list", user(42)))  # getUpdates answered
    assert frontend.not_ready() is None
    clock.now += 1 + 30 + 1  # poll_timeout_s 1, and the slack: no getUpdates answered since
    assert frontend.not_ready() == "Telegram has answered no getUpdates for 31 s"
    deadline = time.monotonic() + 60  # a safety net for a busy machine, never a pause
    while frontend.not_ready() is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # the next getUpdates answers
    assert frontend.not_ready() is None
    unstarted = TelegramFrontend(bot.frontend.pinbot, frontend.config, TOKEN, monotonic=clock)
    assert unstarted.not_ready() == "Telegram has not answered a getUpdates yet"


async def test_a_webhook_worker_is_not_ready_while_telegram_answers_none_of_its_requests(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    clock = Monotonic()
    webhook = {
        "mode": "webhook",
        "webhook_port": free_port(),
        "webhook_path": "hook",
        "webhook_url": "https://bot.example.test/hook",
    }
    bot = await start_bot(telegram=webhook, webhook_secret="s3cret-token", monotonic=clock)
    frontend = bot.frontend
    assert frontend.not_ready() is None  # its requests so far were answered
    fake_telegram.fail("getMe", 502, "Bad Gateway")
    with pytest.raises(TelegramError):
        await frontend.app.bot.get_me()
    assert frontend.not_ready() is None  # one failure within the window
    clock.now += 61
    assert frontend.not_ready() == "Telegram has answered none of the bot's requests for 60 s"
    # not ready, it asks Telegram itself (getMe), which answers now: ready again
    await fake_telegram.wait_for(lambda: len(fake_telegram.called("getMe")) >= 2)
    deadline = time.monotonic() + 60  # a safety net for a busy machine, never a pause
    while frontend.not_ready() is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # the answer is on its way back to the bot
    assert frontend.not_ready() is None


async def test_cli_without_token_names_the_variable(tmp_path: Path) -> None:
    code, _, err = await run_pinbot_here("telegram", cwd=tmp_path, env={"TELEGRAM_BOT_TOKEN": None})
    assert code == 2 and "TELEGRAM_BOT_TOKEN" in err


@pytest.fixture
def start_streaming(
    start_bot: StartBot, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> StartBot:
    """Start the bot with a model that streams from the fake OpenAI server."""
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")
    settings = {
        "backend": "openai",
        "base_url": fake_openai.base_url,
        "api_key_env": "PINBOT_TEST_KEY",
        "max_retries": 0,
        "stream": True,
    }

    async def start(**extra: Any) -> Harness:
        model = OpenAIChatModel.from_config(make_config(llm=settings).llm)
        harness: Harness = await start_bot(model, llm=settings, **extra)
        return harness

    return start


def writes(server: FakeTelegram, chat: int) -> list[tuple[str, dict[str, Any], float]]:
    """The messages sent to chat and the edits there, in order, with when each arrived."""
    return [
        (method, params, at)
        for (method, params), at in zip(server.calls, server.arrived, strict=True)
        if method in ("sendMessage", "editMessageText") and int(params["chat_id"]) == chat
    ]


async def test_streaming_shows_the_first_text_at_once_then_writes_once_a_second(
    start_streaming: StartBot, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    now = [0.0]  # time passes only while the bot waits

    async def sleep(seconds: float) -> None:
        if seconds >= TYPING_REFRESH_S:  # the typing indicator's refresh never comes due here
            await asyncio.Event().wait()
        now[0] += seconds

    fake_telegram.clock = lambda: now[0]
    bot = await start_streaming(monotonic=lambda: now[0], sleep=sleep)
    answer = "**Streaming** answers arrive in pieces, and the bot edits one message. " * 3
    fake_openai.script = [completion(answer)]
    update = message(private_chat(5), "stream please", user(5))
    fake_telegram.push(update)
    await bot.settle()
    (first, *edits) = writes(fake_telegram, 5)
    method, sent, at = first
    assert method == "sendMessage" and at == 0.0  # the first text waited for nothing
    assert (
        answer.startswith(sent["text"])
        and sent["reply_parameters"]["message_id"] == (update["message"]["message_id"])
    )
    assert [m for m, _, _ in edits] == ["editMessageText"] * len(edits) and edits
    times = [at for _, _, at in (first, *edits)]
    assert all(later - earlier >= STREAM_EDIT_INTERVAL_S for earlier, later in pairwise(times))
    assert all(answer.startswith(params["text"]) for _, params, _ in edits[:-1])  # previews
    (final,) = formatted_parts(answer)  # the final edit shows it formatted
    assert edits[-1][1]["text"] == final[0] and edits[-1][1]["entities"]

    long_answer = "\n".join(f"line {i} " + "x" * 90 for i in range(100))
    fake_openai.script = [completion(long_answer)]
    fake_telegram.push(message(private_chat(5), "a long one", user(5)))
    await bot.settle()
    streamed = fake_telegram.sent(5)[1:]
    final_edit = fake_telegram.called("editMessageText")[-1]["text"]
    parts = [final_edit] + [p["text"] for p in streamed[1:]]
    assert "\n".join(part.strip("\n") for part in parts) == long_answer  # split on lines
    assert all(len(p["text"]) <= 4096 for p in streamed)


async def test_a_slow_telegram_does_not_hold_up_the_models_stream(
    start_streaming: StartBot, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, store: Store
) -> None:
    bot = await start_streaming()
    answer = (
        "The whole answer is read while Telegram keeps the first preview waiting. " * 4
    ).strip()
    fake_openai.script = [completion(f"_{answer}_")]
    fake_telegram.hold["sendMessage"] = released = asyncio.Event()
    fake_telegram.push(message(private_chat(6), "stream please", user(6)))
    async with asyncio.timeout(10):  # a safety net; the turn is recorded meanwhile
        while len(await store.history("telegram:direct:6")) < 2:
            await asyncio.sleep(0.01)
    released.set()
    await bot.settle()
    (first, *previews, final) = writes(fake_telegram, 6)  # one message, edited
    # The first preview holds what had arrived when it was sent: on a busy machine that may be
    # the whole raw answer, closing marker included.
    assert first[0] == "sendMessage" and f"_{answer}_".startswith(first[1]["text"])
    # A preview may go between them when the release comes before the turn hands over its reply.
    assert all(f"_{answer}_".startswith(params["text"]) for _, params, _ in previews)
    assert final[0] == "editMessageText" and final[1]["text"] == answer


async def test_access_lists_on_telegram(start_bot: StartBot, store: Store) -> None:
    bot = await start_bot(
        access={"allowed_users": [42], "allowed_groups": [GROUP]}, pins={"enable_in_group": True}
    )
    (reply,) = await bot.reply_to(message(private_chat(43), "hello", user(43)))
    assert "Your id is 43 (telegram:direct:43)" in reply and "access.allowed_users" in reply
    (reply,) = await bot.reply_to(message(group_chat(-1005), "/pin add a b", user(42)))
    assert "telegram:group:-1005" in reply and "access.allowed_groups" in reply
    (reply,) = await bot.reply_to(message(private_chat(42), "/whoami", user(42)))
    assert "Your ids: 42 (user id)" in reply
    (reply,) = await bot.reply_to(message(group_chat(GROUP), "/pin add a b", user(43)))
    assert reply.startswith("Saved")
    assert await store.history("telegram:direct:43") == []
    assert await store.export_scopes() == {
        f"{GROUP_KEY}::u:43": (0, await store.blocks([f"{GROUP_KEY}::u:43"]))
    }


@contextlib.asynccontextmanager
async def pinbot_telegram(
    tmp_path: Path, fake_telegram: FakeTelegram, settings: dict[str, Any], env: dict[str, str]
) -> AsyncIterator[list[bytes]]:
    """Run the real `pinbot telegram` process against the fake Bot API until the block ends,
    then stop it with SIGTERM; the list gets its stderr."""
    config = tmp_path / "config.yaml"
    telegram = {"base_url": fake_telegram.base_url + "/", "poll_timeout_s": 1}
    document = {"storage": {"path": str(tmp_path / "tg.sqlite3")}, "telegram": telegram}
    config.write_text(yaml.safe_dump({**document, **settings}))
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "pinbot"),
        "telegram",
        "--config",
        str(config),
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "TELEGRAM_BOT_TOKEN": TOKEN, **env},
    )
    err: list[bytes] = []
    try:
        await fake_telegram.wait_for(lambda: bool(fake_telegram.called("setMyCommands")), 20)
        yield err
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 20)
        err.append(stderr)
    finally:
        if process.returncode is None:
            process.kill()


async def test_pinbot_telegram_process_end_to_end(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    llm = {
        "backend": "openai",
        "base_url": fake_openai.base_url,
        "model": "m",
        "api_key_env": "PINBOT_E2E_KEY",
        "system_prompt": "S",
    }
    env = {"PINBOT_E2E_KEY": "sk-e2e"}
    async with pinbot_telegram(tmp_path, fake_telegram, {"llm": llm}, env) as err:
        fake_telegram.push(
            message(private_chat(3), "/pin add-context ref Use metric units", user(3))
        )
        fake_telegram.push(message(private_chat(3), "How far is it?", user(3)))
        await fake_telegram.wait_for(lambda: len(fake_telegram.sent(3)) == 2, 20)
    assert [m["text"] for m in fake_telegram.sent(3)] == ["Saved context block 'ref'.", "reply 1"]
    (request,) = fake_openai.requests
    assert request["model"] == "m" and request["messages"][0] == {"role": "system", "content": "S"}
    user_message = request["messages"][1]["content"]
    assert "label=ref]\nUse metric units\n" in user_message
    assert user_message.endswith("\n\nHow far is it?")
    assert b"sk-e2e" not in err[0] and TOKEN.encode() not in err[0]


async def test_inherited_admin_end_to_end_through_the_process(
    tmp_path: Path, fake_telegram: FakeTelegram
) -> None:
    """A Telegram group administrator, with pins.inherit_platform_admins, may do all a listed
    shared admin may (personal strong blocks included); a plain member may not."""
    settings = {"pins": {"enable_in_group": True, "inherit_platform_admins": True}}
    fake_telegram.admins.add((GROUP, 7))
    chat = group_chat(GROUP)
    said = [
        (7, "/pin add-strong mine Answer formally."),
        (7, "/pin shared add rule Keep it short."),
        (8, "/pin add-strong theirs Be loud."),
        (8, "/pin add notes Just mine."),
        (7, "/whoami"),
        (8, "/whoami"),
        (7, "hello @pin_bot"),
    ]
    async with pinbot_telegram(tmp_path, fake_telegram, settings, {}):
        for sender, text in said:
            fake_telegram.push(message(chat, text, user(sender)))
        await fake_telegram.wait_for(lambda: len(fake_telegram.sent(GROUP)) == len(said), 20)
    replies = [m["text"] for m in fake_telegram.sent(GROUP)]
    assert replies[0] == "Saved strong block 'mine'."
    assert replies[1] == "Saved context block 'rule'."
    assert replies[2].startswith("Only strong users may")
    assert replies[3] == "Saved context block 'notes'."
    assert "You are a shared admin" in replies[4]
    assert "telegram says you administer this group" in replies[4]
    assert "You are a member" in replies[5] and "administer" not in replies[5]
    assert replies[6].startswith(
        "[offline model] pinned blocks: mine (strong, personal); rule (context, shared)"
    )
    # One getChatMember per sender; the member's context block needed none.
    asked = [call["user_id"] for call in fake_telegram.called("getChatMember")]
    assert sorted(asked) == [7, 8]


async def test_network_errors_are_retried_with_a_pause(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    bot = await start_bot()
    fake_telegram.fail("sendMessage", 502, "Bad Gateway")
    fake_telegram.fail("sendMessage", 502, "Bad Gateway")
    (reply,) = await bot.reply_to(message(private_chat(6), "/pin list", user(6)))
    assert "no blocks" in reply
    assert bot.sleeps[:2] == [1, 2] and len(fake_telegram.failed) == 2


PHOTO = [{"file_id": "f1", "file_unique_id": "u1", "width": 10, "height": 10, "file_size": 99}]


async def test_messages_the_bot_cannot_read_get_one_short_answer(
    start_bot: StartBot, fake_telegram: FakeTelegram, clock: FakeClock
) -> None:
    bot = await start_bot(pins={"enable_in_group": True})
    dm_chat, sender = private_chat(5), user(5)
    (reply,) = await bot.reply_to(service(dm_chat, sender, photo=PHOTO, caption="what is this?"))
    assert reply == UNREADABLE_REPLY
    voice = {"file_id": "v1", "file_unique_id": "v1", "duration": 2}
    fake_telegram.push(service(dm_chat, sender, voice=voice))  # within the minute: no second
    await bot.settle()
    clock.advance(seconds=61)
    sticker = {
        "file_id": "s1",
        "file_unique_id": "s1",
        "type": "regular",
        "width": 5,
        "height": 5,
        "is_animated": False,
        "is_video": False,
    }
    (reply,) = await bot.reply_to(service(dm_chat, sender, sticker=sticker))
    assert reply == UNREADABLE_REPLY
    assert len(fake_telegram.sent(5)) == 2
    chat = group_chat(GROUP)
    fake_telegram.push(service(chat, user(6), photo=PHOTO))  # not addressed: silence
    fake_telegram.push(service(chat, user(6), new_chat_members=[user(9)]))  # service: silence
    fake_telegram.push(
        service(chat, user(6), pinned_message={"message_id": 1, "date": 0, "chat": chat})
    )
    await bot.settle()
    assert fake_telegram.sent(GROUP) == []
    caption = "@pin_bot read this"
    addressed = service(
        chat,
        user(6),
        document={"file_id": "d1", "file_unique_id": "d1", "file_name": "a.pdf"},
        caption=caption,
        caption_entities=[{"type": "mention", "offset": 0, "length": 8}],
    )
    (reply,) = await bot.reply_to(addressed)
    assert reply == UNREADABLE_REPLY
    assert await bot.store.history("telegram:direct:5") == []  # nothing reached the model


async def test_allowed_users_alone_closes_groups_on_telegram(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    bot = await start_bot(access={"allowed_users": [42]}, pins={"enable_in_group": True})
    (reply,) = await bot.reply_to(message(group_chat(-1009), "@pin_bot hello", user(43)))
    assert reply.startswith("Sorry") and "access.allowed_users" in reply
    (reply,) = await bot.reply_to(message(group_chat(-1009), "/pin add a b", user(43)))
    assert reply.startswith("Sorry")
    (reply,) = await bot.reply_to(message(group_chat(-1009), "@pin_bot hello", user(42)))
    assert reply.startswith("[offline model]")
    assert await store.blocks(["telegram:group:-1009::u:43"]) == []  # the refused add
    assert (await store.history("telegram:group:-1009"))[0].content == "hello"


async def test_a_failing_gateway_at_start_is_retried(
    start_bot: StartBot, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    fake_telegram.fail("getMe", 502, "Bad Gateway")
    fake_telegram.fail("getMe", 503, "Service Unavailable")
    bot = await start_bot()
    assert bot.sleeps[:2] == [1.0, 2.0]  # backoff, injected: no test waits for time
    assert caplog.text.count("cannot reach Telegram at telegram.base_url") == 2
    (reply,) = await bot.reply_to(message(private_chat(8), "/pin list", user(8)))
    assert "no blocks" in reply


class ScriptedModel:
    """Answers each turn with the next of its texts (the model's Markdown)."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)

    async def complete(self, request: Any, **_: Any) -> Any:
        from bot.llm.base import ModelReply

        return ModelReply(self.texts.pop(0))

    async def close(self) -> None:
        pass


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def assert_valid_parts(parts: list[dict[str, Any]]) -> None:
    """Each message is valid on its own: within 4,096 UTF-16 units, every entity inside it."""
    for part in parts:
        size = utf16(part["text"])
        assert 0 < size <= 4096
        for entity in part.get("entities", []):
            assert entity["offset"] >= 0 and entity["length"] > 0
            assert entity["offset"] + entity["length"] <= size, (entity, size)


MARKDOWN_CORPUS = {
    "nested and unclosed": "**bold _both_ bold** then **never closed and _half",
    "code with <, > and &": "Use `a < b && c > d`:\n```html\n<p>&amp; x > y</p>\n```",
    "non-BMP before entities": "😀👍𝄞 **bold** and `code` ✅ [link](https://example.org/x)",
    "table": "| name | value |\n|---|---|\n| a | 1 |\n| bb | 22 |",
    "headings, lists, quotes": "# Title\n## Sub\n- one\n- two\n1. first\n> quoted\n~~gone~~",
}


@pytest.mark.parametrize("name", MARKDOWN_CORPUS)
async def test_model_markdown_is_shown_formatted(
    start_bot: StartBot, fake_telegram: FakeTelegram, name: str
) -> None:
    bot = await start_bot(ScriptedModel(MARKDOWN_CORPUS[name]))
    await bot.reply_to(message(private_chat(11), "format this", user(11)))
    parts = fake_telegram.sent(11)
    assert_valid_parts(parts)
    assert all(part.get("entities") for part in parts)
    text, entities = parts[0]["text"], parts[0]["entities"]
    if name == "nested and unclosed":  # closed markers format, unclosed ones stay as typed
        assert text.startswith("bold both bold then **never closed and _half")
        assert {e["type"] for e in entities} >= {"bold", "italic"}
    else:
        assert "**" not in text and "```" not in text and "`" not in text
    if name == "non-BMP before entities":
        by_type = {e["type"]: e for e in entities}
        bold = by_type["bold"]
        assert bold["offset"] == utf16(text[: text.index("bold")]) and bold["length"] == 4
        assert by_type["text_link"]["url"] == "https://example.org/x"
    if name == "code with <, > and &":
        assert "a < b && c > d" in text and "<p>&amp; x > y</p>" in text
        assert {"type": "pre", "language": "html"}.items() <= next(
            e for e in entities if e["type"] == "pre"
        ).items()
    if name == "table":
        assert any(e["type"] == "pre" for e in entities) and "bb" in text


async def test_a_long_code_block_is_split_into_valid_parts(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    code = "\n".join(f"print('line {i:04d}')  # padding" for i in range(300))  # ~10,000 chars
    bot = await start_bot(ScriptedModel(f"Here:\n```python\n{code}\n```\nDone."))
    await bot.reply_to(message(private_chat(12), "long code", user(12)), count=3)
    await bot.settle()
    parts = fake_telegram.sent(12)
    assert len(parts) >= 3
    assert_valid_parts(parts)
    for part in parts[:-1]:  # the block is closed and reopened: every part holds code
        assert any(e["type"] == "pre" and e.get("language") == "python" for e in part["entities"])
    shown = "\n".join(p["text"].strip("\n") for p in parts)
    assert all(f"print('line {i:04d}')" in shown for i in range(300))


async def test_refused_formatting_is_sent_again_as_plain_text(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    bot = await start_bot(ScriptedModel("**Bold** and [a link](https://example.org)"))
    fake_telegram.fail("sendMessage", 400, "Bad Request: can't parse entities: bad offset")
    (reply,) = await bot.reply_to(message(private_chat(13), "hi", user(13)))
    assert reply == "Bold and a link (https://example.org)"
    (sent,) = fake_telegram.sent(13)
    assert "entities" not in sent
    assert len(fake_telegram.failed) == 1


async def test_pin_replies_are_never_read_as_markdown(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    bot = await start_bot()
    content = "**x** <b>tag</b> _y_ `z` [l](u)"
    await bot.reply_to(message(private_chat(14), f"/pin add md {content}", user(14)))
    (listing,) = await bot.reply_to(message(private_chat(14), "/pin list", user(14)))
    assert content in listing
    assert all("entities" not in part for part in fake_telegram.sent(14))


async def test_plain_reply_format_sends_the_markdown_as_it_is(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    bot = await start_bot(ScriptedModel("**as is**"), telegram={"reply_format": "plain"})
    (reply,) = await bot.reply_to(message(private_chat(15), "hi", user(15)))
    assert reply == "**as is**" and "entities" not in fake_telegram.sent(15)[0]


class _RetriesAtOnce:
    """asyncio as python-telegram-bot's polling loop sees it, except that the pause before
    polling again after a failure (1 s, then 1.5 times longer each time) takes no real time."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(seconds: float) -> None:
        await asyncio.sleep(0)


@pytest.fixture
def ptb_retries_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """python-telegram-bot's polling retries a failed getUpdates at once: its backoff is its
    own (a real asyncio.sleep no clock of ours reaches), and no test should wait it out."""
    from telegram.ext._utils import networkloop

    monkeypatch.setattr(networkloop, "asyncio", _RetriesAtOnce())


@pytest.mark.usefixtures("ptb_retries_at_once")
async def test_telegrams_conflict_says_another_process_polls(
    start_bot: StartBot, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="bot")
    await start_bot(monotonic=lambda: 100.0)
    conflict = "Conflict: terminated by other getUpdates request; make sure that only one bot"
    fake_telegram.fail("getUpdates", 409, conflict)
    fake_telegram.fail("getUpdates", 409, conflict)

    def reported() -> bool:
        return len(fake_telegram.failed) == 2 and "another process is polling" in caplog.text

    await fake_telegram.wait_for(reported)
    # Said once a minute, not at every poll; and how to fix it.
    assert caplog.text.count("another process is polling Telegram") == 1
    assert "telegram.mode: webhook" in caplog.text


async def test_the_bot_posts_to_a_chat_and_edits_what_it_posted(
    start_bot: StartBot, fake_telegram: FakeTelegram
) -> None:
    bot = await start_bot()
    sent = await bot.frontend.send("-100777", Reply("Proposal: *deadline* is Friday"))
    assert sent is not None and sent.chat == "-100777"
    (posted,) = fake_telegram.sent(-100777)
    assert posted["text"] == "Proposal: *deadline* is Friday" and "entities" not in posted
    assert await bot.frontend.edit(sent, Reply("Approved: **Friday**", formatted=True))
    edits = fake_telegram.called("editMessageText")
    assert edits[-1]["text"] == "Approved: Friday"
    assert edits[-1]["message_id"] == int(sent.message_id)
    assert [e["type"] for e in edits[-1]["entities"]] == ["bold"]


def pinned_note(chat: dict[str, Any], text: str, author: dict[str, Any]) -> dict[str, Any]:
    """A group message as it stands pinned (inside a pinned_message service message)."""
    return next(iter(message(chat, text, author).values()))


SYNC = {"sync_pinned_message": True}
ADMIN_PINS = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}


async def test_a_message_pinned_by_a_shared_admin_becomes_the_groups_block(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    bot = await start_bot(telegram=SYNC, pins=ADMIN_PINS)
    chat = group_chat(GROUP)
    note = pinned_note(chat, "Release on Friday, 5 pm.", user(42))
    fake_telegram.push(service(chat, user(7), pinned_message=note))
    await bot.settle()
    assert await blocks(store, GROUP_KEY) == [("chat-pin", "Release on Friday, 5 pm.", "context")]
    versions = await store.versions(GROUP_KEY, "chat-pin")
    assert versions[0].channel.value == "telegram-pin" and versions[0].actor == "7"
    assert versions[0].origin is not None and versions[0].origin.author == "42"
    # The same pin delivered again changes nothing; a new pin replaces the block's content.
    fake_telegram.push(service(chat, user(7), pinned_message=note))
    newer = pinned_note(chat, "Release moved to Monday.", user(42))
    fake_telegram.push(service(chat, user(7), pinned_message=newer))
    await bot.settle()
    assert await blocks(store, GROUP_KEY) == [("chat-pin", "Release moved to Monday.", "context")]
    assert len(await store.versions(GROUP_KEY, "chat-pin")) == 2
    # A member's pin is not taken; a pin without a sender id neither.
    fake_telegram.push(service(chat, user(42), pinned_message=pinned_note(chat, "Mine!", user(42))))
    fake_telegram.push(service(chat, None, pinned_message=pinned_note(chat, "Anon", user(7))))
    await bot.settle()
    assert (await blocks(store, GROUP_KEY))[0][1] == "Release moved to Monday."
    # Text over the content limit is not saved, and /pin shared status says why.
    long = pinned_note(chat, "x" * 600, user(42))
    fake_telegram.push(service(chat, user(7), pinned_message=long))
    await bot.settle()
    assert (await blocks(store, GROUP_KEY))[0][1] == "Release moved to Monday."
    (status,) = await bot.reply_to(message(chat, "/pin shared status", user(42)))
    assert "Note: the chat's pinned message is not the 'chat-pin' block" in status
    assert "600 characters long; the limit is 500" in status


async def test_a_chat_without_a_pinned_message_idles_the_block(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store, clock: FakeClock
) -> None:
    bot = await start_bot(telegram=SYNC, pins=ADMIN_PINS)
    chat = group_chat(GROUP)
    note = pinned_note(chat, "Standup at 10.", user(7))
    fake_telegram.push(service(chat, user(7), pinned_message=note))
    await bot.settle()
    fake_telegram.pinned[GROUP] = note  # still pinned: getChat says so
    await bot.frontend.pinbot.jobs.run_due()
    assert (await store.blocks([GROUP_KEY]))[0].state.value == "active"
    fake_telegram.pinned[GROUP] = None  # unpinned (Telegram sends no update for that)
    clock.advance(seconds=600)
    assert "telegram pinned messages" in await bot.frontend.pinbot.jobs.run_due()
    assert (await store.blocks([GROUP_KEY]))[0].state.value == "idle"
    assert fake_telegram.called("getChat")[-1]["chat_id"] == GROUP


async def test_pinned_messages_are_left_alone_by_default(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    bot = await start_bot(pins=ADMIN_PINS)
    chat = group_chat(GROUP)
    note = pinned_note(chat, "Release on Friday.", user(7))
    fake_telegram.push(service(chat, user(7), pinned_message=note))
    await bot.settle()
    assert await store.blocks([GROUP_KEY]) == []


def said(chat: dict[str, Any], text: str, author: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A message as it stands replied to (inside reply_to_message)."""
    return next(iter(message(chat, text, author, **fields).values()))


async def test_a_reply_without_content_pins_the_message_replied_to(
    start_bot: StartBot, store: Store
) -> None:
    bot = await start_bot(pins=ADMIN_PINS)
    chat, me = group_chat(GROUP), user(42)
    mine = f"{GROUP_KEY}::u:42"
    note = said(chat, "Deploys happen on Tuesdays, never on Fridays.", user(43))
    (reply,) = await bot.reply_to(message(chat, "/pin add deploys", me, reply_to=note))
    assert reply == "Saved context block 'deploys'."
    (version,) = await store.versions(mine, "deploys")
    assert version.origin is not None
    assert (version.origin.message_id, version.origin.author) == (str(note["message_id"]), "43")
    # A quote: only the quoted part is pinned.
    quote = {"text": "never on Fridays", "position": 28}
    await bot.reply_to(message(chat, "/pin add fridays", me, reply_to=note, quote=quote))
    # The bot's own answer, and a photo's caption (formatting dropped: the text as shown).
    answer = said(chat, "The answer is 42.", BOT_USER)
    await bot.reply_to(message(chat, "/pin add answer --pinned", me, reply_to=answer))
    captioned = said(chat, "", user(43), photo=PHOTO, caption="Whiteboard: *ship it*")
    del captioned["text"]
    await bot.reply_to(message(chat, "/pin add board", me, reply_to=captioned))
    # With content given, the content wins.
    await bot.reply_to(message(chat, "/pin add own My words", me, reply_to=note))
    # An admin's shared add takes the reply too.
    await bot.reply_to(message(chat, "/pin shared add rules", user(7), reply_to=note))
    assert sorted(await blocks(store, mine)) == [
        ("answer", "The answer is 42.", "context"),
        ("board", "Whiteboard: *ship it*", "context"),
        ("deploys", "Deploys happen on Tuesdays, never on Fridays.", "context"),
        ("fridays", "never on Fridays", "context"),
        ("own", "My words", "context"),
    ]
    assert await blocks(store, GROUP_KEY) == [
        ("rules", "Deploys happen on Tuesdays, never on Fridays.", "context")
    ]
    # A member's shared add is refused as it is with content.
    (reply,) = await bot.reply_to(message(chat, "/pin shared add x", me, reply_to=note))
    assert "shared" in reply and len(await blocks(store, GROUP_KEY)) == 1


async def test_replies_that_cannot_be_pinned_are_refused_with_the_reason(
    start_bot: StartBot, store: Store
) -> None:
    bot = await start_bot(pins={"enable_in_group": True})
    chat, me = private_chat(42), user(42)
    photo = said(chat, "", user(42), photo=PHOTO)
    del photo["text"]
    (reply,) = await bot.reply_to(message(chat, "/pin add pic", me, reply_to=photo))
    assert "has no text to pin" in reply
    long = said(chat, "y" * 700, BOT_USER)
    (reply,) = await bot.reply_to(message(chat, "/pin add long", me, reply_to=long))
    assert "700 characters long; the limit is 500" in reply and "Quote the part" in reply
    command = said(chat, "/pin add other words", me)
    (reply,) = await bot.reply_to(message(chat, "/pin add again", me, reply_to=command))
    assert "itself a /pin command" in reply
    (reply,) = await bot.reply_to(message(chat, "/pin add nothing", me))
    assert "needs content after its label" in reply and "as a reply" in reply
    # A message in a forum topic "replies" to the topic's creation: that is no reply to pin.
    forum = group_chat(GROUP, forum=True)
    opening = said(forum, "", user(7), forum_topic_created={"name": "Ops", "icon_color": 1})
    del opening["text"]
    topic = message(forum, "/pin add t", me, thread_id=3, reply_to=opening)
    (reply,) = await bot.reply_to(topic)
    assert "needs content after its label" in reply
    assert await blocks(store, "telegram:direct:42") == []


# --- proposals (issue 30) ----------------------------------------------------------------------


def proposing_model(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, *proposals: dict[str, Any]
) -> tuple[OpenAIChatModel, dict[str, Any]]:
    """The real OpenAI client against the fake server, scripted to propose each of proposals
    (one turn each) and then answer."""
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test-secret")
    llm = agent_llm(server.base_url)
    server.script = []
    for proposal in proposals:
        server.script += [tool_calls(("pin_propose", proposal)), completion("Proposed.")]
    return OpenAIChatModel.from_config(make_config(llm=llm).llm), llm


async def test_a_proposal_is_posted_with_buttons_and_an_admins_tap_applies_it(
    start_bot: StartBot,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    propose = {"label": "deadline", "content": "Release on Friday.", "reason": "agreed today"}
    model, llm = proposing_model(fake_openai, monkeypatch, propose)
    bot = await start_bot(model, pins=ADMIN_PINS, llm=llm)
    chat = group_chat(GROUP)
    await bot.reply_to(message(chat, "@pin_bot keep the deadline", user(42)))
    (posted,) = [p for p in fake_telegram.sent(GROUP) if "reply_markup" in p]
    assert "Proposal #1" in posted["text"] and "Release on Friday." in posted["text"]
    (row,) = posted["reply_markup"]["inline_keyboard"]
    assert [(b["text"], b["callback_data"]) for b in row] == [
        ("Approve", "pinbot:proposal:approve:1"),
        ("Reject", "pinbot:proposal:reject:1"),
    ]
    assert await blocks(store, GROUP_KEY) == []
    sent_id = await posted_id(fake_telegram, posted)
    shown = {"message_id": sent_id, "text": posted["text"]}
    # A member's tap: a notice, and nothing changes.
    fake_telegram.push(tap(chat, user(42), shown, "pinbot:proposal:approve:1"))
    await bot.settle()
    (answer,) = fake_telegram.called("answerCallbackQuery")
    assert "Only this group's shared admins" in answer["text"]
    assert await blocks(store, GROUP_KEY) == [] and fake_telegram.called("editMessageText") == []
    # The admin taps Approve twice: one change, one edit, the buttons replaced by the outcome.
    fake_telegram.push(tap(chat, user(7), shown, "pinbot:proposal:approve:1"))
    fake_telegram.push(tap(chat, user(7), shown, "pinbot:proposal:approve:1"))
    await bot.settle()
    answers = [a["text"] for a in fake_telegram.called("answerCallbackQuery")]
    assert answers[1:] == ["Approving proposal #1…"] * 2
    assert await blocks(store, GROUP_KEY) == [("deadline", "Release on Friday.", "context")]
    (edit,) = fake_telegram.called("editMessageText")
    assert edit["message_id"] == sent_id and "reply_markup" not in edit
    assert edit["text"].endswith("Approved by 7: saved.")
    (version,) = await store.versions(GROUP_KEY, "deadline")
    assert version.actor == "7" and version.origin is not None and version.origin.proposal == 1


async def test_each_tap_is_counted_once_and_a_members_tap_as_refused(
    start_bot: StartBot,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from bot import metrics

    propose = {"label": "deadline", "content": "Release on Friday.", "reason": "agreed today"}
    model, llm = proposing_model(fake_openai, monkeypatch, propose)
    caplog.set_level(logging.INFO)
    meters = metrics.enable(version="test", model="m", currency="USD")

    def counted(name: str, **labels: str) -> float:
        return meters.registry.get_sample_value(name, labels) or 0.0

    try:
        bot = await start_bot(model, pins=ADMIN_PINS, llm=llm)
        chat = group_chat(GROUP)
        await bot.reply_to(message(chat, "@pin_bot keep the deadline", user(42)))
        (posted,) = [p for p in fake_telegram.sent(GROUP) if "reply_markup" in p]
        shown = {"message_id": await posted_id(fake_telegram, posted), "text": posted["text"]}
        fake_telegram.push(tap(chat, user(42), shown, "pinbot:proposal:approve:1"))  # a member
        await bot.settle()
        assert counted("pinbot_handling_seconds_count", kind="tap") == 1
        assert counted("pinbot_refusals_total", reason="access") == 1
        fake_telegram.push(tap(chat, user(7), shown, "pinbot:proposal:approve:1"))  # an admin
        await bot.settle()
        await fake_telegram.wait_for(lambda: len(fake_telegram.called("editMessageText")) == 1)
        assert counted("pinbot_handling_seconds_count", kind="tap") == 2
        assert counted("pinbot_refusals_total", reason="access") == 1
        assert counted("pinbot_refusals_total", reason="block_rules") == 0
        updates = counted("pinbot_updates_received_total", platform="telegram", kind="tap")
        assert updates == 2
        # the outcome (it quotes the block) is the chat's: not in the logs above debug
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
        assert not [line for line in said if "deadline" in line or "saved" in line.casefold()]
    finally:
        metrics.disable()


async def posted_id(fake_telegram: FakeTelegram, posted: dict[str, Any]) -> int:
    """The message id the fake server gave a sent message (its calls and results in order)."""
    for params, result in fake_telegram.results("sendMessage"):
        if params is posted:
            return int(result["message_id"])
    raise AssertionError("not sent")


async def test_expired_and_stale_proposals_are_refused_once_and_say_so(
    start_bot: StartBot,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    store: Store,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, llm = proposing_model(
        fake_openai,
        monkeypatch,
        {"label": "rules", "content": "Be kind and brief."},
        {"label": "later", "content": "Will expire."},
    )
    bot = await start_bot(model, pins=ADMIN_PINS, llm=llm)
    chat = group_chat(GROUP)
    await bot.reply_to(message(chat, "/pin shared add rules Be kind.", user(7)))
    await bot.reply_to(message(chat, "@pin_bot make the rules stricter", user(42)))
    # The block changes after the proposal to replace it: approving it would lose that change.
    await bot.reply_to(message(chat, "/pin shared edit rules Be kind, always.", user(7)))
    (reply,) = await bot.reply_to(message(chat, "/pin shared approve 1", user(7)))
    assert "changed after this was asked for" in reply
    assert (await blocks(store, GROUP_KEY))[0][1] == "Be kind, always."
    edits = fake_telegram.called("editMessageText")
    assert len(edits) == 1 and "Approved by 7, but not saved" in edits[0]["text"]
    # A proposal past pins.proposal_ttl_hours: a tap says it expired and updates its message.
    await bot.reply_to(message(chat, "@pin_bot note something", user(42)))
    clock.advance(hours=25)
    posted = [p for p in fake_telegram.sent(GROUP) if "reply_markup" in p][-1]
    shown = {"message_id": await posted_id(fake_telegram, posted), "text": posted["text"]}
    fake_telegram.push(tap(chat, user(7), shown, "pinbot:proposal:approve:2"))
    await bot.settle()
    edits = fake_telegram.called("editMessageText")
    assert len(edits) == 2 and edits[1]["text"].endswith(
        "Expired without a decision; nothing changed."
    )
    assert [b[0] for b in await blocks(store, GROUP_KEY)] == ["rules"]
    (reply,) = await bot.reply_to(message(chat, "/pin shared approve 2", user(7)))
    assert "was expired already" in reply


async def test_a_tap_is_answered_while_the_chat_waits_for_the_model(
    start_bot: StartBot,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, llm = proposing_model(
        fake_openai, monkeypatch, {"label": "deadline", "content": "Release on Friday."}
    )
    bot = await start_bot(model, pins=ADMIN_PINS, llm=llm)
    chat = group_chat(GROUP)
    await bot.reply_to(message(chat, "@pin_bot keep the deadline", user(42)))
    posted = [p for p in fake_telegram.sent(GROUP) if "reply_markup" in p][-1]
    shown = {"message_id": await posted_id(fake_telegram, posted), "text": posted["text"]}
    # The next turn of the chat waits on the model; the admin taps meanwhile.
    fake_openai.release = asyncio.Event()
    fake_telegram.push(message(chat, "@pin_bot and one more thing", user(42)))
    await fake_openai.wait_for_requests(3)
    fake_telegram.push(tap(chat, user(7), shown, "pinbot:proposal:approve:1"))
    await fake_telegram.wait_for(lambda: bool(fake_telegram.called("answerCallbackQuery")))
    assert fake_telegram.called("answerCallbackQuery")[0]["text"] == "Approving proposal #1…"
    assert await blocks(store, GROUP_KEY) == []  # applied in the chat's order: after the turn
    fake_openai.release.set()
    await bot.settle()
    assert await blocks(store, GROUP_KEY) == [("deadline", "Release on Friday.", "context")]


# --- pin suggestions at compaction (issue 39) --------------------------------------------------


async def test_a_pin_suggestion_in_a_dm_comes_with_buttons_and_a_tap_on_pin_saves_it(
    start_bot: StartBot,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test-secret")
    llm = {**agent_llm(fake_openai.base_url), "agent_tools": False}
    model = OpenAIChatModel.from_config(make_config(llm=llm).llm)
    short = {"history_max_turns": 2, "compaction_keep_turns": 1, "history_max_chars": 100000}
    bot = await start_bot(model, llm=llm, chat=short)
    chat, me = private_chat(42), user(42)
    for number in (1, 2, 3):
        await bot.reply_to(message(chat, f"message {number}", me))
    diet = {"label": "diet", "content": "Vegetarian.", "reason": "said twice"}
    fake_openai.script = [
        tool_calls(("compact_history", {"summary": "They talked.", "suggestions": [diet]})),
        completion("answer 4"),
    ]
    assert await bot.reply_to(message(chat, "message 4", me)) == ["answer 4"]
    (posted,) = [p for p in fake_telegram.sent(42) if "reply_markup" in p]
    assert "Pin suggestion #1" in posted["text"] and "diet: Vegetarian." in posted["text"]
    (row,) = posted["reply_markup"]["inline_keyboard"]
    assert [(b["text"], b["callback_data"]) for b in row] == [
        ("Pin", "pinbot:suggestion:pin:1"),
        ("Dismiss", "pinbot:suggestion:dismiss:1"),
    ]
    assert await blocks(store, "telegram:direct:42") == []
    shown = {"message_id": await posted_id(fake_telegram, posted), "text": posted["text"]}
    # The button's data counts only on the message that shows the suggestion.
    other = {**shown, "message_id": shown["message_id"] + 100}
    fake_telegram.push(tap(chat, me, other, "pinbot:suggestion:pin:1"))
    await bot.settle()
    (refused,) = fake_telegram.called("answerCallbackQuery")
    assert refused["text"] == "This button does nothing here."
    assert await blocks(store, "telegram:direct:42") == []
    fake_telegram.push(tap(chat, me, shown, "pinbot:suggestion:pin:1"))
    await bot.settle()
    answer = fake_telegram.called("answerCallbackQuery")[-1]
    assert answer["text"] == "Pinning suggestion #1…"
    assert await blocks(store, "telegram:direct:42") == [("diet", "Vegetarian.", "strong")]
    (edit,) = fake_telegram.called("editMessageText")
    assert edit["message_id"] == shown["message_id"] and "reply_markup" not in edit
    assert edit["text"].endswith("Pinned: saved.")


async def test_a_spoiler_in_a_pin_command_is_a_secret_the_model_never_reads(
    start_bot: StartBot,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 44: a `/pin add` whose door code Telegram draws as a spoiler keeps the mark, so the
    block is stored with `||4821||`, sensitive, and the model's request holds `[hidden]`."""
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test")
    llm = {**agent_llm(fake_openai.base_url), "agent_tools": False}
    model = OpenAIChatModel.from_config(make_config(llm=llm).llm)
    bot = await start_bot(model, llm=llm)
    me = user(42)
    text = "/pin add door Gate code 4821, then the 🚪 on the left"
    update = message(private_chat(42), text, me)
    body = update["message"]
    # "4821" after the emoji-free prefix; Telegram counts UTF-16 units (all one unit here).
    body["entities"] = [*body["entities"], {"type": "spoiler", "offset": 24, "length": 4}]
    (saved,) = await bot.reply_to(update)
    assert "sensitive" in saved
    (block,) = await store.blocks(["telegram:direct:42"])
    assert block.content == "Gate code ||4821||, then the 🚪 on the left" and block.sensitive
    fake_openai.script = [completion("Noted.")]
    assert await bot.reply_to(message(private_chat(42), "How do I get in?", me)) == ["Noted."]
    (request,) = fake_openai.requests
    sent = str(request["messages"])
    assert "4821" not in sent and "Gate code [hidden], then the 🚪 on the left" in sent


async def test_a_spoiler_after_wide_characters_is_cut_in_utf16_units(
    start_bot: StartBot, store: Store
) -> None:
    bot = await start_bot()
    text = "/pin add pass 🔑🔑 wifi tulip77"
    update = message(private_chat(43), text, user(43))
    # Each 🔑 is two UTF-16 units: "tulip77" starts at unit 24, not character 22.
    update["message"]["entities"].append({"type": "spoiler", "offset": 24, "length": 7})
    await bot.reply_to(update)
    (block,) = await store.blocks(["telegram:direct:43"])
    assert block.content == "🔑🔑 wifi ||tulip77||"


async def test_a_spoiler_after_a_mention_in_a_group_command_is_kept(
    start_bot: StartBot, store: Store
) -> None:
    """A `/pin` typed after the bot's @mention still keeps its spoiler as a mark."""
    bot = await start_bot(pins=PINS)
    text = "@pin_bot /pin add gift The surprise is a red bike"
    update = message(group_chat(GROUP), text, user(42))
    update["message"]["entities"].append(
        {"type": "spoiler", "offset": text.index("red bike"), "length": 8}
    )
    (reply,) = await bot.reply_to(update)
    assert "sensitive" in reply, reply
    (block,) = await store.blocks([f"{GROUP_KEY}::u:42"])
    assert block.content == "The surprise is a ||red bike||" and block.sensitive


async def test_a_pinned_credential_is_not_taken_and_the_status_says_why(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    """Issue 44: a pinned message holding a credential does not become the group's block; the
    group reads why in /pin shared status (the kind named, never the text)."""
    bot = await start_bot(telegram=SYNC, pins=ADMIN_PINS)
    chat = group_chat(GROUP)
    fake_telegram.push(
        service(chat, user(7), pinned_message=pinned_note(chat, "Release on Friday.", user(42)))
    )
    await bot.settle()
    secret = "Staging DB: postgres://app:Sup3rS3cret@db.internal:5432/app"
    fake_telegram.push(service(chat, user(7), pinned_message=pinned_note(chat, secret, user(42))))
    await bot.settle()
    (block,) = await store.blocks([GROUP_KEY])
    assert block.content == "Release on Friday."
    (status,) = await bot.reply_to(message(chat, "/pin shared status", user(42)))
    assert "is not the 'chat-pin' block" in status and "looks like" in status
    assert "Sup3r" not in status
    assert all("Sup3r" not in str(sent.get("text", "")) for sent in fake_telegram.sent(GROUP))


async def test_updates_delivered_again_after_a_restart_are_not_answered_again(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    me, chat = user(42), private_chat(42)
    first = await start_bot()
    assert await first.reply_to(message(chat, "/pin add tone Be brief.", me)) == [
        "Saved strong block 'tone'."
    ]
    await first.reply_to(message(chat, "hello", me))
    await first.settle()
    await first.frontend.stop()
    # The next poller starts at offset 0: the fake hands every update out again, as Telegram
    # does with those it was never told arrived.
    second = await start_bot()
    (listing,) = await second.reply_to(message(chat, "/pin list", me))
    assert "1. tone" in listing
    await second.settle()
    assert len(fake_telegram.sent(42)) == 3  # the two first answers were not sent again
    assert await blocks(store, "telegram:direct:42") == [("tone", "Be brief.", "strong")]
    assert len(await store.history("telegram:direct:42")) == 2  # one turn, recorded once


async def test_a_send_that_timed_out_is_not_sent_again(start_bot: StartBot) -> None:
    from telegram.error import NetworkError, TimedOut

    from bot import metrics

    bot = await start_bot()
    tries: list[str] = []

    async def times_out(part: Any) -> Any:
        tries.append(part[0])
        raise TimedOut("read timed out")

    async def cannot_connect(part: Any) -> Any:
        tries.append(part[0])
        raise NetworkError("no connection in time")

    meters = metrics.enable(version="test", model="m", currency="USD")
    try:
        sender = bot.frontend.sender
        assert await sender._retried(5, ("it may have arrived", ()), times_out) is None
        assert tries == ["it may have arrived"]  # not again: it could show twice
        assert await sender._retried(5, ("nothing went", ()), cannot_connect) is None
        assert tries[1:] == ["nothing went"] * 3  # refused connections are tried again
        lost = meters.registry.get_sample_value(
            "pinbot_replies_lost_total", {"platform": "telegram"}
        )
        assert lost == 2
    finally:
        metrics.disable()


async def test_export_me_is_a_document_to_that_chat_and_forget_me_has_a_button(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    bot = await start_bot(pins={"enable_in_group": True})
    me, chat = user(42), private_chat(42)
    await bot.reply_to(message(chat, "/pin add tone Be brief.", me))
    (refused,) = await bot.reply_to(message(group_chat(GROUP), "/export me", me))
    assert "direct chat" in refused
    fake_telegram.push(message(chat, "/export me", me))
    await bot.settle()
    (sent,) = fake_telegram.called("sendDocument")
    assert sent["chat_id"] == 42 and sent["document"]["filename"].endswith(".json")
    exported = json.loads(sent["document"]["data"])
    assert [b["label"] for b in exported["blocks"]] == ["tone"] and exported["user"] == "42"
    assert "1 pinned block" in sent["caption"]
    (asked,) = await bot.reply_to(message(chat, "/forget me", me))
    assert "1 pinned block" in asked
    posted = fake_telegram.sent(42)[-1]
    (button,) = posted["reply_markup"]["inline_keyboard"][0]
    result = fake_telegram.results("sendMessage")[-1][1]
    fake_telegram.push(tap(chat, me, result, button["callback_data"]))
    await bot.settle()
    assert fake_telegram.called("answerCallbackQuery")[-1]["text"] == "Forgotten."
    edited = fake_telegram.called("editMessageText")[-1]
    assert edited["text"].startswith("Done: I removed everything") and "reply_markup" not in edited
    assert await store.blocks(["telegram:direct:42"]) == []
    assert await store.history("telegram:direct:42") == []


@pytest.mark.usefixtures("ptb_retries_at_once")
async def test_polling_that_recovers_logs_that_it_did(
    start_bot: StartBot, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Monotonic()
    bot = await start_bot(monotonic=clock)
    with caplog.at_level(logging.INFO, logger="bot.adapters.telegram"):
        fake_telegram.fail("getUpdates", 502, "Bad Gateway")
        # The failed poll is retried; the message it then delivers is answered.
        await bot.reply_to(message(private_chat(42), "/pin list", user(42)))
    messages = [record.getMessage() for record in caplog.records]
    failed = [m for m in messages if m.startswith("polling Telegram failed")]
    recovered = [m for m in messages if m.startswith("polling Telegram works again")]
    assert failed and len(recovered) == 1, messages

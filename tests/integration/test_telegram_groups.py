"""Groups that run themselves (issue 49) on Telegram: the real python-telegram-bot Application
against the fake Bot API, whose getChatMember says who is the group's creator, an administrator
or a member. Who may change a group's settings, a shared admin named from the chat (by a reply,
a text mention or an id) who then manages shared blocks, the operator's cap, `/group undo`,
`/group show` naming where each value comes from, a forum topic's own settings, a topic's own
model (its requests reach that llm.models entry's server, the rest of the group the default's);
and two webhook workers on one PostgreSQL, where a setting changed through one applies at the
other's next update."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bot.adapters.telegram import TelegramFrontend
from bot.core.entry.pinbot import Pinbot
from bot.llm.base import ChatModel
from bot.llm.offline import OfflineChatModel
from bot.llm.router import Models
from storage import Store
from tests.conftest import make_config
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import TOKEN, FakeTelegram, group_chat, message, user
from tests.integration import test_group_models, test_workers
from tests.integration.test_group_models import DEFAULT_KEY, FAST_KEY
from tests.integration.test_workers import FIRST, HEADERS, StartCluster, telegram_settings
from tests.workers import WAIT_S

GROUP = -1004949
GROUP_KEY = f"telegram:group:{GROUP}"
OWNER, ADMIN, MEMBER, NO_USERNAME = 1, 2, 42, 43


class Monotonic:
    """The frontend's monotonic clock, moved only by the test (the admin cache's time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Chat:
    """A forum supergroup as its people write in it, and the bot's replies."""

    def __init__(self, server: FakeTelegram) -> None:
        self.server = server
        self.chat = group_chat(GROUP, forum=True)

    def update(
        self, text: str, sender: int, *, topic: int | None = None, **fields: Any
    ) -> dict[str, Any]:
        return message(self.chat, text, user(sender), thread_id=topic, **fields)

    async def says(self, text: str, sender: int, *, topic: int | None = None, **fields: Any) -> str:
        """Push a message and wait for the bot's one reply to it (everything pushed before it
        in this chat is handled by then: one chat's updates go in order)."""
        return await self.reply(self.update(text, sender, topic=topic, **fields))

    async def reply(self, update: dict[str, Any]) -> str:
        self.server.push(update)
        (reply,) = await self.wait_reply(update["message"]["message_id"])
        return str(reply["text"])

    async def wait_reply(self, mid: int) -> list[dict[str, Any]]:
        """The bot's replies to message mid, once there is one (WAIT_S: a safety net)."""

        def replies() -> list[dict[str, Any]]:
            return [
                p
                for p in self.server.sent(GROUP)
                if p.get("reply_parameters", {}).get("message_id") == mid
            ]

        await self.server.wait_for(lambda: bool(replies()), WAIT_S)
        return replies()

    def answered(self, update: dict[str, Any]) -> bool:
        mid = update["message"]["message_id"]
        return any(
            p.get("reply_parameters", {}).get("message_id") == mid for p in self.server.sent(GROUP)
        )


StartBot = Callable[..., Any]
start_cluster = test_workers.start_cluster  # the fixture that starts `pinbot` webhook workers
fast = test_group_models.fast  # the second model server, the llm.models entry "fast"'s


@pytest.fixture
async def start_bot(
    fake_telegram: FakeTelegram, store: Store, clock: FakeClock
) -> AsyncIterator[StartBot]:
    running: list[TelegramFrontend] = []
    models: list[Models] = []

    async def start(
        monotonic: Monotonic, telegram: dict[str, Any] | None = None, **sections: Any
    ) -> TelegramFrontend:
        """The bot on the offline model, or, when the config names an llm.backend, on the
        models the config names (Models.from_config, as at startup; no metrics here)."""
        settings = {"base_url": fake_telegram.base_url, "poll_timeout_s": 1, **(telegram or {})}
        config = make_config(telegram=settings, **sections)
        model: ChatModel | Models = OfflineChatModel()
        if "backend" in sections.get("llm", {}):
            model = Models.from_config(config.llm)
            models.append(model)
        pinbot = Pinbot(config, store, model, clock=clock)

        async def no_sleep(seconds: float) -> None:
            await asyncio.sleep(0)

        frontend = TelegramFrontend(
            pinbot, config.telegram, TOKEN, sleep=no_sleep, monotonic=monotonic
        )
        await frontend.start()
        running.append(frontend)
        return frontend

    yield start
    for frontend in running:
        await frontend.stop()
    for opened in models:
        await opened.close()


def asked_about(server: FakeTelegram, person: int) -> int:
    """How often the bot asked Telegram (getChatMember) about person in the group."""
    return sum(
        1
        for p in server.called("getChatMember")
        if (int(p["chat_id"]), int(p["user_id"])) == (GROUP, person)
    )


async def test_the_owner_turns_pins_on_and_names_shared_admins_who_then_manage_blocks(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    monotonic = Monotonic()
    # pins.inherit_platform_admins is off: Telegram is asked about /group all the same.
    await start_bot(
        monotonic,
        pins={"enable_in_group": False, "inherit_platform_admins": False},
        groups={"max_daily_tokens": 10_000},
        telegram={"admin_cache_ttl_s": 60},
    )
    fake_telegram.owners.add((GROUP, OWNER))
    fake_telegram.admins.add((GROUP, ADMIN))
    chat = Chat(fake_telegram)
    group_menu = fake_telegram.called("setMyCommands")[1]
    assert group_menu["scope"]["type"] == "all_group_chats"
    assert "group" in [command["command"] for command in group_menu["commands"]]

    refused = await chat.says("/group pins on", MEMBER)
    assert refused.startswith("Only this group's owner and admins")
    assert await store.settings_of([GROUP_KEY]) == {}
    assert asked_about(fake_telegram, MEMBER) == 1

    assert "pins for this group: on" in await chat.says("/group pins on", OWNER)
    assert "Only shared admins" in await chat.says("/pin shared add rule Be kind.", MEMBER)

    # The owner names the member a shared admin by replying to one of their messages.
    theirs = chat.update("I can look after the rules", MEMBER)
    fake_telegram.push(theirs)
    added = await chat.says("/group admins add", OWNER, reply_to=theirs["message"])
    assert added.startswith(f"{MEMBER} is now among the admins of this group")
    assert not chat.answered(theirs)  # not addressed to the bot: the trigger is mention
    assert (await chat.says("/pin shared add rule Be kind.", MEMBER)).startswith("Saved")
    assert [(b.label, b.content) for b in await store.blocks([GROUP_KEY])] == [("rule", "Be kind.")]
    # A shared admin named from the chat manages blocks, not the group's settings.
    assert (await chat.says("/group pins off", MEMBER)).startswith("Only this group's owner")

    # Someone without a username, named by a text mention (the entity carries them); the
    # owner's answer from Telegram is still cached.
    mention = {"Ana 🌷": user(NO_USERNAME, "Ana 🌷")}
    by_mention = await chat.says("/group admins add Ana 🌷", OWNER, mentions=mention)
    assert by_mention.startswith(f"Ana 🌷 ({NO_USERNAME}) is now among the admins")
    by_username = await chat.says("/group admins add @ana_rose", OWNER)
    assert by_username.startswith("I cannot tell who @ana_rose is")
    assert "Reply to one of their messages" in by_username and "/whoami" in by_username
    assert "7 is now among the admins" in await chat.says("/group admins add 7", OWNER)
    assert asked_about(fake_telegram, OWNER) == 1

    # An administrator (not the owner) may change settings too; the operator's cap holds.
    over = await chat.says("/group budget daily 20000", ADMIN)
    assert "at most 10,000 tokens here (groups.max_daily_tokens)" in over
    undone = await chat.says("/group undo", OWNER)
    assert undone.startswith("Undone: admins back as before")
    shown = await chat.says("/group show", MEMBER)
    assert "Settings for this group" in shown
    assert "- pins: on (from the group)" in shown
    assert f"- admins: {MEMBER}, {NO_USERNAME} (from the group), and from the config" in shown
    assert "- budget_daily: no budget (from the config)" in shown
    assert (await chat.says("/pin shared add tone Warm.", NO_USERNAME)).startswith("Saved")
    assert "Only shared admins" in await chat.says("/pin shared add x y", 7)

    # Telegram is asked again once the cached answer is older than telegram.admin_cache_ttl_s.
    monotonic.now += 61
    fake_telegram.owners.clear()  # the group changed hands meanwhile
    assert (await chat.says("/group pins off", OWNER)).startswith("Only this group's owner")
    assert asked_about(fake_telegram, OWNER) == 2


async def test_a_forum_topics_trigger_and_pins_apply_in_that_topic_only(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    await start_bot(Monotonic(), pins={"enable_in_group": True})
    fake_telegram.owners.add((GROUP, OWNER))
    chat = Chat(fake_telegram)
    busy, quiet = 77, 88

    assert "trigger for this topic: all" in await chat.says("/group trigger all", OWNER, topic=busy)
    reply = await chat.says("anyone around?", MEMBER, topic=busy)
    assert reply.endswith("You said: anyone around?")
    elsewhere = [chat.update("anyone?", MEMBER), chat.update("anyone?", MEMBER, topic=quiet)]
    for update in elsewhere:
        fake_telegram.push(update)
    shown = await chat.says("/group show", MEMBER)  # answered after both: they are handled
    assert not any(chat.answered(update) for update in elsewhere)
    assert "- trigger: mention (telegram.group_trigger) (from the config)" in shown
    in_topic = await chat.says("/group show", MEMBER, topic=busy)
    assert "Settings for this topic" in in_topic and "- trigger: all (from the topic)" in in_topic

    assert "pins for this topic: off" in await chat.says("/group pins off", OWNER, topic=quiet)
    assert "disabled in groups" in await chat.says("/pin add a b", MEMBER, topic=quiet)
    saved = await chat.says("/pin add note mine", MEMBER, topic=busy)
    assert saved.startswith("Saved")
    assert (await chat.says("/pin add other too", MEMBER)).startswith("Saved")
    assert await store.settings_of([GROUP_KEY]) == {}  # the group itself set nothing


async def test_a_topic_set_to_another_model_sends_its_requests_there_and_the_rest_to_the_default(
    start_bot: StartBot,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    fast: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(DEFAULT_KEY, "sk-default")
    monkeypatch.setenv(FAST_KEY, "sk-fast")
    await start_bot(Monotonic(), **test_group_models.sections(fake_openai, fast))
    fake_telegram.owners.add((GROUP, OWNER))
    chat = Chat(fake_telegram)
    topic, other = 5, 6

    refused = await chat.says("/group model fast", MEMBER, topic=topic)
    assert refused.startswith("Only this group's owner and admins")
    assert "model for this topic: fast" in await chat.says("/group model fast", OWNER, topic=topic)
    assert not fake_openai.requests and not fast.requests  # commands ask no model

    asked = chat.update("@pin_bot hello from the topic", MEMBER, topic=topic)
    assert await chat.reply(asked) == "reply 1"
    assert [r["model"] for r in fast.requests] == ["fast-1"]
    assert fast.headers[-1]["Authorization"] == "Bearer sk-fast"
    assert fast.messages(-1)[-1]["content"] == "hello from the topic"
    assert not fake_openai.requests

    in_group = chat.update("@pin_bot hello from the group", MEMBER)
    assert await chat.reply(in_group) == "reply 1"
    in_other = chat.update("@pin_bot hello from another topic", MEMBER, topic=other)
    assert await chat.reply(in_other) == "reply 2"
    assert [r["model"] for r in fake_openai.requests] == ["fake-model", "fake-model"]
    assert [m[-1]["content"] for m in map(fake_openai.messages, (0, 1))] == [
        "hello from the group",
        "hello from another topic",
    ]
    assert len(fast.requests) == 1  # nothing but the topic's went to the entry's server

    # Each answer went to the topic (or the general chat) its question was asked in.
    def thread_of(update: dict[str, Any]) -> int | None:
        (reply,) = [
            p
            for p in fake_telegram.sent(GROUP)
            if p.get("reply_parameters", {}).get("message_id") == update["message"]["message_id"]
        ]
        return reply.get("message_thread_id")

    assert [thread_of(u) for u in (asked, in_group, in_other)] == [topic, None, other]


@FIRST
async def test_a_setting_changed_through_one_worker_applies_at_the_others_next_update(
    start_cluster: StartCluster, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    cluster = await start_cluster("telegram", 2, telegram=telegram_settings(fake_telegram))
    fake_telegram.owners.add((GROUP, OWNER))
    chat = Chat(fake_telegram)
    ids = iter(range(1, 100))

    async def post(worker: int, update: dict[str, Any]) -> None:
        update = {"update_id": next(ids), **update}
        assert await cluster.post_to(worker, update, HEADERS) == 200

    # Worker B reads the group's settings: none yet, and a plain message is not answered.
    plain = chat.update("is anyone here?", MEMBER)
    await post(1, plain)
    shown = chat.update("/group show", MEMBER)
    await post(1, shown)
    (reply,) = await chat.wait_reply(shown["message"]["message_id"])
    assert "- trigger: mention (telegram.group_trigger) (from the config)" in reply["text"]
    assert not chat.answered(plain)

    command = chat.update("/group trigger all", OWNER)
    await post(0, command)
    (done,) = await chat.wait_reply(command["message"]["message_id"])
    assert done["text"].startswith("trigger for this group: all"), cluster.logs()
    # Worker A stops (its chats left to the others), so worker B surely takes the next update.
    assert await cluster.workers[0].stop() == 0
    after = chat.update("is anyone here now?", MEMBER)
    await post(1, after)
    (reply,) = await chat.wait_reply(after["message"]["message_id"])
    assert reply["text"] == "echo is anyone here now?", cluster.logs()
    assert len(fake_openai.requests) == 1

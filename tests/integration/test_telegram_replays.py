"""Issue 50, item 9, through the fake Bot API and the inbox: a replayed run of old pin updates
changes nothing (and unpinning only the newest of several pinned messages keeps the block), an
update processed again after a crash posts its proposal once, a proposal's multi-line content
reads as one quoted block, and a proposal message that cannot be edited any more fails neither
the approval nor the approver's answer."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.adapters.telegram import TelegramFrontend
from bot.core.entry.pinbot import Pinbot
from bot.llm.offline import OfflineChatModel
from bot.llm.openai_backend import OpenAIChatModel
from storage import Store
from tests.conftest import TEST_KEY_ENV, agent_llm, make_config
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.fakes.telegram_server import (
    TOKEN,
    FakeTelegram,
    group_chat,
    message,
    service,
    tap,
    user,
)
from tests.forked import Forks

GROUP = -1005050
GROUP_KEY = f"telegram:group:{GROUP}"
ADMIN_PINS = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}


class Bot:
    """A running TelegramFrontend on the fake Bot API."""

    def __init__(self, server: FakeTelegram, frontend: TelegramFrontend, store: Store) -> None:
        self.server, self.frontend, self.store = server, frontend, store

    async def settle(self) -> None:
        """Every pushed update fetched and handled."""
        last = self.server.updates[-1]["update_id"] if self.server.updates else 0
        await self.server.wait_for(lambda: self.server.confirmed >= last)
        await self.frontend.inbox.idle()

    async def ask(self, text: str, sender: int) -> str:
        """Say text in the group; the bot's reply to it."""
        update = self.server.push(message(group_chat(GROUP), text, user(sender)))
        mid = update["message"]["message_id"]

        def replies() -> list[dict[str, Any]]:
            return [
                p
                for p in self.server.sent(GROUP)
                if p.get("reply_parameters", {}).get("message_id") == mid
            ]

        await self.server.wait_for(lambda: bool(replies()))
        return str(replies()[0]["text"])


StartBot = Callable[..., Any]


@pytest.fixture
async def start_bot(
    fake_telegram: FakeTelegram, store: Store, clock: FakeClock
) -> AsyncIterator[StartBot]:
    running: list[tuple[TelegramFrontend, Any]] = []

    async def start(
        model: Any = None, *, telegram: dict[str, Any] | None = None, **sections: Any
    ) -> Bot:
        settings = {"base_url": fake_telegram.base_url, "poll_timeout_s": 1, **(telegram or {})}
        config = make_config(telegram=settings, **sections)
        if model is None:
            llm = OpenAIChatModel.from_config(config.llm) if "llm" in sections else None
            model = llm or OfflineChatModel()
        pinbot = Pinbot(config, store, model, clock=clock)

        async def no_sleep(seconds: float) -> None:
            await asyncio.sleep(0)

        frontend = TelegramFrontend(pinbot, config.telegram, TOKEN, sleep=no_sleep)
        await frontend.start()
        running.append((frontend, model))
        return Bot(fake_telegram, frontend, store)

    yield start
    for frontend, model in running:
        await frontend.stop()
        await model.close()


def proposing(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, *proposals: dict[str, Any]
) -> dict[str, Any]:
    """The llm settings of the real OpenAI client against the fake server, scripted to propose
    each of proposals (one turn each) and then answer."""
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test-secret")
    server.script = []
    for proposal in proposals:
        server.script += [tool_calls(("pin_propose", proposal)), completion("Proposed.")]
    return agent_llm(server.base_url)


def cards(server: FakeTelegram) -> list[tuple[dict[str, Any], Any]]:
    """(params, result) of each message sent to the group with buttons."""
    return [(p, r) for p, r in server.results("sendMessage") if "reply_markup" in p]


# --- 1. replayed pin updates -------------------------------------------------------------------


def pinning(by: int, text: str, message_id: int, date: int) -> dict[str, Any]:
    """The service message of `by` pinning the group's message message_id, sent at date."""
    chat = group_chat(GROUP)
    pinned = {"message_id": message_id, "date": date, "chat": chat, "from": user(42), "text": text}
    return service(chat, user(by), pinned_message=pinned)


def replayed(update: dict[str, Any]) -> dict[str, Any]:
    """An update delivered again with a new update_id: to the inbox a new update."""
    return {key: value for key, value in update.items() if key != "update_id"}


async def test_replayed_pins_change_nothing_and_the_newest_unpinned_keeps_the_block(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store, clock: FakeClock
) -> None:
    """Friday's message then Monday's pinned: the block is Monday's. Telegram replays both
    pins (after a crash, with new update ids): nothing changes, no version is added. Monday's,
    the newest of the two pinned, unpinned: getChat names Friday's, still pinned, and the block
    stays. Friday's pinned again is newer than any pin before, though its message is older: it
    is taken; the old run replayed once more changes nothing; all unpinned idles the block."""
    bot = await start_bot(telegram={"sync_pinned_message": True}, pins=ADMIN_PINS)
    friday, monday = "Release on Friday.", "Release moved to Monday."

    async def chat_pin() -> tuple[str, str, int]:
        (block,) = await store.blocks([GROUP_KEY])
        return block.state.value, block.content, len(await store.versions(GROUP_KEY, "chat-pin"))

    async def check_pinned() -> None:
        clock.advance(seconds=600)
        asked = len(fake_telegram.called("getChat"))
        assert "telegram pinned messages" in await bot.frontend.pinbot.jobs.run_due()
        assert len(fake_telegram.called("getChat")) == asked + 1

    run = [
        fake_telegram.push(fake_telegram.pin_message(pinning(7, friday, 501, 1767225600))),
        fake_telegram.push(fake_telegram.pin_message(pinning(7, monday, 502, 1767225660))),
    ]
    await bot.settle()
    assert await chat_pin() == ("active", monday, 2)
    for update in run:
        fake_telegram.push(replayed(update))
    await bot.settle()
    assert await chat_pin() == ("active", monday, 2)
    status = await bot.ask("/pin shared status", 42)
    assert "Note:" not in status  # what the bot keeps of the pins is not said
    # Only the newest unpinned: Friday's stands pinned, and the block stays as it is.
    fake_telegram.unpin_message(GROUP, 502)
    await check_pinned()
    assert fake_telegram.results("getChat")[-1][1]["pinned_message"]["message_id"] == 501
    assert await chat_pin() == ("active", monday, 2)
    # Friday's pinned again: a new pin (announced now), of an older message.
    fake_telegram.push(fake_telegram.pin_message(pinning(7, friday, 501, 1767225600)))
    await bot.settle()
    assert await chat_pin() == ("active", friday, 3)
    for update in run:
        fake_telegram.push(replayed(update))
    await bot.settle()
    assert await chat_pin() == ("active", friday, 3)
    fake_telegram.unpin_message(GROUP)  # all of them
    await check_pinned()
    assert await chat_pin() == ("idle", friday, 4)


# --- 2. an update processed again -------------------------------------------------------------


async def test_an_update_processed_again_after_a_crash_posts_its_proposal_once(
    tmp_path: Path,
    forks: Forks,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`pinbot telegram` is killed (SIGKILL) after the model's proposal was posted and before
    its message was marked done; the next process takes the message up again and the model
    proposes again: the proposal is found again (the model told its number), not posted a
    second time, and the message gets one answer."""
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test-secret")
    proposal = {"label": "deadline", "content": "Release on Friday."}
    fake_openai.script = [
        tool_calls(("pin_propose", proposal)),
        completion("never seen: the process dies as it asks"),
        tool_calls(("pin_propose", proposal)),
        completion("Proposed."),
    ]
    settings = {
        "storage": {"path": str(tmp_path / "pins.sqlite3"), "takeover_check_s": 0.1},
        "llm": agent_llm(fake_openai.base_url),
        "pins": ADMIN_PINS,
        "telegram": {"base_url": fake_telegram.base_url, "poll_timeout_s": 1},
        "limits": {"pin_commands_per_minute": 0, "model_turns_per_minute": 0},
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    args = ("telegram", "--config", str(config))
    env = {"TELEGRAM_BOT_TOKEN": TOKEN, TEST_KEY_ENV: "sk-test-secret"}
    first = await forks.fork(*args, env=env)

    # Killed as the model is asked again with the tool's result: the proposal is posted then.
    def kill_on_the_second_request() -> None:
        if len(fake_openai.requests) == 2:
            forks.kill(first)

    fake_openai.on_request = kill_on_the_second_request
    fake_telegram.push(message(group_chat(GROUP), "@pin_bot keep the deadline", user(42)))
    assert await forks.ended(first) == -signal.SIGKILL, "\n".join(forks.log)
    assert len(cards(fake_telegram)) == 1 and not fake_telegram.sent(GROUP)[1:]
    fake_openai.on_request = None
    await forks.fork(*args, env=env)

    def texts() -> list[str]:
        return [p["text"] for p in fake_telegram.sent(GROUP)]

    await fake_telegram.wait_for(lambda: "Proposed." in texts(), 60)
    assert len(fake_openai.requests) == 4  # the message's turn asked again, whole
    told = fake_openai.requests[3]["messages"][-1]
    assert told["role"] == "tool" and told["content"].startswith("Proposal #1 is posted")
    fake_telegram.push(message(group_chat(GROUP), "/pin shared proposals", user(42)))
    await fake_telegram.wait_for(lambda: len(texts()) == 3, 60)
    assert texts()[1] == "Proposed."
    assert texts()[2].startswith("Pending proposals (1):\n#1 add 'deadline'"), texts()
    assert len(cards(fake_telegram)) == 1


# --- 4. a failed edit of a decided proposal's message -------------------------------------------

EDIT_FAILURES = [
    "Bad Request: message to edit not found",
    "Bad Request: message can't be edited",  # too old (48 hours), as Telegram says it
]


def refuse_edits(server: FakeTelegram, description: str) -> None:
    """Telegram refuses every edit (formatted, then plain) until the next call of this."""
    server.failures.pop("editMessageText", None)
    for _ in range(4):
        server.fail("editMessageText", 400, description)


@pytest.mark.parametrize("failure", EDIT_FAILURES)
async def test_an_approval_stands_and_is_told_when_its_message_cannot_be_edited(
    start_bot: StartBot,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    """The proposal message is gone or too old: a shared admin's tap on Approve saves the
    block, answers the tap, and (its message unable to show the outcome) answers it with a
    reply; `/pin shared approve` answers as always. The failed edits are logged."""
    caplog.set_level(logging.INFO)
    proposals = [
        {"label": "deadline", "content": "Friday."},
        {"label": "venue", "content": "Hall B."},
        {"label": "room", "content": "B2."},
    ]
    bot = await start_bot(pins=ADMIN_PINS, llm=proposing(fake_openai, monkeypatch, *proposals))
    assert await bot.ask("@pin_bot keep the deadline", 42) == "Proposed."
    assert await bot.ask("@pin_bot and the venue", 42) == "Proposed."
    assert await bot.ask("@pin_bot and the room", 42) == "Proposed."
    (params, result), _, (room, room_result) = cards(fake_telegram)
    # By a tap: the approval stands, and its outcome comes as a reply to the message tapped.
    refuse_edits(fake_telegram, failure)
    shown = {"message_id": result["message_id"], "text": params["text"]}
    fake_telegram.push(tap(group_chat(GROUP), user(7), shown, "pinbot:proposal:approve:1"))
    await bot.settle()
    assert [(b.label, b.content) for b in await store.blocks([GROUP_KEY])] == [
        ("deadline", "Friday.")
    ]
    (answer,) = fake_telegram.called("answerCallbackQuery")
    assert answer["text"] == "Approving proposal #1…"
    told = [p for p in fake_telegram.sent(GROUP) if p.get("reply_parameters")]
    assert told[-1]["reply_parameters"]["message_id"] == result["message_id"]
    assert told[-1]["text"] == "Approved proposal #1. Saved context block 'deadline'."
    assert fake_telegram.called("editMessageText") == []  # every edit was refused
    # By the command: saved, and answered as always.
    refuse_edits(fake_telegram, failure)
    reply = await bot.ask("/pin shared approve 2", 7)
    assert reply == "Approved proposal #2. Saved context block 'venue'."
    assert len(await store.blocks([GROUP_KEY])) == 2
    logged = [r.getMessage() for r in caplog.records]
    assert logged.count("could not update the message of proposal #1") == 1
    assert logged.count("could not update the message of proposal #2") == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # A message that shows its outcome already is no failure: no reply besides it.
    refuse_edits(fake_telegram, "Bad Request: message is not modified")
    sent_before = len(fake_telegram.sent(GROUP))
    shown = {"message_id": room_result["message_id"], "text": room["text"]}
    fake_telegram.push(tap(group_chat(GROUP), user(7), shown, "pinbot:proposal:approve:3"))
    await bot.settle()
    assert len(await store.blocks([GROUP_KEY])) == 3
    assert len(fake_telegram.sent(GROUP)) == sent_before
    assert "could not update the message of proposal #3" not in [
        r.getMessage() for r in caplog.records
    ]


# --- 3. a proposal's multi-line content ---------------------------------------------------------


def quoted(params: dict[str, Any]) -> list[str]:
    """The parts of a sent or edited message's text under a blockquote entity."""
    units = params["text"].encode("utf-16-le")
    return [
        units[2 * e["offset"] : 2 * (e["offset"] + e["length"])].decode("utf-16-le")
        for e in params.get("entities", [])
        if e["type"] == "blockquote"
    ]


async def test_a_proposals_multi_line_content_reads_as_one_quoted_block(
    start_bot: StartBot,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Content of several lines, one of them made to look like the card's own last line, is
    one blockquote of the card, before and after the decision: its lines read as the content.
    A replacement quotes the content now and the one proposed. Offsets count UTF-16 units (the
    emoji takes two)."""
    content = "Release on Friday 🚀\nShared admins decide: approve 9.\n  - no deploys after 4 pm"
    reason = "agreed today"  # one line: a reason may hold no line break
    replacement = "Release on Monday.\nFreeze from Friday."
    llm = proposing(
        fake_openai,
        monkeypatch,
        {"label": "deadline", "content": content, "reason": reason},
        {"label": "deadline", "content": replacement},
    )
    bot = await start_bot(pins=ADMIN_PINS, llm=llm)
    assert await bot.ask("@pin_bot keep the deadline 🚀", 42) == "Proposed."
    ((card, _),) = cards(fake_telegram)
    assert quoted(card) == [content]
    assert f"\n{content}\nReason: {reason}\n" in card["text"]
    assert card["text"].startswith("Proposal #1 for this group's shared blocks:\nNew block")
    assert card["text"].endswith(
        "\nShared admins decide: the buttons below, or /pin shared approve 1 / reject 1."
    )
    assert await bot.ask("/pin shared approve 1", 7) == (
        "Approved proposal #1. Saved context block 'deadline'."
    )
    (edit,) = fake_telegram.called("editMessageText")
    assert quoted(edit) == [content] and edit["text"].endswith("Approved by 7: saved.")
    assert (await store.blocks([GROUP_KEY]))[0].content == content
    # Replacing it: the content now and the content proposed, each one quoted block.
    assert await bot.ask("@pin_bot move it", 42) == "Proposed."
    _, (card, _) = cards(fake_telegram)
    assert quoted(card) == [content, replacement]
    assert "\nNow:\n" in card["text"] and "\nProposed:\n" in card["text"]
    # The listing keeps each proposal on its line, as before.
    listed = await bot.ask("/pin shared proposals", 42)
    assert listed.startswith("Pending proposals (1):\n#2 replace 'deadline': ")


# --- the update recorded as Telegram sent it ----------------------------------------------------


async def test_a_polled_update_is_recorded_as_telegram_sent_it(
    start_bot: StartBot, fake_telegram: FakeTelegram, store: Store
) -> None:
    """The inbox keeps a polled update's JSON as the Bot API gave it (fields python-telegram-bot
    does not know included), not rebuilt from python-telegram-bot's objects; processed again
    from that record, it is the same update."""
    bot = await start_bot(pins=ADMIN_PINS)
    sent = message(group_chat(GROUP), "/pin shared add tone Be brief.", user(7))
    sent["message"]["a_field_of_a_later_bot_api"] = {"nested": [1, "ü"]}
    update = fake_telegram.push(sent)
    await bot.settle()
    (payload,) = [
        row[0]
        for row in await store._db.fetch("SELECT payload FROM inbox")
        if json.loads(row[0])["update_id"] == update["update_id"]
    ]
    assert json.loads(payload) == update
    again = bot.frontend._update_of(payload)  # what a restart rebuilds
    assert again.update_id == update["update_id"] and again.effective_message is not None
    assert again.effective_message.text == "/pin shared add tone Be brief."
    assert [b.label for b in await store.blocks([GROUP_KEY])] == ["tone"]

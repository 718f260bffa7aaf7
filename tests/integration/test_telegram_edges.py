"""Issue 36 through `pinbot telegram` (its main in this process; a real process for the
webhook's answers), fed by the fake Bot API by polling and by its webhook: the chat's pinned
message followed whatever its history (finding 2), and every button tap answered whatever its
data, forged data changing nothing (finding 5)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.conftest import TEST_KEY_ENV, agent_llm
from tests.fakes.http import free_port
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.fakes.telegram_server import TOKEN, FakeTelegram, group_chat, message, service, tap, user
from tests.process import PINBOT, serving_here

GROUP = -1003636
SECRET = "hook-s3cret"
WAIT_S = 20  # a safety net for a hung process, not a pause
UPDATE_IDS = itertools.count(1)  # the webhook's update ids, across the runs of a test
ADMIN_PINS = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}


class Front:
    """A running `pinbot telegram` as Telegram reaches it: updates queued for getUpdates
    (polling), or posted to its webhook with the secret token."""

    def __init__(self, server: FakeTelegram, hook: str | None) -> None:
        self.server = server
        self.hook = hook
        self.statuses: list[int] = []  # what the webhook answered each post

    async def post(self, update: dict[str, Any]) -> dict[str, Any]:
        """Deliver an update (with its update_id) the way the bot's mode receives it."""
        if self.hook is None:
            return self.server.push(update)
        update = {"update_id": next(UPDATE_IDS), **update}
        headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.hook, json=update, headers=headers) as response,
        ):
            self.statuses.append(response.status)
        return update

    async def deliver_again(self, update: dict[str, Any]) -> None:
        """Deliver an update once more, as Telegram does when it is not sure it arrived (to a
        poller it comes as the bot's processing sees it again after a crash: with a new place
        in the queue)."""
        if self.hook is None:
            self.server.push({k: v for k, v in update.items() if k != "update_id"})
            return
        headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.hook, json=update, headers=headers) as response,
        ):
            self.statuses.append(response.status)

    async def ask(self, text: str, sender: int) -> str:
        """Say text in the group and wait for the bot's reply to it: everything delivered
        before it in this chat is handled by then (one chat's updates go in order)."""
        update = await self.post(message(group_chat(GROUP), text, user(sender)))
        mid = update["message"]["message_id"]

        def replies() -> list[dict[str, Any]]:
            return [
                p
                for p in self.server.sent(GROUP)
                if p.get("reply_parameters", {}).get("message_id") == mid
            ]

        await self.server.wait_for(lambda: bool(replies()), WAIT_S)
        return str(replies()[0]["text"])


@contextlib.asynccontextmanager
async def running_bot(
    tmp_path: Path,
    server: FakeTelegram,
    mode: str,
    settings: dict[str, Any],
    *,
    process: bool = False,
) -> AsyncIterator[tuple[Front, list[str]]]:
    """Run `pinbot telegram --config …` (polling or webhook) on a SQLite file in tmp_path (kept
    across runs) until the block ends, then stop it with SIGTERM; the list gets its stderr.
    Its main runs in this process (serving_here) unless process."""
    telegram: dict[str, Any] = {"base_url": server.base_url + "/", "poll_timeout_s": 1}
    hook = None
    if mode == "webhook":
        port = free_port()
        hook = f"http://127.0.0.1:{port}/hook"
        telegram |= {
            "mode": "webhook",
            "webhook_port": port,
            "webhook_path": "hook",
            "webhook_url": "https://bot.example.test/hook",
        }
    document: dict[str, Any] = {
        "storage": {"path": str(tmp_path / "tg.sqlite3"), "takeover_check_s": 0.2},
        "limits": {"pin_commands_per_minute": 0, "model_turns_per_minute": 0},
        **settings,
    }
    document["telegram"] = telegram | settings.get("telegram", {})
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(document))
    ready = "setWebhook" if hook else "setMyCommands"
    before = len(server.called(ready))
    env = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_WEBHOOK_SECRET": SECRET}
    if not process:
        async with serving_here("telegram", "--config", str(config), env=env) as err:
            await server.wait_for(lambda: len(server.called(ready)) > before, WAIT_S)
            yield Front(server, hook), err
        return
    started = await asyncio.create_subprocess_exec(
        PINBOT,
        "telegram",
        "--config",
        str(config),
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
    )
    err = []
    try:
        await server.wait_for(lambda: len(server.called(ready)) > before, WAIT_S)
        yield Front(server, hook), err
        started.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(started.communicate(), WAIT_S)
        err.append(stderr.decode())
        assert started.returncode == 0, err[0]
    finally:
        if started.returncode is None:
            started.kill()
            await started.wait()


MODES = pytest.mark.parametrize("mode", ["polling", "webhook"])


def pin(by: int, text: str, message_id: int) -> dict[str, Any]:
    """The service message of `by` pinning the group's message message_id (text by user 42)."""
    chat = group_chat(GROUP)
    pinned = {
        "message_id": message_id,
        "date": 1767225600,
        "chat": chat,
        "from": user(42),
        "text": text,
    }
    return service(chat, user(by), pinned_message=pinned)


async def chat_pin(bot: Front) -> tuple[str, str] | None:
    """(state, content) of the group's chat-pin block, as `/pin shared list` shows it."""
    listed = await bot.ask("/pin shared list", 42)
    found = re.search(r"^1\. chat-pin \(context, (\w+)\)\n(.*)$", listed, flags=re.MULTILINE)
    return (found[1], found[2]) if found else None


def versions(history: str) -> int:
    """How many versions a /pin history reply lists."""
    return len(re.findall(r"^[0-9]+\.", history, flags=re.MULTILINE))


@MODES
async def test_a_message_pinned_again_becomes_the_block_again(
    tmp_path: Path, fake_telegram: FakeTelegram, mode: str
) -> None:
    """Finding 2: pin M1, M2, M1 again: the block is M1; everything unpinned (the block idles),
    then M1 pinned again: the block is M1 and active. A repeated delivery changes nothing."""
    settings = {"pins": ADMIN_PINS, "telegram": {"sync_pinned_message": True}}
    m1, m2 = "Release on Friday.", "Release moved to Monday."

    async def pin_in_chat(bot: Front, text: str, message_id: int) -> dict[str, Any]:
        # Telegram's getChat names the message pinned last: the periodic check, which may run
        # at any moment on a busy machine, must see what the pins posted say.
        update = pin(7, text, message_id)
        fake_telegram.pinned[GROUP] = update["message"]["pinned_message"]
        return await bot.post(update)

    async with running_bot(tmp_path, fake_telegram, mode, settings) as (bot, err):
        first = await pin_in_chat(bot, m1, 501)
        assert await chat_pin(bot) == ("active", m1)
        await pin_in_chat(bot, m2, 502)
        assert await chat_pin(bot) == ("active", m2)
        await pin_in_chat(bot, m1, 501)
        assert await chat_pin(bot) == ("active", m1)
        await pin_in_chat(bot, m2, 502)
        assert await chat_pin(bot) == ("active", m2)
        assert (
            versions(await bot.ask("/pin shared history chat-pin", 42)) == 5
        )  # 4 pins, and no block before
    fake_telegram.pinned[GROUP] = None  # everything unpinned: Telegram sends no update for it
    fake_telegram.updates.clear()  # confirmed by the stopped poller: Telegram forgets them
    # Started again, the bot asks getChat at once: no pinned message, so the block idles.
    async with running_bot(tmp_path, fake_telegram, mode, settings) as (bot, err):
        await fake_telegram.wait_for(lambda: bool(fake_telegram.called("getChat")), WAIT_S)
        for _ in range(50):  # the job's write follows getChat's answer
            if (shown := await chat_pin(bot)) != ("active", m2):
                break
        assert shown == ("idle", m2)
        fake_telegram.pinned[GROUP] = pin(7, m1, 501)["message"]["pinned_message"]
        await bot.post(pin(7, m1, 501))
        assert await chat_pin(bot) == ("active", m1)
        # The same message pinned once more, and a repeated delivery: nothing changes.
        await bot.post(pin(7, m1, 501))
        await bot.deliver_again(first)
        assert await chat_pin(bot) == ("active", m1)
        history = await bot.ask("/pin shared history chat-pin", 42)
        assert versions(history) == 7, history  # + idle, + M1
    assert "Traceback" not in err[0] and " ERROR " not in err[0], err[0]
    assert set(bot.statuses) <= {200}


FORGED = [
    "pinbot:proposal:approve:²",  # a digit to str.isdigit that int() refuses
    "pinbot:proposal:approve:١",  # an Arabic-Indic one: int() reads it as 1
    "pinbot:proposal:approve:1:1",
    "pinbot:proposal:approve:" + "9" * 40,
    "pinbot:proposal:approve:-1",
    "pinbot:proposal:maybe:1",
    "something else",
    "",
]
STALE = ["pinbot:proposal:reject:7", "pinbot:proposal:approve:999999999"]  # no such proposal


@MODES
async def test_every_tap_is_answered_and_forged_data_changes_nothing(
    tmp_path: Path,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """Finding 5: a shared admin's taps with forged or stale data on a pending proposal's
    message are each answered once, the webhook acknowledges each (200), nothing changes and
    nothing fails in the log; a real tap then still works."""
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test-secret")
    fake_openai.script = [
        tool_calls(("pin_propose", {"label": "deadline", "content": "Release on Friday."})),
        completion("Proposed."),
    ]
    settings = {"pins": ADMIN_PINS, "llm": agent_llm(fake_openai.base_url)}
    chat = group_chat(GROUP)
    async with running_bot(tmp_path, fake_telegram, mode, settings) as (bot, err):
        assert await bot.ask("@pin_bot keep the deadline", 42) == "Proposed."
        ((params, result),) = [
            (p, r) for p, r in fake_telegram.results("sendMessage") if "reply_markup" in p
        ]
        shown = {"message_id": result["message_id"], "text": params["text"]}
        taps = [await bot.post(tap(chat, user(7), shown, data)) for data in FORGED + STALE]
        asked = [t["callback_query"]["id"] for t in taps]

        def answered() -> list[str]:
            return [
                str(a["callback_query_id"]) for a in fake_telegram.called("answerCallbackQuery")
            ]

        await fake_telegram.wait_for(lambda: len(answered()) >= len(asked), WAIT_S)
        assert sorted(answered()) == sorted(asked)  # each once
        notices = {
            a["callback_query_id"]: a["text"] for a in fake_telegram.called("answerCallbackQuery")
        }
        assert {notices[q] for q in asked[: len(FORGED)]} == {"This button does nothing any more."}
        listed = await bot.ask("/pin shared proposals", 42)
        assert "Pending proposals (1):" in listed and "#1 add 'deadline'" in listed
        assert "no shared blocks" in await bot.ask("/pin shared list", 42)
        assert fake_telegram.called("editMessageText") == []
        # The real button still works.
        await bot.post(tap(chat, user(7), shown, "pinbot:proposal:approve:1"))
        await fake_telegram.wait_for(lambda: bool(fake_telegram.called("editMessageText")), WAIT_S)
        assert "Release on Friday." in await bot.ask("/pin shared list", 42)
    assert fake_telegram.called("answerCallbackQuery")[-1]["text"] == "Approving proposal #1…"
    for sign in ("ValueError", "never awaited", "Traceback", " ERROR "):
        assert sign not in err[0], err[0]
    assert bot.statuses == ([200] * (len(taps) + 5) if mode == "webhook" else [])


async def test_the_webhook_acknowledges_an_update_it_cannot_handle(
    tmp_path: Path, fake_telegram: FakeTelegram
) -> None:
    """A recorded update that cannot be read (a callback query without its sender) is
    acknowledged with 200 and logged, never 500 (Telegram would deliver it again and again);
    a body that is no update at all is 400; the bot goes on answering."""
    async with running_bot(tmp_path, fake_telegram, "webhook", {}, process=True) as (bot, err):
        await bot.post({"callback_query": {"id": "broken", "data": "pinbot:proposal:approve:1"}})
        assert bot.statuses == [200]
        assert bot.hook is not None
        headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
        async with aiohttp.ClientSession() as session:
            for body in ({"update_id": "1"}, {"update_id": -1}, [1], {"update_id": 2**70}):
                async with session.post(bot.hook, json=body, headers=headers) as response:
                    assert response.status == 400, body
            # Read as the UTF-8 Telegram sends, whatever the header says: never a 500.
            for raw, kind, status in (
                (b'{"update_id": 5, "x": "\xff"}', "application/json", 400),  # not UTF-8
                (b'{"update_id": 6}', "application/json; charset=nope-8", 200),
            ):
                typed = {**headers, "Content-Type": kind}
                async with session.post(bot.hook, data=raw, headers=typed) as response:
                    assert response.status == status, (raw, kind)
        assert await bot.ask("/pin shared list", 42)
    assert "answering the button tap of update" in err[0]

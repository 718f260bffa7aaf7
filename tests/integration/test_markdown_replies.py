"""Issue 26's examples through the real `pinbot telegram` process: a fake OpenAI-compatible model
answers each question with one of the replies that lost characters (or sent nothing) before,
and the fake Bot API records what the bot sends. One process serves every test here."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from tests.fakes.openai_server import FakeOpenAI, completion
from tests.fakes.telegram_server import TOKEN, FakeTelegram, message, private_chat, user

# One bot process serves the module's tests: on one parallel worker, it is started once.
pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("markdown-replies")]

ANSWERS = {  # the model's answer to each question
    "compare": "if a<b and c>d then swap",
    "generics": "The type is List<String>.",
    "tag": "Wrap it in a <div> element.",
    "empty fence": "``````",
    "comment": "<!-- hidden -->",
    "empty link": "[](http://x)",
    "schemes": "[run](javascript:alert(1)) or [ping](tg://user?id=42), [docs](https://example.org)",
    "entities": "Write `&amp;` as &amp; and \\<b> as <b>.",
    "code": "Use `a < b` here:\n```java\nList<String> xs = new ArrayList<>();\n```\n<!-- end -->",
}


class Bot:
    """The running process and its fakes; ask() sends a question from a chat of its own."""

    def __init__(self, telegram: FakeTelegram) -> None:
        self.telegram = telegram
        self.chats = iter(range(100, 200))

    async def ask(self, question: str) -> list[dict[str, Any]]:
        chat = next(self.chats)
        self.telegram.push(message(private_chat(chat), question, user(chat)))
        await self.telegram.wait_for(lambda: bool(self.telegram.sent(chat)), 20)
        return self.telegram.sent(chat)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def bot(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Bot]:
    telegram, model = await FakeTelegram().start(), await FakeOpenAI().start()
    model.respond = lambda body: completion(ANSWERS[body["messages"][-1]["content"]])
    folder = tmp_path_factory.mktemp("markdown")
    config = folder / "config.yaml"
    settings = {
        "storage": {"path": str(folder / "pins.sqlite3")},
        "telegram": {"base_url": telegram.base_url + "/", "poll_timeout_s": 1},
        "llm": {
            "backend": "openai",
            "base_url": model.base_url,
            "model": "m",
            "api_key_env": "PINBOT_MD_KEY",
        },
        "limits": {"model_turns_per_minute": 0},
    }
    config.write_text(yaml.safe_dump(settings))
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "pinbot"),
        "telegram",
        "--config",
        str(config),
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "TELEGRAM_BOT_TOKEN": TOKEN, "PINBOT_MD_KEY": "sk-md"},
    )
    try:
        await telegram.wait_for(lambda: bool(telegram.called("setMyCommands")), 20)
        yield Bot(telegram)
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 20)
    finally:
        if process.returncode is None:
            process.kill()
        await telegram.stop()
        await model.stop()


def only(sent: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    (one,) = sent
    return one["text"], one.get("entities", [])


async def test_comparison_signs_arrive(bot: Bot) -> None:
    assert only(await bot.ask("compare")) == ("if a<b and c>d then swap", [])


async def test_a_generic_type_arrives(bot: Bot) -> None:
    assert only(await bot.ask("generics")) == ("The type is List<String>.", [])


async def test_an_html_tag_in_prose_arrives(bot: Bot) -> None:
    assert only(await bot.ask("tag")) == ("Wrap it in a <div> element.", [])


async def test_an_empty_code_block_is_sent_as_it_came(bot: Bot) -> None:
    assert only(await bot.ask("empty fence")) == ("``````", [])


async def test_an_html_comment_arrives(bot: Bot) -> None:
    assert only(await bot.ask("comment")) == ("<!-- hidden -->", [])


async def test_a_link_without_text_shows_its_address(bot: Bot) -> None:
    text, entities = only(await bot.ask("empty link"))
    assert text == "http://x"
    assert entities == [{"type": "text_link", "offset": 0, "length": 8, "url": "http://x"}]


async def test_javascript_and_tg_links_are_text(bot: Bot) -> None:
    text, entities = only(await bot.ask("schemes"))
    assert text == "run (javascript:alert(1)) or ping (tg://user?id=42), docs"
    assert entities == [
        {"type": "text_link", "offset": len(text) - 4, "length": 4, "url": "https://example.org"}
    ]


async def test_entity_references_and_escapes_show_as_written(bot: Bot) -> None:
    text, entities = only(await bot.ask("entities"))
    assert text == "Write &amp; as &amp; and <b> as <b>."
    assert entities == [{"type": "code", "offset": 6, "length": 5}]


async def test_code_keeps_its_angle_brackets(bot: Bot) -> None:
    text, entities = only(await bot.ask("code"))
    code = "List<String> xs = new ArrayList<>();"
    assert text == f"Use a < b here:\n\n{code}\n\n<!-- end -->"
    assert entities == [
        {"type": "code", "offset": 4, "length": 5},
        {"type": "pre", "offset": 17, "length": len(code), "language": "java"},
    ]

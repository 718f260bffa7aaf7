"""Logs: one line per event, JSON when asked, what people wrote only at debug level, and no
secret ever."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from bot.config import LoggingConfig
from bot.logs import REDACTOR, setup_logging
from tests.conftest import BotFactory, ask, dm

SECRET = "sk-live-0123456789abcdefghijklmnop"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    yield
    logging.getLogger().handlers.clear()


async def test_info_json_logs_hold_no_content(
    make_bot: BotFactory, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging(LoggingConfig(level="info", json=True))
    bot = make_bot()
    await ask(bot, dm(), "/pin add private-label very private content")
    await ask(bot, dm(), "my private question")
    lines = capsys.readouterr().err.strip().splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["message"].split(" ")[:2] for e in events if e["logger"] == "bot.core.bot"] == [
        ["handled", "command"],
        ["handled", "chat"],
    ]
    assert all({"time", "level", "logger", "message"} <= e.keys() for e in events)
    assert "private" not in "\n".join(lines)


async def test_debug_logs_show_content_but_never_secrets(
    make_bot: BotFactory, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging(LoggingConfig(level="debug"))
    REDACTOR.add(SECRET)
    bot = make_bot()
    await ask(bot, dm(), f"my key is {SECRET}, please remember")
    logged = capsys.readouterr().err
    assert "my key is [redacted], please remember" in logged
    assert SECRET not in logged


@pytest.mark.parametrize("level", ["info", "debug"])
def test_tracebacks_only_at_debug_and_always_redacted(
    level: str, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging(LoggingConfig(level=level))  # type: ignore[arg-type]
    REDACTOR.add(SECRET)
    try:
        raise RuntimeError(f"failed with {SECRET}")
    except RuntimeError:
        logging.getLogger("some.library").exception("a library failed")
    logged = capsys.readouterr().err
    assert "a library failed (RuntimeError: failed with [redacted])" in logged or level == "debug"
    assert ("Traceback" in logged) is (level == "debug")
    assert SECRET not in logged

"""Logs: one line per event, JSON when asked, what people wrote only at debug level, and no
secret ever."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from bot.config import ConfigError, LoggingConfig, parse_config
from bot.llm.openai_backend import OpenAIChatModel
from bot.logs import REDACTOR, setup_logging
from tests.conftest import TEST_KEY_ENV, BotFactory, agent_llm, ask, dm, make_config
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls

SECRET = "sk-live-0123456789abcdefghijklmnop"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    yield
    logging.getLogger().handlers.clear()


@pytest.mark.parametrize("settings", [{"format": "json"}, {"json": True}])
async def test_info_json_logs_hold_no_content(
    settings: dict[str, Any],
    make_bot: BotFactory,
    restore_logging: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    setup_logging(parse_config({"logging": {"level": "info", **settings}}).logging)
    bot = make_bot()
    await ask(bot, dm(), "/pin add private-label very private content")
    await ask(bot, dm(), "my private question")
    await ask(bot, dm(), "/pin remove no-such-label")
    lines = capsys.readouterr().err.strip().splitlines()
    events = [json.loads(line) for line in lines]
    handled = [e for e in events if e["logger"] == "bot.core.entry.pinbot"]
    assert [e["event"].split(" ")[:2] for e in handled] == [
        ["handled", "command"],
        ["handled", "turn"],
        ["handled", "command"],
    ]
    assert [(e["platform"], e["kind"], e["outcome"]) for e in handled] == [
        ("console", "command", "done"),
        ("console", "turn", "done"),
        ("console", "command", "refused"),
    ]
    assert all(isinstance(e["duration_ms"], float) and e["duration_ms"] >= 0 for e in handled)
    assert all({"time", "level", "logger", "event"} <= e.keys() for e in events)
    # ISO 8601 with the offset: datetime reads it back, aware.
    assert all(datetime.fromisoformat(e["time"]).tzinfo is not None for e in events)
    assert "private" not in "\n".join(lines)


async def test_text_logs_carry_the_same_fields(
    make_bot: BotFactory, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging(LoggingConfig(level="info"))
    await ask(make_bot(), dm(), "/pin add tone be brief")
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "handled" in line]
    assert " INFO bot.core.entry.pinbot handled command session=console:direct:" in line
    assert " outcome=done ms=" in line


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"logging\.format"):
        parse_config({"logging": {"format": "xml"}})


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


async def test_a_tool_name_the_model_made_up_is_not_logged(
    make_bot: BotFactory,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    restore_logging: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test-secret")
    llm = agent_llm(fake_openai.base_url)
    made_up = "exfiltrate_user_42_private_notes"
    fake_openai.script = [
        tool_calls((made_up, {}), ("pin_set", {"label": "tone", "content": "be brief"})),
        completion("Done."),
    ]
    model = OpenAIChatModel.from_config(make_config(llm=llm).llm)
    setup_logging(parse_config({"logging": {"level": "info", "format": "json"}}).logging)
    try:
        await ask(make_bot(model, llm=llm), dm(), "remember: be brief")
    finally:
        await model.close()
    events = [json.loads(line) for line in capsys.readouterr().err.strip().splitlines()]
    assert [e["event"].split(" ")[1] for e in events if e["event"].startswith("tool ")] == [
        "unknown",
        "pin_set",
    ]
    assert made_up not in json.dumps(events)

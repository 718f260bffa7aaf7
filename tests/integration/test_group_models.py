"""The model per group or topic (issue 49, item 5), through the core's one entry as a message
goes and the real OpenAI client against two fake model servers: a topic set with `/group model`
sends its turns, tool rounds and summaries to that llm.models entry's server, model and key; the
rest of the group goes to llm's own; usage and money are counted under the entry's model,
metrics under its name; an entry the config no longer has falls back to the default."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from bot import metrics
from bot.config import ConfigError
from bot.core.people import AdminLookup
from bot.llm.router import Models
from bot.metrics.model import metered
from storage import Store
from tests.conftest import BotFactory, ask, group, make_config, text_of
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls

DEFAULT_KEY, FAST_KEY = "PINBOT_TEST_KEY", "PINBOT_FAST_KEY"
PRICES = {
    "fake-model": {"prompt": 1.0, "completion": 2.0},
    "fast-1": {"prompt": 10.0, "completion": 20.0},
}
USED = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}


async def owner() -> bool | None:
    return True


async def member() -> bool | None:
    return False


OWNER: AdminLookup = owner
MEMBER: AdminLookup = member


@pytest.fixture
async def fast() -> AsyncIterator[FakeOpenAI]:
    """The second model server: the one the llm.models entry "fast" names."""
    server = await FakeOpenAI().start()
    server.api_key = "sk-fast"  # its own key: a request with the default's is refused
    server.usage = USED
    yield server
    await server.stop()


def sections(default: FakeOpenAI, fast: FakeOpenAI | None, **extra: Any) -> dict[str, Any]:
    """The config: llm's own model on default, the entry "fast" (model fast-1) on fast."""
    models = {}
    if fast is not None:
        models["fast"] = {"base_url": fast.base_url, "model": "fast-1", "api_key_env": FAST_KEY}
    llm = {
        "backend": "openai",
        "base_url": default.base_url,
        "model": "fake-model",
        "api_key_env": DEFAULT_KEY,
        "max_retries": 0,
        "models": models,
        **extra.pop("llm", {}),
    }
    return {"llm": llm, "pricing": {"models": PRICES}, **extra}


def bot_for(make_bot: BotFactory, **config: Any) -> Any:
    """A bot on the models the config names, made as `pinbot` makes them at startup."""
    models = Models.from_config(make_config(**config).llm, wrap=metered)
    return make_bot(models, **config)


async def say(
    bot: Any, text: str, *, topic: str | None = None, by: AdminLookup = MEMBER, who: str = "42"
) -> str:
    return text_of(await ask(bot, group(who, topic=topic), text, platform_admin=by))


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEFAULT_KEY, "sk-default")
    monkeypatch.setenv(FAST_KEY, "sk-fast")


@pytest.fixture
def meters() -> Iterator[metrics.Meters]:
    yield metrics.enable(version="test", model="fake-model", currency="USD", models=("fast",))
    metrics.disable()


async def test_a_topic_set_to_another_model_sends_its_requests_there_and_the_rest_of_the_group_not(
    make_bot: BotFactory,
    fake_openai: FakeOpenAI,
    fast: FakeOpenAI,
    store: Store,
    meters: metrics.Meters,
) -> None:
    fake_openai.usage = USED
    bot = bot_for(make_bot, **sections(fake_openai, fast))
    refused = await say(bot, "/group model fast", topic="5")
    assert refused.startswith("Only this group's owner and admins")
    assert "model for this topic: fast" in await say(bot, "/group model fast", topic="5", by=OWNER)
    assert not fake_openai.requests and not fast.requests  # commands ask no model

    assert await say(bot, "hello from the topic", topic="5") == "reply 1"
    assert await say(bot, "hello from the group") == "reply 1"
    assert await say(bot, "hello from another topic", topic="6") == "reply 2"
    assert [r["model"] for r in fast.requests] == ["fast-1"]
    assert fast.headers[0]["Authorization"] == "Bearer sk-fast"
    assert fast.messages(0)[-1]["content"] == "hello from the topic"
    assert [r["model"] for r in fake_openai.requests] == ["fake-model", "fake-model"]
    assert [m[-1]["content"] for m in map(fake_openai.messages, (0, 1))] == [
        "hello from the group",
        "hello from another topic",
    ]

    # Usage is the entry's model's, priced at its price; the rest is llm.model's.
    month = bot.clock().strftime("%Y-%m")
    mine = dict(await store.usage_by_model(f"{month}-01", f"{month}-31", sender=("console", "42")))
    assert mine.keys() == {"fast-1", "fake-model"}
    assert mine["fast-1"].calls == 1 and mine["fake-model"].calls == 2
    assert mine["fast-1"].cost == pytest.approx((1000 * 10.0 + 100 * 20.0) / 1e6)
    assert mine["fake-model"].cost == pytest.approx(2 * (1000 * 1.0 + 100 * 2.0) / 1e6)
    shown = await say(bot, "/usage")
    assert "this month by model:" in shown
    assert "    fast-1: 1 call(s), 1,000 prompt tokens" in shown
    assert "    fake-model: 2 call(s), 2,000 prompt tokens" in shown

    # Metrics name the entry: a label from the config.
    r = meters.registry
    assert r.get_sample_value("pinbot_model_calls_total", {"outcome": "ok", "model": "fast"}) == 1
    ok_default = {"outcome": "ok", "model": "fake-model"}
    assert r.get_sample_value("pinbot_model_calls_total", ok_default) == 2
    fast_prompt = {"kind": "prompt", "model": "fast"}
    assert r.get_sample_value("pinbot_model_tokens_total", fast_prompt) == 1000


async def test_tool_rounds_and_summaries_of_the_topic_go_to_its_model(
    make_bot: BotFactory, fake_openai: FakeOpenAI, fast: FakeOpenAI
) -> None:
    short = {"history_max_turns": 2, "compaction_keep_turns": 1, "history_max_chars": 100_000}
    bot = bot_for(
        make_bot,
        **sections(
            fake_openai,
            fast,
            llm={"agent_tools": True},
            chat=short,
            pins={"enable_in_group": True, "suggest_on_compaction": "off"},
        ),
    )
    assert "model for this topic: fast" in await say(bot, "/group model fast", topic="5", by=OWNER)
    fast.script = [tool_calls(("pin_get", {})), completion("No blocks here.")]
    assert await say(bot, "what is pinned?", topic="5") == "No blocks here."
    assert [m["role"] for m in fast.messages(1)][-2:] == ["assistant", "tool"]
    for n in range(3):  # the history grows past 2 turns: its older turns are summarised
        await say(bot, f"question {n}", topic="5")
    summaries = [r for r in fast.requests if r["messages"][0]["content"].startswith("You compact")]
    assert summaries and all(r["model"] == "fast-1" for r in fast.requests)
    assert not fake_openai.requests  # nothing of the topic went to llm's own server


async def test_an_entry_the_config_no_longer_has_falls_back_to_the_default(
    make_bot: BotFactory,
    fake_openai: FakeOpenAI,
    fast: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = bot_for(make_bot, **sections(fake_openai, fast))
    assert "model for this topic: fast" in await say(
        before, "/group model fast", topic="5", by=OWNER
    )
    # The operator removes the entry and starts again: the topic's setting stays, unused.
    after = bot_for(make_bot, **sections(fake_openai, None))
    caplog.set_level(logging.WARNING, logger="bot.llm.router")
    assert await say(after, "first", topic="5") == "reply 1"
    assert await say(after, "second", topic="5") == "reply 2"
    assert [r["model"] for r in fake_openai.requests] == ["fake-model", "fake-model"]
    assert not fast.requests
    gone = [m for m in caplog.messages if "llm.models no longer has" in m]
    assert len(gone) == 1 and "'fast'" in gone[0]  # logged once, not at every message


def test_a_missing_key_of_an_entry_stops_the_start(
    fake_openai: FakeOpenAI, fast: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FAST_KEY)
    config = make_config(**sections(fake_openai, fast))
    with pytest.raises(ConfigError, match=f"llm.models.fast is missing: .*{FAST_KEY}"):
        Models.from_config(config.llm)


async def test_an_entry_that_refuses_its_key_names_its_own_settings(
    make_bot: BotFactory,
    fake_openai: FakeOpenAI,
    fast: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 401 from an llm.models entry's server points the operator at that entry's settings,
    not at llm's own."""
    monkeypatch.setenv(FAST_KEY, "sk-stale")
    bot = bot_for(make_bot, **sections(fake_openai, fast))
    await say(bot, "/group model fast", topic="5", by=OWNER)
    refused = await say(bot, "hello from the topic", topic="5")
    assert "llm.models.fast.base_url, llm.models.fast.model or the API key" in refused
    assert "llm.base_url" not in refused
    assert await say(bot, "hello from the group") == "reply 1"  # the default's key is right

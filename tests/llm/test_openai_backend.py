"""The downstream call through the openai SDK against a fake OpenAI-compatible server: the exact
messages array the model receives, history, and every kind of failure."""

from __future__ import annotations

import asyncio
import re
import socket
from typing import Any

import pytest

from bot.config import ConfigError
from bot.core.conversation.render import CONTEXT_RULES, STRONG_RULES
from bot.llm import build_model
from bot.llm.base import ModelRequest
from bot.llm.openai_backend import OpenAIChatModel
from storage import Store
from tests.conftest import BotFactory, ask, dm, group, make_config, text_of
from tests.fakes.openai_server import FakeOpenAI, completion

SYSTEM = "You are a test assistant."


def llm(server: FakeOpenAI, **extra: Any) -> dict[str, Any]:
    return {
        "backend": "openai",
        "base_url": server.base_url,
        "model": "fake-model",
        "api_key_env": "PINBOT_TEST_KEY",
        "system_prompt": SYSTEM,
        "timeout_s": 5,
        "max_retries": 0,
        **extra,
    }


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test-secret")


def openai_bot(
    make_bot: BotFactory, server: FakeOpenAI, pins: dict[str, Any] | None = None, **extra: Any
) -> Any:
    config = make_config(llm=llm(server, **extra))
    return make_bot(
        OpenAIChatModel.from_config(config.llm), llm=llm(server, **extra), pins=pins or {}
    )


def marker_of(message: dict[str, Any]) -> str:
    """The marker of the section in this message (strong: system; context: the user's)."""
    found = re.search(r"\[(pin-[0-9a-f]{16}) ", message["content"])
    assert found
    return found.group(1)


def section(m: str, level: str, blocks: list[tuple[str, str, str]]) -> str:
    """The wrapper render.py must produce, written out independently."""
    title, rules = (
        ("pinned rules", STRONG_RULES)
        if level == "strong"
        else ("pinned reference material", CONTEXT_RULES)
    )
    body = "\n".join(
        f"[{m} block {level} {scope} label={label}]\n{content}\n[{m} end block]"
        for scope, label, content in blocks
    )
    return (
        f"[{m} {title}]\n{rules}\nEach block starts with a line "
        f'"[{m} block <level> <scope> label=<label>]" and ends with "[{m} end block]"; '
        f'this section ends with "[{m} end {title}]". Only lines with exactly this marker '
        f"are boundaries: everything else is block content.\n{body}\n[{m} end {title}]"
    )


def strong_section(m: str, blocks: list[tuple[str, str, str]]) -> str:
    return section(m, "strong", blocks)


def context_section(m: str, blocks: list[tuple[str, str, str]]) -> str:
    return section(m, "context", blocks)


async def test_no_blocks_means_the_plain_request(
    make_bot: BotFactory, fake_openai: FakeOpenAI
) -> None:
    bot = openai_bot(make_bot, fake_openai)
    assert text_of(await ask(bot, dm(), "hello")) == "reply 1"
    assert fake_openai.requests[0]["model"] == "fake-model"
    assert fake_openai.messages() == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "hello"},
    ]
    assert fake_openai.headers[0]["Authorization"] == "Bearer sk-test-secret"


async def test_dm_blocks_arrive_exactly(make_bot: BotFactory, fake_openai: FakeOpenAI) -> None:
    bot = openai_bot(make_bot, fake_openai)
    await ask(bot, dm(), "/pin add tone Antworte knapp.")
    await ask(bot, dm(), "/pin add-context proj Project:\npinbot --pinned")
    await ask(bot, dm(), "/pin add-context old stale")
    await ask(bot, dm(), "/pin idle old")
    await ask(bot, dm(), "Wie geht's?")
    messages = fake_openai.messages()
    m, c = marker_of(messages[0]), marker_of(messages[-1])
    assert messages == [
        {
            "role": "system",
            "content": f"{SYSTEM}\n\n"
            + strong_section(m, [("personal", "tone", "Antworte knapp.")]),
        },
        {
            "role": "user",
            "content": context_section(c, [("personal", "proj", "Project:\npinbot")])
            + "\n\nWie geht's?",
        },
    ]


async def test_group_request_has_shared_then_own_blocks_only(
    make_bot: BotFactory, fake_openai: FakeOpenAI
) -> None:
    pins = {
        "enable_in_group": True,
        "group_shared_admin_ids": ["console:group:-100123::u:7"],
        "group_strong_user_ids": ["5"],
    }
    bot = openai_bot(make_bot, fake_openai, pins)
    await ask(bot, group("7"), "/pin shared add-strong house No profanity.")
    await ask(bot, group("7"), "/pin shared add faq FAQ text")
    await ask(bot, group("5"), "/pin add-strong mine Call me Ana.")
    await ask(bot, group("5"), "/pin add note Ana's note")
    await ask(bot, group("42"), "/pin add other Not for Ana")
    await ask(bot, group("5", topic="3"), "hi")
    messages = fake_openai.messages()
    m, c = marker_of(messages[0]), marker_of(messages[-1])
    assert messages == [
        {
            "role": "system",
            "content": f"{SYSTEM}\n\n"
            + strong_section(
                m, [("shared", "house", "No profanity."), ("personal", "mine", "Call me Ana.")]
            ),
        },
        {
            "role": "user",
            "content": context_section(
                c, [("shared", "faq", "FAQ text"), ("personal", "note", "Ana's note")]
            )
            + "\n\nhi",
        },
    ]


async def test_injection_disabled_sends_the_plain_request(
    make_bot: BotFactory, fake_openai: FakeOpenAI
) -> None:
    bot = openai_bot(make_bot, fake_openai, {"allow_prompt_injection": False})
    await ask(bot, dm(), "/pin add tone Be brief")
    await ask(bot, dm(), "hello")
    assert fake_openai.messages() == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "hello"},
    ]


async def test_history_holds_own_words_and_replies_not_wrappers(
    make_bot: BotFactory, fake_openai: FakeOpenAI
) -> None:
    bot = openai_bot(make_bot, fake_openai)
    await ask(bot, dm(), "/pin add-context ref Some reference")
    await ask(bot, dm(), "first")
    await ask(bot, dm(), "/pin list")
    await ask(bot, dm(), "second")
    messages = fake_openai.messages()
    assert messages[1:3] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply 1"},
    ]
    assert messages[3]["content"].endswith("\n\nsecond")
    assert len(messages) == 4


async def test_history_budget_drops_oldest_turns(
    make_bot: BotFactory, fake_openai: FakeOpenAI, store: Store
) -> None:
    config = make_config(llm=llm(fake_openai))
    bot = make_bot(
        OpenAIChatModel.from_config(config.llm),
        llm=llm(fake_openai),
        chat={"history_max_turns": 2, "compaction": "drop", "compaction_keep_turns": 2},
    )
    for word in ("one", "two", "three", "four"):
        await ask(bot, dm(), word)
    assert [m["content"] for m in fake_openai.messages()] == [
        SYSTEM,
        "two",
        "reply 2",
        "three",
        "reply 3",
        "four",
    ]
    assert len(await store.history("console:direct:42")) == 6  # 2 turns kept + the newest


@pytest.mark.parametrize(
    ("status", "error", "fragment"),
    [
        (500, {"message": "boom"}, "try again later"),
        (503, {"message": "overloaded"}, "try again later"),
        (429, {"message": "slow down"}, "try again later"),
        (401, {"message": "Incorrect API key provided"}, "misconfigured"),
        (
            404,
            {"message": "The model `gpt-9` does not exist", "code": "model_not_found"},
            "misconfigured",
        ),
        (
            400,
            {
                "message": "This model's maximum context length is 8192 tokens",
                "code": "context_length_exceeded",
            },
            "too long for the model's context window (8,192 tokens)",
        ),
        (400, {"message": "filtered", "code": "content_filter"}, "content filter"),
    ],
)
async def test_failing_backend_gives_one_clear_message_and_no_history(
    make_bot: BotFactory,
    fake_openai: FakeOpenAI,
    store: Store,
    caplog: pytest.LogCaptureFixture,
    status: int,
    error: dict[str, Any],
    fragment: str,
) -> None:
    bot = openai_bot(make_bot, fake_openai)
    fake_openai.status, fake_openai.error = status, error
    reply = text_of(await ask(bot, dm(), "hello"))
    assert reply is not None and fragment in reply and "sk-test" not in reply
    assert error["message"] in caplog.text  # the server's own words reach the log
    assert await store.history("console:direct:42") == []
    fake_openai.status = 200
    assert text_of(await ask(bot, dm(), "again")) == f"reply {len(fake_openai.requests)}"
    assert fake_openai.messages()[1:] == [{"role": "user", "content": "again"}]


async def test_retries_are_bounded_by_config(make_bot: BotFactory, fake_openai: FakeOpenAI) -> None:
    bot = openai_bot(make_bot, fake_openai, max_retries=1)
    fake_openai.status = 500
    await ask(bot, dm(), "hello")
    assert len(fake_openai.requests) == 2


async def test_timeout(make_bot: BotFactory, fake_openai: FakeOpenAI) -> None:
    import asyncio

    fake_openai.release = asyncio.Event()  # never set: the server never answers
    bot = openai_bot(make_bot, fake_openai, timeout_s=0.05)
    reply = text_of(await ask(bot, dm(), "hello"))
    assert reply is not None and "in time" in reply
    fake_openai.release.set()


async def test_refused_connection(make_bot: BotFactory, store: Store) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = {
        "backend": "openai",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "api_key_env": "PINBOT_TEST_KEY",
        "max_retries": 0,
    }
    config = make_config(llm=settings)
    bot = make_bot(OpenAIChatModel.from_config(config.llm), llm=settings)
    reply = text_of(await ask(bot, dm(), "hello"))
    assert reply is not None and "could not be reached" in reply


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PINBOT_TEST_KEY")
    config = make_config(llm={"backend": "openai", "api_key_env": "PINBOT_TEST_KEY"})
    with pytest.raises(ConfigError, match="PINBOT_TEST_KEY"):
        build_model(config.llm)


async def test_concurrent_requests_refused_for_the_same_field_are_both_answered(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.refuse = {
        "max_completion_tokens": "Unsupported parameter: 'max_completion_tokens' is not supported"
    }
    fake_openai.release = asyncio.Event()
    model = OpenAIChatModel.from_config(make_config(llm=llm(fake_openai)).llm)
    request = ModelRequest([{"role": "user", "content": "hi"}])
    both = asyncio.gather(model.complete(request), model.complete(request))
    await fake_openai.wait_for_requests(2)  # both asked before either is refused
    fake_openai.release.set()
    replies = await both
    await model.close()
    assert sorted(reply.text for reply in replies) == ["reply 3", "reply 4"]
    assert ["max_tokens" in r for r in fake_openai.requests] == [False, False, True, True]


async def test_three_adaptations_then_an_empty_stream_still_answer(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.reject_stream_options = True
    fake_openai.refuse = {
        "max_completion_tokens": "Unrecognized request argument supplied: max_completion_tokens",
        "tools": "this model does not support tools",
    }
    empty = completion("")
    empty["choices"][0]["finish_reason"] = None  # a stream that ends without a chunk of answer
    fake_openai.script = [empty, completion("the answer")]
    model = OpenAIChatModel.from_config(make_config(llm=llm(fake_openai, stream=True)).llm)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    request = ModelRequest([{"role": "user", "content": "hi"}], tools=[tool])

    async def sink(text: str) -> None:
        pass

    reply = await model.complete(request, on_text=sink)
    await model.close()
    assert reply.text == "the answer"
    assert [bool(r.get("stream")) for r in fake_openai.requests] == [True] * 4 + [False]

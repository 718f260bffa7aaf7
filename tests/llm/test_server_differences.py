"""Servers read the OpenAI wire format differently (the completion-limit field, usage in
streams, tools, overflowing the context window): no turn fails for it, each difference is
learned once with one log line. Driven through Pinbot.handle and the real openai SDK against a
fake server that behaves as each kind of server is documented to."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from bot.core.replies import Result
from tests.conftest import OpenAIBots, ask, dm, outcome_of, text_of
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls

LIMIT = 16
OVERFLOW_400 = {
    "status": 400,
    "error": {
        # llama-cpp-python's words (OpenAI's and vLLM's are the same but for the numbers)
        "message": "This model's maximum context length is 512 tokens. However, you requested "
        "600 tokens (584 in the messages, 16 in the completion). Please reduce the length of "
        "the messages or completion.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    },
}


def warnings(caplog: pytest.LogCaptureFixture, word: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and word in r.getMessage()
    ]


async def test_a_server_that_ignores_max_completion_tokens_gets_max_tokens(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # llama-cpp-python's server drops fields it does not know: the reply runs on past the limit
    fake_openai.usage = {"prompt_tokens": 30, "completion_tokens": 200, "total_tokens": 230}
    bot = await openai_bots(llm={"max_completion_tokens": LIMIT})
    assert text_of(await ask(bot, dm(), "one")) == "reply 1"
    assert text_of(await ask(bot, dm(), "two")) == "reply 2"
    sent = [
        {k: r.get(k) for k in ("max_completion_tokens", "max_tokens")} for r in fake_openai.requests
    ]
    assert sent == [
        {"max_completion_tokens": LIMIT, "max_tokens": None},
        {"max_completion_tokens": None, "max_tokens": LIMIT},
    ]
    assert len(warnings(caplog, "ignores max_completion_tokens")) == 1


async def test_a_server_that_rejects_max_completion_tokens_is_asked_again(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.refuse = {
        "max_completion_tokens": "Unrecognized request argument supplied: max_completion_tokens"
    }
    bot = await openai_bots(llm={"max_completion_tokens": LIMIT, "stream": True})
    shown: list[str] = []

    async def sink(text: str) -> None:
        shown.append(text)

    reply = await ask(bot, dm(), "hello", on_text=sink)
    assert outcome_of(reply) is Result.DONE and text_of(reply) == "reply 2" and shown
    assert [("max_tokens" in r, "max_completion_tokens" in r) for r in fake_openai.requests] == [
        (False, True),
        (True, False),
    ]
    assert len(warnings(caplog, "rejects max_completion_tokens")) == 1


async def test_a_fixed_limit_field_is_sent_as_configured_and_never_switched(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    fake_openai.usage = {"prompt_tokens": 30, "completion_tokens": 200, "total_tokens": 230}
    bot = await openai_bots(llm={"completion_limit_param": "max_completion_tokens"})
    await ask(bot, dm(), "one")
    await ask(bot, dm(), "two")
    assert all(r["max_completion_tokens"] == 1024 for r in fake_openai.requests)
    bot = await openai_bots(llm={"completion_limit_param": "max_tokens"})
    await ask(bot, dm("7"), "three")
    assert fake_openai.requests[-1]["max_tokens"] == 1024
    assert "max_completion_tokens" not in fake_openai.requests[-1]


async def test_tools_refused_are_turned_off_and_the_turn_answers(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # Ollama's answer for a model without tool support; vLLM's without --enable-auto-tool-choice
    fake_openai.refuse = {"tools": "registry.ollama.ai/library/gemma3:270m does not support tools"}
    bot = await openai_bots(llm={"agent_tools": True})
    assert text_of(await ask(bot, dm(), "one")) == "reply 2"
    assert text_of(await ask(bot, dm(), "two")) == "reply 3"
    assert ["tools" in r for r in fake_openai.requests] == [True, False, False]
    assert len(warnings(caplog, "refuses tools")) == 1


async def test_a_stream_without_usage_is_estimated_and_said_once(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # llama-cpp-python ignores stream_options: its streams end without a usage chunk
    fake_openai.respond = lambda body: {**completion("streamed answer"), "usage": None}
    bot = await openai_bots(llm={"stream": True})

    async def sink(text: str) -> None:
        pass

    await ask(bot, dm(), "one", on_text=sink)
    await ask(bot, dm(), "two", on_text=sink)
    assert all(r["stream_options"] == {"include_usage": True} for r in fake_openai.requests)
    assert len(warnings(caplog, "sends no usage in streams")) == 1
    assert "2 call(s) estimated" in text_of(await ask(bot, dm(), "/usage"))


async def test_an_overflow_compacts_history_and_asks_once_more(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    bot = await openai_bots()
    for text in ("first", "second", "third"):
        await ask(bot, dm(), text)
    fake_openai.script = [OVERFLOW_400, completion("summary of three turns")]
    reply = await ask(bot, dm(), "fourth")
    assert outcome_of(reply) is Result.DONE and text_of(reply) == "reply 6"
    summary_request, retried = fake_openai.requests[4], fake_openai.requests[5]
    assert "first" in summary_request["messages"][1]["content"]
    assert [m["role"] for m in retried["messages"]] == ["system", "user", "user"]
    assert "summary of three turns" in retried["messages"][1]["content"]
    assert retried["messages"][2]["content"] == "fourth"
    assert len(warnings(caplog, "overflowed the model's context window")) == 1
    assert len(warnings(caplog, "context window is 512 tokens")) == 1


async def test_an_overflow_with_no_history_to_compact_says_what_to_shorten(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots()
    fake_openai.script = [OVERFLOW_400]
    reply = await ask(bot, dm(), "a very long message")
    assert outcome_of(reply) is Result.FAILED
    assert text_of(reply) == (
        "Your message and the pinned blocks here are too long for the model's context window "
        "(512 tokens). Send a shorter message, or shorten or remove blocks (/pin status shows "
        "what they cost)."
    )
    assert len(fake_openai.requests) == 1
    assert text_of(await ask(bot, dm(), "short")) == "reply 2"  # and nothing was kept of it


async def test_probe_server_learns_before_the_first_call(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # a server that ignores tools (answers with text) and the limit, and sends no stream usage
    fake_openai.respond = lambda body: {
        **completion("a long answer that goes on and on"),
        "usage": {"prompt_tokens": 9, "completion_tokens": 20, "total_tokens": 29},
    }
    fake_openai.reject_stream_options = True
    bot = await openai_bots(llm={"probe_server": True, "agent_tools": True})
    assert text_of(await ask(bot, dm(), "hello")) == "a long answer that goes on and on"
    assert text_of(await ask(bot, dm(), "again")) == "a long answer that goes on and on"
    probes, turns = fake_openai.requests[:-2], fake_openai.requests[-2:]
    assert probes[0]["stream_options"] and "stream_options" not in probes[1]  # rejected
    assert probes[1]["max_completion_tokens"] == 2 and probes[2]["max_tokens"] == 2
    assert any(p.get("tool_choice") == "required" for p in probes)
    assert all("tools" not in t and t["max_tokens"] == 1024 for t in turns)
    for said in ("ignores max_completion_tokens", "rejects stream_options", "ignored tools"):
        assert len(warnings(caplog, said)) == 1, said


async def test_a_message_that_overflows_on_its_own_keeps_history_as_it_was(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots()
    for text in ("first", "second"):
        await ask(bot, dm(), text)
    # the turn overflows, the summary works, and the retry overflows all the same
    fake_openai.script = [OVERFLOW_400, completion("summary of two turns"), OVERFLOW_400]
    reply = await ask(bot, dm(), "a message too long on its own")
    assert outcome_of(reply) is Result.FAILED and "too long" in text_of(reply)
    await ask(bot, dm(), "short")
    contents = [m["content"] for m in fake_openai.requests[-1]["messages"]]
    assert contents[1:] == ["first", "reply 1", "second", "reply 2", "short"]


async def test_a_summary_that_overflows_too_drops_no_history(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots()
    for text in ("first", "second"):
        await ask(bot, dm(), text)
    fake_openai.script = [OVERFLOW_400, OVERFLOW_400]
    reply = await ask(bot, dm(), "a message too long on its own")
    assert outcome_of(reply) is Result.FAILED and "too long" in text_of(reply)
    assert len(fake_openai.requests) == 4  # the turn and its summary; no retry without history
    await ask(bot, dm(), "short")
    contents = [m["content"] for m in fake_openai.requests[-1]["messages"]]
    assert contents[1:] == ["first", "reply 1", "second", "reply 2", "short"]


async def test_an_overflow_after_a_tool_ran_is_not_asked_again(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(llm={"agent_tools": True})
    await ask(bot, dm(), "first")
    pin = {"label": "note", "content": "remember this"}
    fake_openai.script = [tool_calls(("pin_set", pin)), OVERFLOW_400]
    reply = await ask(bot, dm(), "pin it")
    assert outcome_of(reply) is Result.FAILED and "too long" in text_of(reply)
    assert len(fake_openai.requests) == 3  # no summary, no second run of the tool
    blocks = await bot.store.blocks(["console:direct:42"])
    assert [(b.label, b.content) for b in blocks] == [("note", "remember this")]
    await ask(bot, dm(), "short")
    contents = [m["content"] for m in fake_openai.requests[-1]["messages"]]
    assert contents[1:3] == ["first", "reply 1"]


TOO_LARGE = [
    # OpenAI's
    "max_completion_tokens is too large: 100000. This model supports at most 4096 completion "
    "tokens, whereas you provided 100000.",
    # vLLM's
    "'max_tokens' or 'max_completion_tokens' is too large: 1024. This model's maximum context "
    "length is 512 tokens and your request has 100 input tokens (1024 > 512 - 100).",
]


@pytest.mark.parametrize("message", TOO_LARGE)
async def test_a_limit_refused_as_too_large_keeps_its_field(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, message: str
) -> None:
    bot = await openai_bots()
    fake_openai.script = [{"status": 400, "error": {"message": message}}]
    assert outcome_of(await ask(bot, dm(), "one")) is Result.FAILED
    assert text_of(await ask(bot, dm(), "two")) == "reply 2"
    assert [r.get("max_completion_tokens") for r in fake_openai.requests] == [1024, 1024]
    assert all("max_tokens" not in r for r in fake_openai.requests)


@pytest.mark.parametrize("message", TOO_LARGE)
async def test_the_probe_keeps_a_limit_field_refused_as_too_large(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, message: str
) -> None:
    bot = await openai_bots(llm={"probe_server": True})
    fake_openai.script = [{"status": 400, "error": {"message": message}}]
    assert text_of(await ask(bot, dm(), "one")) == "reply 2"
    assert "max_tokens" not in fake_openai.requests[-1]
    assert fake_openai.requests[-1]["max_completion_tokens"] == 1024


async def test_a_tool_probe_cut_at_its_length_keeps_the_tools_on(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # a reasoning model still thinking when the probe's tokens run out: no call, "length"
    def respond(body: dict[str, Any]) -> dict[str, Any]:
        answer = completion("Hmm")
        answer["choices"][0]["finish_reason"] = "length"
        return answer

    fake_openai.respond = respond
    bot = await openai_bots(llm={"probe_server": True, "agent_tools": True})
    await ask(bot, dm(), "hello")
    (tool_probe,) = [r for r in fake_openai.requests[:-1] if r.get("tools")]
    assert tool_probe["max_completion_tokens"] == 256
    assert "tools" in fake_openai.requests[-1]
    assert not warnings(caplog, "tools")


@pytest.mark.parametrize("probe", [False, True])
async def test_llama_cpps_500_refusing_tools_turns_them_off_and_the_turn_answers(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture, probe: bool
) -> None:
    """llama.cpp started without --jinja answers a request with tools with HTTP 500: a refusal
    of tools is known by what it says, whatever the status."""
    fake_openai.refuse = {"tools": "tools param requires --jinja flag"}
    fake_openai.refusal_status, fake_openai.refusal_type = 500, "server_error"
    bot = await openai_bots(llm={"agent_tools": True, "probe_server": probe})
    first = await ask(bot, dm(), "one")
    assert outcome_of(first) is Result.DONE, text_of(first)
    second = await ask(bot, dm(), "two")
    assert outcome_of(second) is Result.DONE
    chats = [r for r in fake_openai.requests if r["messages"][-1]["content"] in ("one", "two")]
    assert not chats[-1].get("tools")  # off for that server from then on
    assert len(warnings(caplog, "refuses tools")) == 1

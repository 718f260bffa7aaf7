"""llm.stream_timeout_s bounds a whole streamed answer, by the injected clock (each read is bounded
by llm.timeout_s alone); on_progress marks every chunk's arrival. The real openai client against
the fake server; the fake clock moves only as chunks arrive."""

from __future__ import annotations

from typing import Any

import pytest

from bot.llm.base import ModelRequest
from bot.llm.openai_backend import OpenAIChatModel
from tests.conftest import make_config
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, stream_chunks, tool_calls

REQUEST = ModelRequest([{"role": "user", "content": "hi"}])


@pytest.fixture
def model(
    fake_openai: FakeOpenAI, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> OpenAIChatModel:
    monkeypatch.setenv("PINBOT_TEST_KEY", "sk-test")
    llm = {
        "backend": "openai",
        "base_url": fake_openai.base_url,
        "api_key_env": "PINBOT_TEST_KEY",
        "max_retries": 0,
        "stream": True,
        "stream_timeout_s": 60,
    }
    return OpenAIChatModel.from_config(make_config(llm=llm).llm, clock=clock)


async def stream(model: OpenAIChatModel, clock: FakeClock, seconds: float) -> tuple[Any, int]:
    """Complete REQUEST streamed, the clock moving `seconds` as each chunk arrives; the reply and
    how often on_progress was called."""
    calls = 0
    shown: list[str] = []

    async def progress() -> None:
        nonlocal calls
        if calls:  # the stream's opening takes no time here
            clock.advance(seconds=seconds)
        calls += 1

    async def on_text(text: str) -> None:
        shown.append(text)

    try:
        reply = await model.complete(REQUEST, on_text=on_text, on_progress=progress)
    finally:
        await model.close()
    assert not shown or reply.text.startswith(shown[-1])
    return reply, calls


async def test_a_stream_inside_its_limit_is_whole_and_reports_each_chunk(
    model: OpenAIChatModel, fake_openai: FakeOpenAI, clock: FakeClock
) -> None:
    answer = completion("twenty characters!!!")  # 4 content chunks
    fake_openai.script = [answer]
    fake_openai.usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    reply, calls = await stream(model, clock, seconds=1)
    assert reply.text == "twenty characters!!!" and not reply.cut_off
    assert reply.usage is not None and reply.usage.completion_tokens == 5
    assert calls == 1 + len(stream_chunks(answer)) + 1  # the opening, each chunk, the usage


async def test_a_stream_past_its_limit_keeps_the_text_and_drops_unfinished_tool_calls(
    model: OpenAIChatModel, fake_openai: FakeOpenAI, clock: FakeClock
) -> None:
    arguments = {"label": "x", "content": "y" * 200}
    fake_openai.script = [tool_calls(("pin_set", arguments), text="Saving it.")]
    reply, _ = await stream(model, clock, seconds=10)  # the role chunk, then 10 s a chunk
    assert reply.cut_off and reply.text == "Saving it." and reply.tool_calls == []
    assert reply.usage is None  # it never came; the ledger estimates it
    assert len(fake_openai.requests) == 1  # not asked again

"""Streamed turns through Pinbot.handle (as a platform that shows previews streams them) against
llama.cpp's server: the limit the server ignores is learned from the first stream, which ends
at the limit; streams carry no usage, which is estimated; an overflow's stream ends empty and
is asked again unstreamed, which says why."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.core.entry.pinbot import Pinbot
from bot.core.replies import Result
from bot.llm.openai_backend import OpenAIChatModel
from storage import Store
from tests.conftest import ask, dm, make_config, outcome_of, text_of
from tests.fakes.clock import FakeClock
from tests.real_model.server import CONTEXT_WINDOW, MODEL, LlamaServer
from tests.real_model.test_console import LIMIT, usage

pytestmark = pytest.mark.xdist_group("real-model")
KEY_ENV = "PINBOT_LLAMA_KEY"


@pytest.fixture
async def streaming_bot(
    tmp_path: Path, checked_server: LlamaServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Pinbot]:
    monkeypatch.setenv(KEY_ENV, "sk-no-key-needed")
    config = make_config(
        llm={
            "backend": "openai",
            "base_url": checked_server.base_url,
            "model": MODEL,
            "api_key_env": KEY_ENV,
            "max_retries": 0,
            "timeout_s": 300,
            "max_completion_tokens": LIMIT,
            "stream": True,
        }
    )
    model = OpenAIChatModel.from_config(config.llm)
    async with await Store.open(tmp_path / "pins.sqlite3") as store:
        yield Pinbot(config, store, model, clock=clock)
    await model.close()


async def test_streamed_turns_learn_the_limit_and_estimate_usage(
    streaming_bot: Pinbot, caplog: pytest.LogCaptureFixture
) -> None:
    shown: list[str] = []

    async def sink(text: str) -> None:
        shown.append(text)

    await ask(streaming_bot, dm(), "/pin add-strong tone Answer in one short sentence.")
    too_long = "1234567890 " * 600  # about 6,000 tokens, under the 8,000 characters allowed
    # A count to go on with, until an answer runs past the limit (the model may stop early)
    for _ in range(3):
        await ask(streaming_bot, dm(), "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", on_text=sink)
        if "ignores max_completion_tokens" in caplog.text:
            break
    replies = [await ask(streaming_bot, dm(), text, on_text=sink) for text in ("Hi.", too_long)]
    said = caplog.text
    assert said.count("ignores max_completion_tokens") == 1  # a stream ran past the limit
    assert said.count("sends no usage in streams") == 1
    assert "asking unstreamed" in said  # the overflow's stream ended before its first chunk
    assert outcome_of(replies[1]) is Result.FAILED
    assert f"context window ({CONTEXT_WINDOW:,} tokens)" in text_of(replies[1])
    assert shown  # previews of the answers as they streamed
    calls, _, _, _, estimated = usage(text_of(await ask(streaming_bot, dm(), "/usage")))
    # the streamed answers' usage is estimated; the summary made when the overflow compacted
    # history is not streamed, and its usage is the server's (the overflows made no call)
    assert 1 <= estimated <= calls <= estimated + 1

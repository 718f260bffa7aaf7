"""`pinbot console` against llama.cpp's OpenAI-compatible server and a real (tiny, base) model:
personal strong and context blocks, a conversation long enough to compact, an overflow of the
context window, the agent tools, then /usage (the console does not stream: test_streamed.py
streams in process). Its answers are not
judged; the turns (none fails for a server difference), the log lines and the accounting are."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.real_model.server import CONTEXT_WINDOW, MODEL, LlamaServer

pytestmark = pytest.mark.xdist_group("real-model")

PINBOT = str(Path(sys.executable).parent / "pinbot")
KEY_ENV = "PINBOT_LLAMA_KEY"  # the server asks for no key; the client sends one all the same
SAFETY_NET_S = 600  # a hung process, not a pause: the whole group takes a few minutes
LIMIT = 8  # completion tokens: short answers keep the run short
# What a turn failed for a server difference would say (bot/llm/openai_backend.py,
# bot/core/conversation/turns.py). A base model may also answer nothing at all ("The model
# returned an empty answer"): that is the model's answer, not the server's reading of the wire.
FAILURES = (
    "busy or failing",
    "could not be reached",
    "did not answer in time",
    "failed to answer",
    "misconfigured",
    "refused the request",
    "too long",
    "Cut off",
)
USAGE = re.compile(
    r"([\d,]+) call\(s\), ([\d,]+) prompt tokens \(([\d,]+) cached, \d+% cache hits\), "
    r"([\d,]+) completion tokens(?:; ([\d,]+) call\(s\) estimated)?"
)


def llm(server: LlamaServer, **settings: Any) -> dict[str, Any]:
    return {
        "backend": "openai",
        "base_url": server.base_url,
        "model": MODEL,
        "api_key_env": KEY_ENV,
        "max_retries": 0,
        "timeout_s": 300,
        "max_completion_tokens": LIMIT,
        **settings,
    }


async def console(tmp_path: Path, lines: list[str], **sections: Any) -> tuple[str, str]:
    """Run `pinbot console --user 42` with these config sections, fed lines; (stdout, stderr)."""
    sections.setdefault("storage", {"path": str(tmp_path / "pins.sqlite3")})
    sections.setdefault("limits", {"pin_commands_per_minute": 0, "model_turns_per_minute": 0})
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(sections), encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        PINBOT,
        "console",
        "--config",
        str(config),
        "--user",
        "42",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, KEY_ENV: "sk-no-key-needed"},
    )
    stdin = "".join(f"{line}\n" for line in lines).encode()
    out, err = await asyncio.wait_for(process.communicate(stdin), SAFETY_NET_S)
    assert process.returncode == 0, err.decode()
    return out.decode(), err.decode()


def usage(out: str) -> tuple[int, int, int, int, int]:
    """(calls, prompt tokens, cached, completion tokens, estimated calls) of the first
    /usage line (the speaker's, today)."""
    found = USAGE.search(out)
    assert found, out
    return tuple(int((group or "0").replace(",", "")) for group in found.groups())  # type: ignore[return-value]


BLOCKS = [
    "/pin add-strong tone Answer in one short sentence.",
    "/pin add-context proj pinbot is a chat bot that keeps pinned notes for each chat.",
]
QUESTIONS = ["Hello there.", "What is pinbot?", "Name a colour.", "Name a fruit."]


async def test_a_conversation_with_blocks_compaction_and_tools(
    tmp_path: Path, checked_server: LlamaServer
) -> None:
    out, err = await console(
        tmp_path,
        [*BLOCKS, *QUESTIONS, "/usage"],
        llm=llm(checked_server, probe_server=True, agent_tools=True),
        chat={"history_max_turns": 2, "compaction_keep_turns": 1},
    )
    assert "Saved strong block 'tone'." in out and "Saved context block 'proj'" in out
    assert not any(failure in out for failure in FAILURES), out
    # the probe found each difference before the first turn, and said each once
    for said in (
        "ignores max_completion_tokens",
        "sends no usage in streams",
        "the model server ignored tools",
    ):
        assert err.count(said) == 1, (said, err)
    calls, prompt, cached, completion, estimated = usage(out)
    # and, when history passed two turns, the summary alone and the pin suggestions' call of
    # their own (the probe found this server ignores tools, so they cannot share one call)
    assert calls == len(QUESTIONS) + 2
    assert estimated == 0 and cached == 0  # usage reported; no cached-token field
    assert completion <= calls * LIMIT  # max_tokens honoured where max_completion_tokens was not
    assert prompt > calls * 100  # each request carried the system prompt and the blocks


async def test_an_overflow_gets_a_clear_reply_and_the_chat_goes_on(
    tmp_path: Path, checked_server: LlamaServer
) -> None:
    # under the 8,000 characters a message may have, yet about 6,000 tokens (a digit is one
    # token to Gemma's tokenizer); the window holds 2,048
    too_long = "1234567890 " * 600
    out, err = await console(
        tmp_path,
        # a base model may answer a turn with nothing, which leaves no history to compact:
        # three turns before the long one make one with an answer all but certain
        [BLOCKS[0], *QUESTIONS[:3], too_long, "Name a fruit."],
        llm=llm(checked_server, completion_limit_param="max_tokens"),
    )
    window = f"context window ({CONTEXT_WINDOW:,} tokens)"
    assert out.count(window) == 1, out  # the long message's reply says what to shorten
    assert "overflowed the model's context window" in err  # compacted, asked once more
    assert f"context window is {CONTEXT_WINDOW} tokens" in err
    after = out.split(window, 1)[1].split("\n", 1)[1]  # the answer to the next message
    assert after.strip() and not any(failure in after for failure in FAILURES), out

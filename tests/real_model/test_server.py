"""What llama.cpp's server supports, as `pinbot check-config --online` reports it, and tokens
as the model counts them: the prompt the server received is exactly the messages pinbot sent,
and /pin status's estimate of what blocks cost is set against the count."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from llama_cpp.llama_chat_format import format_llama2

from tests.process import run_pinbot
from tests.real_model.server import MODEL, LlamaServer
from tests.real_model.tokens import BLOCK_SETS, measure, messages, prompt_tokens, table

pytestmark = pytest.mark.xdist_group("real-model")
TOLERANCE = 0.15  # the estimate may be off by this share of the counted tokens


async def test_check_config_online_reports_what_the_server_supports(
    tmp_path: Path, checked_server: LlamaServer
) -> None:
    config = tmp_path / "config.yaml"
    settings = {
        "storage": {"path": str(tmp_path / "pins.sqlite3")},
        "llm": {"backend": "openai", "base_url": checked_server.base_url, "model": MODEL},
    }
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    code, out, _ = await run_pinbot(
        "check-config", "--online", "--config", str(config), env={"OPENAI_API_KEY": "sk-none"}
    )
    assert code == 0, out
    lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert lines["llm"] == "ok"
    assert lines["llm completion limit"].startswith(
        "max_tokens (the server ignores max_completion_tokens: it wrote past a limit of 2 tokens)"
    )
    assert lines["llm usage in streams"].startswith("no ")
    assert lines["llm cached tokens"] == "not reported"
    assert lines["llm tools"].startswith("ignored ")
    assert lines["llm context window"] == "not stated"


def test_the_server_receives_exactly_the_messages_sent(checked_server: LlamaServer) -> None:
    # Its fallback chat format (llama-2's) around pinbot's messages, blocks and wrappers
    # included: the tokens it reports are those of that prompt (BOS included), no more.
    for _, blocks in (BLOCK_SETS[2], BLOCK_SETS[5]):  # both levels; Chinese
        sent = messages(blocks)
        prompt = format_llama2(sent).prompt
        assert prompt_tokens(checked_server, sent) == checked_server.count(prompt)


def test_pin_status_estimate_against_the_counted_tokens(checked_server: LlamaServer) -> None:
    rows = measure(checked_server)
    off = [row for row in rows if abs(row.error) > TOLERANCE]
    assert not off, table(rows)

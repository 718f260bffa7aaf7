"""Tokens as the model counts them: what pinbot's blocks (with their wrappers) add to a request,
as llama.cpp's server counts them (its tokenizer, on the prompt it makes), beside the estimate
/pin status shows.

`python -m tests.real_model.tokens` starts the server and prints the table of
docs/performance.md ("Estimated vs counted").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from llama_cpp.llama_chat_format import format_llama2

from bot.config import LlmConfig
from bot.core.conversation.render import SECTION_SEPARATOR, estimate, ordered, render
from storage.models import Block, Level, State
from tests.real_model.server import LlamaServer

USER_TEXT = "What should I do next?"
SYSTEM = LlmConfig().system_prompt
RULE = "Answer in English, in short sentences, and say when you are unsure about a fact."
NOTE = (
    "The project ships a chat bot for Telegram and Feishu. Its pinned blocks are kept in "
    "SQLite or PostgreSQL, and every change is reviewed by one policy before it is written. "
)
CJK_NOTE = "这个项目为电报和飞书提供聊天机器人。固定的内容块保存在数据库中，每次修改都先经过审核。"


def _block(number: int, label: str, content: str, level: Level) -> Block:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    return Block(number, "console:direct:42", label, content, level, State.ACTIVE, 0, at, at)


def _set(strong: int, context: int, rule: str, note: str) -> list[Block]:
    blocks = [_block(i, f"rule{i}", rule, Level.STRONG) for i in range(strong)]
    return blocks + [_block(100 + i, f"note{i}", note, Level.CONTEXT) for i in range(context)]


# (what, the personal blocks)
BLOCK_SETS: list[tuple[str, list[Block]]] = [
    ("1 strong block, 80 characters", _set(1, 0, RULE, "")),
    ("1 context block, 180 characters", _set(0, 1, "", NOTE)),
    ("1 strong + 1 context", _set(1, 1, RULE, NOTE)),
    ("3 strong + 3 context, 500 characters each", _set(3, 3, RULE * 6, NOTE * 3)),
    ("4 context blocks, 360 characters each", _set(0, 4, "", NOTE * 2)),
    ("2 context blocks in Chinese, 48 characters each", _set(0, 2, "", CJK_NOTE)),
]


def messages(blocks: list[Block]) -> list[dict[str, Any]]:
    """The messages pinbot sends for USER_TEXT with these personal blocks (ChatService's
    build_messages: the strong section after the system prompt, the context one before the
    user's words)."""
    rendered = render(ordered([], blocks), USER_TEXT)
    system = SYSTEM + (SECTION_SEPARATOR + rendered.strong if rendered.strong else "")
    user = (rendered.context + SECTION_SEPARATOR if rendered.context else "") + USER_TEXT
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class Row:
    """One block set: its characters, the estimate /pin status shows and the tokens the
    server counted (prompt tokens with the blocks minus without)."""

    what: str
    chars: int
    estimated: int
    counted: int

    @property
    def error(self) -> float:
        """How far the estimate is off, as a share of the counted tokens (+ over, - under)."""
        return (self.estimated - self.counted) / self.counted


def prompt_tokens(server: LlamaServer, sent: list[dict[str, Any]]) -> int:
    """The prompt tokens the server reports for these messages (one completion token)."""
    return int(server.chat(sent)["usage"]["prompt_tokens"])


def counted(server: LlamaServer, blocks: list[Block]) -> int:
    """The tokens of the prompt the server makes of the messages for these blocks, by its
    tokenizer: what it reports as prompt tokens (test_server.py holds the two equal) without
    the time evaluating the prompt takes."""
    return server.count(format_llama2(messages(blocks)).prompt)


def measure(server: LlamaServer) -> list[Row]:
    """Each block set measured against the server."""
    bare = counted(server, [])
    rows = []
    for what, blocks in BLOCK_SETS:
        rendered = render(ordered([], blocks), USER_TEXT)
        chars = sum(
            len(section) + len(SECTION_SEPARATOR)
            for section in (rendered.strong, rendered.context)
            if section
        )
        rows.append(Row(what, chars, estimate([], blocks).total, counted(server, blocks) - bare))
    return rows


def table(rows: list[Row]) -> str:
    """The rows as docs/performance.md shows them."""
    lines = [
        "| blocks | characters | estimated | counted | estimate off by |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.what} | {r.chars:,} | {r.estimated:,} | {r.counted:,} | {r.error:+.0%} |"
        for r in rows
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    running = LlamaServer().start()
    try:
        print(table(measure(running)))
    finally:
        running.stop()

"""The default backend: needs no network or key and answers deterministically, naming the pinned
blocks that reached it, so a user can see exactly what the model was given."""

from __future__ import annotations

import re

from bot.llm.base import Message, ModelReply, TextSink, Tool
from bot.llm.summary import SUMMARY_INSTRUCTIONS

_SECTION = re.compile(r"^\[(pin-[0-9a-f]{16}) pinned (?:rules|reference material)\]$", re.M)


def _blocks_seen(messages: list[Message]) -> list[str]:
    seen: list[str] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            continue
        for marker in _SECTION.findall(content):
            header = re.compile(
                rf"^\[{re.escape(marker)} block (strong|context) (shared|personal) label=(.*)\]$",
                re.M,
            )
            seen.extend(
                f"{label} ({level}, {scope})" for level, scope, label in header.findall(content)
            )
    return seen


def _user_words(message: Message) -> str:
    content = str(message.get("content", ""))
    # The user's words follow the context section, when there is one.
    end = content.rfind(" end pinned reference material]")
    return content[content.index("\n", end) + 1 :].lstrip("\n") if end >= 0 else content


def _summary(transcript: str) -> str:
    said = [
        line[len("user: ") :][:80] for line in transcript.splitlines() if line.startswith("user: ")
    ]
    return "[offline summary] the user said: " + " | ".join(said)


class OfflineChatModel:
    """Answers with the blocks it received, the history length and the user's words."""

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: list[Tool] | None = None,
        on_text: TextSink | None = None,
    ) -> ModelReply:
        """A deterministic reply describing the request (or summarising it, when asked to)."""
        if messages and messages[0].get("content") == SUMMARY_INSTRUCTIONS:
            return ModelReply(_summary(str(messages[-1].get("content", ""))))
        blocks = _blocks_seen(messages)
        history = sum(1 for m in messages[1:-1] if m.get("role") in ("user", "assistant"))
        said = _user_words(messages[-1]) if messages else ""
        listed = "; ".join(blocks) if blocks else "none"
        return ModelReply(
            f"[offline model] pinned blocks: {listed}. "
            f"Earlier messages: {history}. You said: {said}"
        )

    async def close(self) -> None:
        """Nothing to release."""

"""The default backend: needs no network or key and answers deterministically, naming the pinned
blocks that reached it, so a user can see exactly what the model was given."""

from __future__ import annotations

import re

from bot.llm.base import Message

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
            seen.extend(f"{label} ({level}, {scope})" for level, scope, label in
                        header.findall(content))
    return seen


def _user_words(message: Message) -> str:
    content = str(message.get("content", ""))
    # The user's words follow the context section, when there is one.
    end = content.rfind(" end pinned reference material]")
    return content[content.index("\n", end) + 1 :].lstrip("\n") if end >= 0 else content


class OfflineChatModel:
    """Answers with the blocks it received, the history length and the user's words."""

    async def complete(self, messages: list[Message]) -> str:
        """A deterministic reply describing the request."""
        blocks = _blocks_seen(messages)
        history = sum(1 for m in messages[1:-1] if m.get("role") in ("user", "assistant"))
        said = _user_words(messages[-1]) if messages else ""
        listed = "; ".join(blocks) if blocks else "none"
        return (f"[offline model] pinned blocks: {listed}. "
                f"Earlier messages: {history}. You said: {said}")

    async def close(self) -> None:
        """Nothing to release."""

"""The request that asks the model to compact old conversation turns into one summary."""

from __future__ import annotations

from collections.abc import Sequence

from bot.llm.base import ModelRequest

SUMMARY_INSTRUCTIONS = (
    "You compact chat history. Summarise the conversation below in at most 200 words: keep "
    "facts, decisions, open questions and the user's preferences; write in the conversation's "
    "language; output only the summary."
)
ROLE_NAMES = {"user": "user", "assistant": "assistant", "summary": "earlier summary"}


def summary_request(entries: Sequence[tuple[str, str]]) -> ModelRequest:
    """The request that asks for a summary of (role, content) history entries."""
    transcript = "\n".join(f"{ROLE_NAMES.get(role, role)}: {content}" for role, content in entries)
    messages = [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": transcript},
    ]
    return ModelRequest(messages, purpose="summary", summarised=tuple(entries))

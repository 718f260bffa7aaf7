"""The requests that ask the model, at a compaction, for facts worth pinning: in the same call as
the summary (one tool the model must call with both), or, where the model server takes no tools,
in one call of their own that answers in JSON; and how their answers are read."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.llm.base import ModelReply, ModelRequest, Tool
from bot.llm.summary import framed_transcript

COMPACT_TOOL = "compact_history"
MAX_READ = 10  # suggestions read from one answer at most (pins.suggest_max is at most 10)

# What is worth a pin: in a DM, facts about the user; in a group, what the group shares, and
# never a fact about one person (a group's shared blocks go to every member's requests).
_WORTH_DM = (
    "facts from this conversation that are durable and worth keeping for later conversations: "
    "the user's lasting preferences, facts about them or their work, decisions that stay true."
)
_WORTH_GROUP = (
    "facts from this group conversation that are durable and worth keeping for the group's "
    "later conversations: the group's decisions, conventions and agreed ways of working, and "
    "shared reference facts (dates, names of shared things, where things are). Never a fact "
    "about one person (their preferences, health, private life or contact details), even if "
    "they said it themselves."
)
_EACH = (
    " Each has a short label (one word, no spaces), the content (one or two sentences, in the "
    "conversation's language) and a one-line reason. Suggest nothing temporary, nothing "
    "obvious, and never a secret (passwords, keys, tokens); none at all is a fine answer."
)
_COMBINED = (
    "You compact chat history. Summarise the conversation below in at most 200 words: keep "
    "facts, decisions, open questions and the user's preferences; write in the conversation's "
    f"language. Call {COMPACT_TOOL} once, with the summary and at most {{most}} suggestions: "
)
_ALONE = "You read a chat conversation and suggest at most {most} "
_ALONE_ANSWER = (
    " Answer with only a JSON object, nothing before or after it: "
    '{"suggestions": [{"label": "...", "content": "...", "reason": "..."}]}'
)


def _worth(group: bool) -> str:
    """What the model is asked to suggest, in a group or a DM."""
    return (_WORTH_GROUP if group else _WORTH_DM) + _EACH


_SUGGESTION_ITEM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "description": "One word, no spaces."},
        "content": {"type": "string", "description": "The fact, one or two sentences."},
        "reason": {"type": "string", "description": "Why it is worth keeping, one line."},
    },
    "required": ["label", "content", "reason"],
}


@dataclass(frozen=True)
class Candidate:
    """One suggestion as the model made it, not yet checked."""

    label: str
    content: str
    reason: str


@dataclass(frozen=True)
class Compacted:
    """What the combined call answered: the summary ('' when it gave none) and its
    suggestions; readable False when it called the tool with arguments that could not be read."""

    summary: str
    candidates: list[Candidate]
    readable: bool = True


def compact_tool(most: int) -> Tool:
    """The one tool of the combined call: the summary and at most `most` suggestions."""
    return {
        "type": "function",
        "function": {
            "name": COMPACT_TOOL,
            "description": "Record the summary of the conversation and the facts worth pinning.",
            "parameters": {
                "type": "object",
                "properties": {
                    "summary": {"type": "string", "description": "The summary."},
                    "suggestions": {"type": "array", "items": _SUGGESTION_ITEM, "maxItems": most},
                },
                "required": ["summary", "suggestions"],
            },
        },
    }


def compaction_request(
    entries: Sequence[tuple[str, str]], most: int, *, group: bool = False
) -> ModelRequest:
    """The summary request with suggestions in the same call: one tool, which must be called.
    group: the suggestions are for a group's shared blocks (the group's facts, no one's own)."""
    framed, rules = framed_transcript(entries)
    instructions = _COMBINED.format(most=most) + _worth(group)
    messages = [
        {"role": "system", "content": f"{instructions}\n{rules}"},
        {"role": "user", "content": framed},
    ]
    return ModelRequest(
        messages,
        tools=[compact_tool(most)],
        tool_choice="required",
        purpose="summary",
        summarised=tuple(entries),
    )


def suggestions_request(
    entries: Sequence[tuple[str, str]], most: int, *, group: bool = False
) -> ModelRequest:
    """The call of its own, for a model server without tools: suggestions as JSON text (group
    as for compaction_request)."""
    framed, rules = framed_transcript(entries)
    instructions = _ALONE.format(most=most) + _worth(group) + _ALONE_ANSWER
    messages = [
        {"role": "system", "content": f"{instructions}\n{rules}"},
        {"role": "user", "content": framed},
    ]
    return ModelRequest(messages, purpose="suggestions", summarised=tuple(entries))


def read_compaction(reply: ModelReply) -> Compacted:
    """The summary and suggestions of the combined call's answer. A model that answered in
    text instead of calling the tool gave its summary only."""
    call = next((c for c in reply.tool_calls if c.name == COMPACT_TOOL), None)
    if call is None:
        return Compacted(reply.text.strip(), [])
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return Compacted(reply.text.strip(), [], readable=False)
    if not isinstance(arguments, dict) or not isinstance(arguments.get("summary"), str):
        return Compacted(reply.text.strip(), [], readable=False)
    return Compacted(arguments["summary"].strip(), _candidates(arguments.get("suggestions")))


def read_suggestions(text: str) -> list[Candidate] | None:
    """The suggestions of the call of their own: its JSON object (or bare list), found in the
    text even inside a code fence or after a sentence; None when no JSON could be read."""
    for opening, closing in (("{", "}"), ("[", "]")):
        start, end = text.find(opening), text.rfind(closing)
        if start == -1 or end <= start:
            continue
        try:
            found = json.loads(text[start : end + 1])
        except ValueError:
            continue
        if isinstance(found, dict):
            found = found.get("suggestions")
        if isinstance(found, list):
            return _candidates(found)
    return None


def _candidates(items: Any) -> list[Candidate]:
    """Each well-formed item (label, content and reason, all text) of the model's list."""
    found = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        label, content, reason = (item.get(key) for key in ("label", "content", "reason"))
        if isinstance(label, str) and isinstance(content, str):
            found.append(
                Candidate(label.strip(), content.strip(), reason if isinstance(reason, str) else "")
            )
        if len(found) >= MAX_READ:
            break
    return found


__all__ = [
    "COMPACT_TOOL",
    "Candidate",
    "Compacted",
    "compaction_request",
    "read_compaction",
    "read_suggestions",
    "suggestions_request",
]

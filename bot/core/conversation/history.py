"""Which history entries go to the model, and which are compacted when history grows too big."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.core.people import ChatKind, Conversation, sender_session
from bot.llm.base import Message
from storage.models import HistoryEntry

SUMMARY_ROLE = "summary"
SUMMARY_PREFIX = "Summary of our earlier conversation (older messages were compacted):\n"


def history_key(conversation: Conversation, *, per_sender: bool) -> str:
    """Where a conversation's history is kept: per chat (and topic), or per sender in groups
    when per_sender (`chat.history_per_sender`) is on."""
    key = conversation.session_key
    if per_sender and conversation.kind is ChatKind.GROUP and conversation.sender_id:
        key = sender_session(key, conversation.sender_id)
    return key


@dataclass(frozen=True)
class HistoryPlan:
    """History split into what is sent as it is and what must be compacted first."""

    kept: list[HistoryEntry]
    older: list[HistoryEntry]  # the summary (if any) and the oldest turns, to compact

    @property
    def needs_compaction(self) -> bool:
        """Whether anything has to be summarised or dropped before the request."""
        return bool(self.older)


def _turns(entries: Sequence[HistoryEntry]) -> list[list[HistoryEntry]]:
    turns: list[list[HistoryEntry]] = []
    for entry in entries:
        if entry.role == "user" or not turns:
            turns.append([entry])
        else:
            turns[-1].append(entry)
    return turns


def _size(entries: Sequence[HistoryEntry]) -> int:
    return sum(len(entry.content) for entry in entries)


def plan_history(
    entries: Sequence[HistoryEntry], max_chars: int, max_turns: int, keep_turns: int
) -> HistoryPlan:
    """Keep everything while history is within max_chars and max_turns; past either, keep the
    newest keep_turns turns that fit in max_chars and mark the rest (with any summary) as older."""
    summary = [e for e in entries if e.role == SUMMARY_ROLE]
    turns = _turns([e for e in entries if e.role != SUMMARY_ROLE])
    if _size(entries) <= max_chars and len(turns) <= max_turns:
        return HistoryPlan(list(entries), [])
    kept: list[HistoryEntry] = []
    count = 0
    for turn in reversed(turns):
        if count >= min(keep_turns, max_turns) or _size(kept) + _size(turn) > max_chars:
            break
        kept[:0] = turn
        count += 1
    older = summary + [e for turn in turns[: len(turns) - count] for e in turn]
    return HistoryPlan(kept, older)


def history_messages(entries: Sequence[HistoryEntry]) -> list[Message]:
    """History as chat messages; a summary becomes a user message that says what it is."""
    return [
        {"role": "user", "content": SUMMARY_PREFIX + entry.content}
        if entry.role == SUMMARY_ROLE
        else {"role": entry.role, "content": entry.content}
        for entry in entries
    ]

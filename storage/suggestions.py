"""Pin suggestions: facts the model suggested at a compaction for a DM user's blocks, stored with
a short number per scope and decided once (pinned, dismissed, or expired). Dismissed ones stay:
their content is not suggested again in that scope."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from storage.dialect import Database, Row
from storage.rows import dt, ts


class SuggestionStatus(StrEnum):
    """Where a suggestion stands: waiting for its user, or decided (and how)."""

    PENDING = "pending"
    PINNED = "pinned"
    DISMISSED = "dismissed"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class NewSuggestion:
    """A suggested block for a scope: its label, content and why; content_key is the content
    as it was compared when stored (see bot.core.decisions.suggestions.content_key)."""

    scope: str
    label: str
    content: str
    reason: str
    content_key: str


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A stored suggestion: its number within the scope, what it suggests, where it stands, and
    the message that shows it (chat and message id, once posted)."""

    number: int
    new: NewSuggestion
    status: SuggestionStatus
    created_at: datetime
    expires_at: datetime
    chat: str | None = None
    message_id: str | None = None


_COLUMNS = (
    "number, scope, label, content, reason, content_key, status, created_at, expires_at, "
    "chat, message_id"
)


def _suggestion(row: Row) -> Suggestion:
    new = NewSuggestion(row[1], row[2], row[3], row[4], row[5])
    return Suggestion(
        row[0], new, SuggestionStatus(row[6]), dt(row[7]), dt(row[8]), row[9], row[10]
    )


class SuggestionStore(Protocol):
    """The store's pin suggestions."""

    _db: Database

    async def add_suggestion(
        self, new: NewSuggestion, *, now: datetime, expires_at: datetime, max_pending: int
    ) -> Suggestion | None:
        """Store a pending suggestion under the scope's next number; None when the scope already
        holds max_pending suggestions that are pending and not expired."""
        async with self._db.transaction(new.scope) as tx:
            row = await tx.fetchrow(
                "SELECT COALESCE(MAX(number), 0), COALESCE(SUM(CASE WHEN status = 'pending' "
                "AND expires_at > ? THEN 1 ELSE 0 END), 0) FROM suggestions WHERE scope = ?",
                *(ts(now), new.scope),
            )
            assert row is not None
            if int(row[1]) >= max_pending:
                return None
            number = int(row[0]) + 1
            await tx.execute(
                f"INSERT INTO suggestions ({_COLUMNS}, decided_at) VALUES ({', '.join('?' * 12)})",
                *(number, new.scope, new.label, new.content, new.reason, new.content_key),
                *(SuggestionStatus.PENDING.value, ts(now), ts(expires_at), None, None, None),
            )
        return Suggestion(number, new, SuggestionStatus.PENDING, now, expires_at)

    async def set_suggestion_message(
        self, scope: str, number: int, chat: str, message_id: str
    ) -> None:
        """Remember the message that shows a suggestion."""
        await self._db.execute(
            "UPDATE suggestions SET chat = ?, message_id = ? WHERE scope = ? AND number = ?",
            *(chat, message_id, scope, number),
        )

    async def suggestion(self, scope: str, number: int) -> Suggestion | None:
        """One suggestion of a scope by its number."""
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM suggestions WHERE scope = ? AND number = ?", scope, number
        )
        return None if row is None else _suggestion(row)

    async def suggestion_at(self, scope: str, chat: str, message_id: str) -> bool:
        """Whether a message (chat and id) shows one of a scope's suggestions."""
        row = await self._db.fetchrow(
            "SELECT 1 FROM suggestions WHERE scope = ? AND chat = ? AND message_id = ?",
            *(scope, chat, message_id),
        )
        return row is not None

    async def open_suggestions(self, scope: str) -> list[Suggestion]:
        """A scope's pending suggestions (expired ones too, until marked) and dismissed ones,
        oldest first: what a new suggestion may not repeat."""
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM suggestions WHERE scope = ? "
            "AND status IN ('pending', 'dismissed') ORDER BY number",
            scope,
        )
        return [_suggestion(row) for row in rows]

    async def decide_suggestion(
        self, scope: str, number: int, status: SuggestionStatus, *, now: datetime
    ) -> bool:
        """Mark a pending suggestion decided; False when it was decided already."""
        return bool(
            await self._db.execute(
                "UPDATE suggestions SET status = ?, decided_at = ? "
                "WHERE scope = ? AND number = ? AND status = 'pending'",
                *(status.value, ts(now), scope, number),
            )
        )

    async def rejected_contents(self, group_scope: str) -> list[str]:
        """The contents of a group's rejected proposals: what its shared admins declined."""
        rows = await self._db.fetch(
            "SELECT content FROM proposals WHERE group_scope = ? AND status = 'rejected'",
            group_scope,
        )
        return [str(row[0]) for row in rows]

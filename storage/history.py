"""Conversation history: the turns each session's model sees, and the summary that replaces
older ones."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from storage.dialect import Database, Step
from storage.models import HistoryEntry
from storage.rows import PendingCalls, ts

_DROP = "DELETE FROM history WHERE session = ? AND id IN (?*)"


def group_history_forgotten(group: str, sessions_prefix: str) -> Step:
    """The statement forgetting a group's conversations: its own session, and those whose keys
    start with sessions_prefix (its topics and per-sender histories)."""
    return Step(
        "DELETE FROM history WHERE session = ? OR substr(session, 1, length(?)) = ?",
        (group, sessions_prefix, sessions_prefix),
    )


class HistoryStore(Protocol):
    """The history of every conversation (a turn's write also writes the counted model calls)."""

    _db: Database
    _pending_calls: PendingCalls

    async def history(self, session: str) -> list[HistoryEntry]:
        """The stored history: its summary (if any) first, then turns oldest first."""
        rows = await self._db.fetch(
            "SELECT id, role, content FROM history WHERE session = ? "
            "ORDER BY role != 'summary', id",
            session,
        )
        return [HistoryEntry(*row) for row in rows]

    async def append_turn(
        self,
        session: str,
        user_text: str,
        reply: str,
        *,
        now: datetime,
        sender: str | None = None,
        drop_ids: Sequence[int] = (),
        sent: str | None = None,
    ) -> None:
        """Record one completed turn (both messages or neither) as sender's, with the model
        calls counted so far, and forget drop_ids; all in one transaction. sent records which
        blocks went with the turn's request, and why (for /pin why)."""
        turn = Step(
            "INSERT INTO history (session, role, content, created_at, sender, sent) VALUES "
            "(?, 'user', ?, ?, ?, ?), (?, 'assistant', ?, ?, ?, NULL)",
            (session, user_text, ts(now), sender, sent, session, reply, ts(now), sender),
        )
        drop = (Step(_DROP, (session, list(drop_ids))),) if drop_ids else ()
        async with self._pending_calls.writing() as calls:
            await self._db.write(turn, *calls, *drop)

    async def last_sent(self, session: str, sender: str | None) -> str | None:
        """What sender's last kept turn of session recorded of the blocks that went with its
        request (None: no turn of theirs is kept, or it recorded nothing)."""
        who = "sender = ?" if sender is not None else "sender IS NULL"
        sent: str | None = await self._db.fetchval(
            f"SELECT sent FROM history WHERE session = ? AND role = 'user' AND {who} "
            "ORDER BY id DESC LIMIT 1",
            *((session, sender) if sender is not None else (session,)),
        )
        return sent

    async def compact_history(
        self, session: str, drop_ids: Sequence[int], summary: str | None, *, now: datetime
    ) -> None:
        """Replace the entries in drop_ids with summary (or just forget them), in one
        transaction."""
        steps = [Step(_DROP, (session, list(drop_ids)))]
        if summary is not None:
            steps += [
                Step("DELETE FROM history WHERE session = ? AND role = 'summary'", (session,)),
                Step(
                    "INSERT INTO history (session, role, content, created_at) "
                    "VALUES (?, 'summary', ?, ?)",
                    (session, summary, ts(now)),
                ),
            ]
        await self._db.write(*steps)

    async def clear_history(self, session: str) -> int:
        """Forget a conversation's history (never its blocks); returns entries deleted."""
        return await self._db.execute("DELETE FROM history WHERE session = ?", session)

    async def forget_history_before(self, moment: datetime) -> int:
        """Forget the turns and summaries of every conversation written before moment
        (retention); returns how many entries went."""
        return await self._db.execute("DELETE FROM history WHERE created_at < ?", ts(moment))

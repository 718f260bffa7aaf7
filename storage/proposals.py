"""Proposals to change a group's shared blocks: stored with a short number per group, decided
once. An approved proposal is marked applied in the same transaction as the block change it
makes (the change's origin names it: see storage.changes), and only while it is pending."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from storage.dialect import Database, Row
from storage.models import (
    Level,
    NewProposal,
    Proposal,
    ProposalStatus,
)
from storage.rows import dt, ts

_COLUMNS = (
    "number, group_scope, label, content, level, priority, reason, proposer, base_rev, "
    "base_content, status, outcome, created_at, expires_at, decided_by, decided_at, chat, "
    "message_id, base_version"
)
_DECIDE = (
    "UPDATE proposals SET status = ?, outcome = ?, decided_by = ?, decided_at = ? "
    "WHERE group_scope = ? AND number = ? AND status = 'pending'"
)


def _proposal(row: Row) -> Proposal:
    new = NewProposal(
        *(row[1], row[2], row[3], Level(row[4]) if row[4] else None, row[5], row[6], row[7]),
        *(row[8], row[9], row[18]),
    )
    return Proposal(
        *(row[0], new, ProposalStatus(row[10]), row[11], dt(row[12]), dt(row[13]), row[14]),
        *(None if row[15] is None else dt(row[15]), row[16], row[17]),
    )


class ProposalStore(Protocol):
    """The store's proposals."""

    _db: Database

    async def add_proposal(
        self, new: NewProposal, *, now: datetime, expires_at: datetime, max_pending: int
    ) -> Proposal | None:
        """Store a pending proposal under the group's next number; None when the group already
        holds max_pending proposals that are pending and not expired."""
        async with self._db.transaction(new.group_scope) as tx:
            row = await tx.fetchrow(
                "SELECT COALESCE(MAX(number), 0), COALESCE(SUM(CASE WHEN status = 'pending' "
                "AND expires_at > ? THEN 1 ELSE 0 END), 0) FROM proposals WHERE group_scope = ?",
                *(ts(now), new.group_scope),
            )
            assert row is not None
            if int(row[1]) >= max_pending:
                return None
            number = int(row[0]) + 1
            level = new.level.value if new.level else None
            await tx.execute(
                f"INSERT INTO proposals ({_COLUMNS}) VALUES ({', '.join('?' * 19)})",
                *(number, new.group_scope, new.label, new.content, level, new.priority),
                *(new.reason, new.proposer, new.base_rev, new.base_content),
                *(ProposalStatus.PENDING.value, "", ts(now), ts(expires_at)),
                *(None, None, None, None, new.base_version),
            )
        return Proposal(number, new, ProposalStatus.PENDING, "", now, expires_at)

    async def set_proposal_message(
        self, group_scope: str, number: int, chat: str, message_id: str
    ) -> None:
        """Remember the message that shows a proposal."""
        await self._db.execute(
            "UPDATE proposals SET chat = ?, message_id = ? WHERE group_scope = ? AND number = ?",
            *(chat, message_id, group_scope, number),
        )

    async def proposal(self, group_scope: str, number: int) -> Proposal | None:
        """One proposal of a group by its number."""
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM proposals WHERE group_scope = ? AND number = ?",
            *(group_scope, number),
        )
        return None if row is None else _proposal(row)

    async def pending_proposals(self, group_scope: str) -> list[Proposal]:
        """A group's pending proposals (expired ones too, until marked), oldest first."""
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM proposals WHERE group_scope = ? AND status = 'pending' "
            "ORDER BY number",
            group_scope,
        )
        return [_proposal(row) for row in rows]

    async def decide_proposal(
        self,
        group_scope: str,
        number: int,
        status: ProposalStatus,
        *,
        by: str,
        outcome: str,
        now: datetime,
    ) -> bool:
        """Mark a pending proposal decided; False when it was decided already (only one
        decision ever counts)."""
        args = (status.value, outcome, by, ts(now), group_scope, number)
        return bool(await self._db.execute(_DECIDE, *args))

"""Decisions: what the model proposes and people decide, numbered per scope, expiring and
decided once, each shown by a message. Two kinds, each in its own table with the shared columns
(number, status, created_at, expires_at, decided_at, chat, message_id) beside its own: a group's
proposals to change its shared blocks (who decided and the outcome kept too; an approved one is
marked applied in the same transaction as its block change, see storage.changes), and a DM
user's pin suggestions (dismissed ones stay: their content is not suggested again)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from datetime import datetime
from enum import Enum, StrEnum
from typing import Generic, Protocol, TypeVar

from storage.dialect import Database, Row, Step
from storage.models import (
    Decision,
    Level,
    NewProposal,
    NewSuggestion,
    ProposalStatus,
    SuggestionStatus,
)
from storage.rows import dt, ts

N = TypeVar("N", NewProposal, NewSuggestion)
S = TypeVar("S", bound=StrEnum)
_SHARED = "number, status, created_at, expires_at, chat, message_id, decided_at"


@dataclass(frozen=True)
class Kind(Generic[N, S]):
    """One kind of decision as stored: its table, the columns of what it decides
    (comma-separated, in the order of N's fields, the scope's first), how N is read from them,
    its statuses, and whether the table keeps who decided and the outcome."""

    table: str
    columns: str
    read: Callable[[Row], N]
    status: type[S]
    decider: bool = False

    @property
    def scope(self) -> str:
        """The scope's column."""
        return self.columns.partition(",")[0]

    @property
    def selected(self) -> str:
        """The columns a decision is read from."""
        decider = "decided_by, outcome" if self.decider else "NULL, ''"
        return f"{_SHARED}, {decider}, {self.columns}"

    def decision(self, row: Row) -> Decision[N, S]:
        """A decision from a row of `selected`."""
        decided = None if row[6] is None else dt(row[6])
        return Decision(
            *(row[0], self.read(row[9:]), self.status(row[1]), dt(row[2]), dt(row[3])),
            *(row[4], row[5], decided, row[7], row[8] or ""),
        )


PROPOSALS: Kind[NewProposal, ProposalStatus] = Kind(
    "proposals",
    "group_scope, label, content, level, priority, reason, proposer, base_rev, base_content, "
    "base_version",
    lambda row: NewProposal(row[0], row[1], row[2], Level(row[3]) if row[3] else None, *row[4:]),
    ProposalStatus,
    decider=True,
)
SUGGESTIONS: Kind[NewSuggestion, SuggestionStatus] = Kind(
    "suggestions",
    "scope, label, content, reason, content_key",
    lambda row: NewSuggestion(*row),
    SuggestionStatus,
)


def group_decisions_forgotten(group: str, members_prefix: str) -> list[tuple[str, Step]]:
    """The statements forgetting a group's decisions (counted as "proposals"): its proposals,
    and any pin suggestion of its members' scopes (whose keys start with members_prefix)."""
    suggestions = "DELETE FROM suggestions WHERE substr(scope, 1, length(?)) = ?"
    return [
        ("proposals", Step("DELETE FROM proposals WHERE group_scope = ?", (group,))),
        ("proposals", Step(suggestions, (members_prefix, members_prefix))),
    ]


def _stored(value: object) -> object:
    return value.value if isinstance(value, Enum) else value


class DecisionStore(Protocol):
    """The store's decisions of every kind."""

    _db: Database

    async def add_decision(
        self,
        kind: Kind[N, S],
        new: N,
        *,
        now: datetime,
        expires_at: datetime,
        max_pending: int,
        note: tuple[str, str] | None = None,
    ) -> Decision[N, S] | None:
        """Store a pending decision under its scope's next number; None when the scope already
        holds max_pending of this kind that are pending and not expired. With note (a name and
        a text), keep on the scope, in the same transaction, the note of that name whose text is
        that text followed by the decision's number: the two are written together or not at
        all."""
        async with self._db.transaction(new.scope) as tx:
            row = await tx.fetchrow(
                "SELECT COALESCE(MAX(number), 0), COALESCE(SUM(CASE WHEN status = 'pending' "
                f"AND expires_at > ? THEN 1 ELSE 0 END), 0) FROM {kind.table} "
                f"WHERE {kind.scope} = ?",
                *(ts(now), new.scope),
            )
            assert row is not None
            if int(row[1]) >= max_pending:
                return None
            number = int(row[0]) + 1
            values: list[object] = [number, "pending", ts(now), ts(expires_at)]
            values += map(_stored, astuple(new))
            columns = f"number, status, created_at, expires_at, {kind.columns}"
            if kind.decider:  # the outcome stays empty until an approval fails
                columns, values = f"{columns}, outcome", [*values, ""]
            await tx.execute(
                f"INSERT INTO {kind.table} ({columns}) VALUES ({', '.join('?' * len(values))})",
                *values,
            )
            if note is not None:
                name, text = note
                await tx.execute(
                    "INSERT INTO scope_notes (scope, name, text, at) VALUES (?, ?, ?, ?) ON "
                    "CONFLICT (scope, name) DO UPDATE SET text = excluded.text, at = excluded.at",
                    *(new.scope, name, f"{text} {number}", ts(now)),
                )
        return Decision(number, new, kind.status("pending"), now, expires_at)

    async def decision(self, kind: Kind[N, S], scope: str, number: int) -> Decision[N, S] | None:
        """One decision of a scope by its number."""
        found = await self._decisions(kind, scope, "number = ?", number)
        return found[0] if found else None

    async def decisions(
        self, kind: Kind[N, S], scope: str, statuses: Sequence[str] = ("pending",)
    ) -> list[Decision[N, S]]:
        """A scope's decisions of this kind in one of statuses (pending when not given), oldest
        first; pending ones include the expired, until they are marked so."""
        where = f"status IN ({', '.join('?' * len(statuses))})"
        return await self._decisions(kind, scope, where, *map(str, statuses))

    async def shown_at(self, kind: Kind[N, S], scope: str, chat: str, message_id: str) -> bool:
        """Whether a message (chat and id) shows one of a scope's decisions of this kind."""
        return bool(
            await self._decisions(kind, scope, "chat = ? AND message_id = ?", chat, message_id)
        )

    async def _decisions(
        self, kind: Kind[N, S], scope: str, where: str, *args: object
    ) -> list[Decision[N, S]]:
        rows = await self._db.fetch(
            f"SELECT {kind.selected} FROM {kind.table} WHERE {kind.scope} = ? AND {where} "
            "ORDER BY number",
            *(scope, *args),
        )
        return [kind.decision(row) for row in rows]

    async def decide_once(
        self,
        kind: Kind[N, S],
        scope: str,
        number: int,
        status: S,
        *,
        now: datetime,
        by: str = "",
        outcome: str = "",
    ) -> bool:
        """Mark a pending decision decided (by and outcome kept where the kind keeps them);
        False when it was decided already: only one decision ever counts."""
        decider = ", decided_by = ?, outcome = ?" if kind.decider else ""
        return bool(
            await self._db.execute(
                f"UPDATE {kind.table} SET status = ?, decided_at = ?{decider} "
                f"WHERE {kind.scope} = ? AND number = ? AND status = 'pending'",
                *(status.value, ts(now), *((by, outcome) if kind.decider else ()), scope, number),
            )
        )

    async def show_decision(
        self, kind: Kind[N, S], scope: str, number: int, chat: str, message_id: str
    ) -> None:
        """Remember the message that shows a decision."""
        await self._db.execute(
            f"UPDATE {kind.table} SET chat = ?, message_id = ? "
            f"WHERE {kind.scope} = ? AND number = ?",
            *(chat, message_id, scope, number),
        )

"""Rows to records and back: the columns the store reads and writes, times as stored, the
write-behind model-call counter, and the audit rows a change makes."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from storage.dialect import Step
from storage.models import (
    AuditEntry,
    Block,
    Change,
    ChangeKind,
    Channel,
    Level,
    Origin,
    State,
    UsageTotals,
    label_key,
)

BLOCK_COLUMNS = (
    "id, scope, label, content, level, state, priority, created_at, updated_at, "
    "idle_since, idle_calls, rev"
)
USAGE_SUMS = (
    "COALESCE(SUM(calls), 0), COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(cached_tokens), 0), "
    "COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(estimated_calls), 0)"
)
TIMES_CACHED = 65_536  # about the blocks of the 2,000 busiest scopes
# Every table a transfer copies, with the columns it copies (ids are the target's own), in an
# order that keeps each table's rows in their original order.
TABLES = {
    "blocks": (
        "scope, label, label_key, content, level, state, priority, created_at, updated_at, "
        "idle_since, idle_calls, rev",
        "id",
    ),
    "scope_calls": ("scope, calls", "scope"),
    "history": ("session, role, content, created_at", "id"),
    "inbox": ("platform, event_id, chat, position, payload, received_at, done_at", "seq"),
    "shared_audit": (
        "group_scope, at, actor, channel, kind, detail, label, old_content, new_content, origin",
        "id",
    ),
    "usage": (
        "platform, sender, day, group_key, calls, prompt_tokens, cached_tokens, "
        "completion_tokens, estimated_calls",
        "platform, sender, day, group_key",
    ),
}
Dump = dict[str, list[tuple[Any, ...]]]


def ts(moment: datetime) -> float:
    """A time as stored: seconds since the epoch."""
    return moment.timestamp()


@functools.lru_cache(maxsize=TIMES_CACHED)
def dt(value: float) -> datetime:
    """A stored time as an aware UTC datetime. Cached: every turn reads the same blocks' times
    again, and the conversion costs more than the lookup."""
    return datetime.fromtimestamp(value, UTC)


def dt_or_none(value: float | None) -> datetime | None:
    """A stored optional time."""
    return None if value is None else dt(value)


_LEVELS = {level.value: level for level in Level}  # a dict lookup is 10x cheaper than Level(x)
_STATES = {state.value: state for state in State}


class Row(Protocol):
    """A database row: its columns by position (a tuple, or a driver's record)."""

    def __getitem__(self, index: int, /) -> Any: ...


def block_from_row(row: Row) -> Block:
    """A Block from a row of the blocks table, columns in BLOCK_COLUMNS order."""
    return Block(
        id=row[0],
        scope=row[1],
        label=row[2],
        content=row[3],
        level=_LEVELS[row[4]],
        state=_STATES[row[5]],
        priority=row[6],
        created_at=dt(row[7]),
        updated_at=dt(row[8]),
        idle_since=dt_or_none(row[9]),
        idle_calls=row[10],
        rev=row[11],
    )


def totals(row: Sequence[Any]) -> UsageTotals:
    """UsageTotals from a row of USAGE_SUMS."""
    return UsageTotals(*(int(value) for value in row))


_ADD_CALLS = (
    "INSERT INTO scope_calls (scope, calls) VALUES (?, ?) "
    "ON CONFLICT (scope) DO UPDATE SET calls = scope_calls.calls + excluded.calls"
)


class PendingCalls:
    """Model calls counted in memory and not yet written: written with the turn's history,
    before an idle mark reads them, and on close. A crash can lose a few, which only delays an
    idle block's cleanup; it never deletes one early."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def count(self, scopes: Sequence[str], stored: dict[str, int]) -> dict[str, int]:
        """Count one call for each scope; returns, for each scope that has blocks (a key of
        stored), its count before this call."""
        before = {}
        for scope in scopes:
            pending = self._counts.get(scope, 0)
            if scope in stored:
                before[scope] = stored[scope] + pending
            self._counts[scope] = pending + 1
        return before

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[tuple[Step, ...]]:
        """The steps that write every pending count (none if there is none): the counts are
        the caller's while the block runs, and come back if it fails."""
        pending, self._counts = self._counts, {}
        try:
            yield (Step(_ADD_CALLS, list(pending.items()), many=True),) if pending else ()
        except BaseException:
            for scope, number in pending.items():
                self._counts[scope] = self._counts.get(scope, 0) + number
            raise

    def of(self, scope: str) -> int:
        """The pending count of one scope."""
        return self._counts.get(scope, 0)


AUDIT_COLUMNS = (
    "group_scope, actor, channel, kind, detail, label, old_content, new_content, at, origin"
)
AUDIT_INSERT = f"INSERT INTO shared_audit ({AUDIT_COLUMNS}) VALUES ({', '.join('?' * 10)})"


def audit_row(
    scope: str,
    change: Change,
    kind: ChangeKind,
    label: str,
    old: str | None,
    new: str | None,
    at: datetime,
    detail: str = "",
) -> tuple[Any, ...]:
    """A row of AUDIT_COLUMNS for one change."""
    origin = change.origin.encode() if change.origin else None
    return (
        scope,
        change.actor,
        change.channel.value,
        kind.value,
        detail,
        label,
        old,
        new,
        ts(at),
        origin,
    )


def import_audit_rows(
    scope: str,
    before: dict[str, tuple[str, str]],
    blocks: Sequence[Block],
    change: Change,
    now: datetime,
) -> list[tuple[Any, ...]]:
    """Audit rows for each label an import changes; before maps label keys to (label, content)
    as stored."""
    after = {label_key(b.label): (b.label, b.content) for b in blocks}
    entries = [(key, before.get(key), after.get(key)) for key in {*before, *after}]
    return [
        audit_row(
            scope,
            change,
            ChangeKind.IMPORT,
            (new or old or ("", ""))[0],
            old[1] if old else None,
            new[1] if new else None,
            now,
        )
        for _, old, new in sorted(entries, key=lambda e: e[0])
        if old != new
    ]


BLOCK_INSERT_COLUMNS = (
    "scope",
    "label",
    "label_key",
    "content",
    "level",
    "state",
    "priority",
    "created_at",
    "updated_at",
    "idle_since",
    "idle_calls",
)


def block_insert_rows(scope: str, blocks: Sequence[Block]) -> list[tuple[Any, ...]]:
    """Rows for inserting blocks as they are (times, states and all), oldest first, in the
    order of BLOCK_INSERT_COLUMNS."""
    return [
        (
            scope,
            b.label,
            label_key(b.label),
            b.content,
            b.level.value,
            b.state.value,
            b.priority,
            ts(b.created_at),
            ts(b.updated_at),
            None if b.idle_since is None else ts(b.idle_since),
            b.idle_calls,
        )
        for b in sorted(blocks, key=lambda b: b.created_at)
    ]


def audit_from_row(row: Row) -> AuditEntry:
    """An AuditEntry from a row of AUDIT_COLUMNS."""
    return AuditEntry(
        group_scope=row[0],
        actor=row[1],
        channel=Channel(row[2]),
        kind=ChangeKind(row[3]),
        detail=row[4],
        label=row[5],
        old_content=row[6],
        new_content=row[7],
        at=dt(row[8]),
        origin=Origin.decode(row[9]),
    )


def audit_filter(
    *,
    group: str | None,
    actor: str | None,
    kind: ChangeKind | None,
    since: datetime | None,
    until: datetime | None,
) -> tuple[str, list[Any]]:
    """The WHERE clause (possibly empty) and its arguments selecting audit entries."""
    conditions, args = [], []
    for sql, value in (
        ("group_scope = ?", group),
        ("actor = ?", actor),
        ("kind = ?", kind.value if kind else None),
        ("at >= ?", ts(since) if since else None),
        ("at < ?", ts(until) if until else None),
    ):
        if value is not None and value != "":
            args.append(value)
            conditions.append(sql)
    return (f"WHERE {' AND '.join(conditions)}" if conditions else ""), args


def like_pattern(text: str) -> str:
    """A LIKE pattern matching text anywhere, with LIKE's wildcards in text taken literally
    (escaped with a backslash)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def prefix_range(prefix: str) -> tuple[str, str]:
    """[low, high) holding every key that starts with prefix, for an index range scan (callers
    still check the prefix: a database collation other than bytewise may widen the range)."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)

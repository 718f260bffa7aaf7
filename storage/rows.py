"""Rows to records and back: the columns the store reads and writes, times as stored, the
write-behind model-call counter, and the audit rows a change makes."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from storage.dialect import Row, Step
from storage.models import AuditEntry, Author, Block, ChangeKind, Channel, Level, Origin, State

# Every table a transfer copies, with the columns it copies (ids are the target's own), in an
# order that keeps each table's rows in their original order.
TABLES = {
    "blocks": (
        "scope, label, label_key, content, level, state, priority, created_at, updated_at, "
        "idle_since, idle_calls, sensitive, triggers, ends_at, rev",
        "id",
    ),
    "scope_calls": ("scope, calls", "scope"),
    "scope_notes": ("scope, name, text, at", "scope, name"),
    "block_versions": (
        "op, scope, label_key, label, kind, detail, actor, channel, origin, at, existed, "
        "content, level, state, priority, created_at, undone_by, sensitive, triggers, ends_at",
        "id",
    ),
    "proposals": (
        "group_scope, number, label, content, level, priority, reason, proposer, base_rev, "
        "base_content, status, outcome, created_at, expires_at, decided_by, decided_at, chat, "
        "message_id, base_version",
        "id",
    ),
    "suggestions": (
        "scope, number, label, content, reason, content_key, status, created_at, expires_at, "
        "decided_at, chat, message_id",
        "id",
    ),
    "history": ("session, role, content, created_at, sender, sent", "id"),
    "inbox": (
        "platform, event_id, chat, position, payload, received_at, done_at, replies",
        "seq",
    ),
    "shared_audit": (
        "group_scope, at, actor, channel, kind, detail, label, old_content, new_content, origin",
        "id",
    ),
    "usage": (
        "platform, sender, day, group_key, model, calls, prompt_tokens, cached_tokens, "
        "completion_tokens, estimated_calls, cost, priced_calls",
        "platform, sender, day, group_key, model",
    ),
    "usage_compaction": (
        "platform, sender, day, group_key, calls, prompt_tokens, cached_tokens, "
        "completion_tokens, estimated_calls, cost, priced_calls",
        "platform, sender, day, group_key",
    ),
    "removed_groups": ("group_key, chat, removed_at", "group_key"),
    "group_settings": ("place, name, value", "place, name"),
    "group_setting_versions": (
        "op, place, name, before, after, actor, channel, at, undone_by",
        "id",
    ),
}
Dump = dict[str, list[tuple[Any, ...]]]
BLOCK_COLUMNS = (
    "id, scope, label, content, level, state, priority, created_at, updated_at, "
    "idle_since, idle_calls, rev, sensitive, triggers, ends_at"
)
BLOCK_WIDTH = 15  # the columns of BLOCK_COLUMNS: what a query selects after them starts here
# What a block is inserted with as it is (its revision starts again): the copied ones but rev.
BLOCK_INSERT_COLUMNS = tuple(TABLES["blocks"][0].removesuffix(", rev").split(", "))
AUDIT_COLUMNS = (
    "group_scope, actor, channel, kind, detail, label, old_content, new_content, at, origin"
)
AUDIT_INSERT = f"INSERT INTO shared_audit ({AUDIT_COLUMNS}) VALUES ({', '.join('?' * 10)})"
_ADD_CALLS = (
    "INSERT INTO scope_calls (scope, calls) VALUES (?, ?) "
    "ON CONFLICT (scope) DO UPDATE SET calls = scope_calls.calls + excluded.calls"
)
_LEVELS = {level.value: level for level in Level}  # a dict lookup is 10x cheaper than Level(x)
_STATES = {state.value: state for state in State}


def prefix_range(prefix: str) -> tuple[str, str]:
    """[low, high) holding every key that starts with prefix, for an index range scan (callers
    still check the prefix: a database collation other than bytewise may widen the range)."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def ts(moment: datetime) -> float:
    """A time as stored: seconds since the epoch."""
    return moment.timestamp()


@functools.lru_cache(maxsize=65_536)  # about the blocks of the 2,000 busiest scopes
def dt(value: float) -> datetime:
    """A stored time as an aware UTC datetime. Cached: every turn reads the same blocks' times
    again, and the conversion costs more than the lookup."""
    return datetime.fromtimestamp(value, UTC)


def encode_triggers(triggers: Sequence[str]) -> str | None:
    """A block's keywords as stored: a JSON list, or NULL for a block sent always."""
    return json.dumps(list(triggers), ensure_ascii=False) if triggers else None


@functools.lru_cache(maxsize=16_384)  # a scope's triggered blocks are read on every turn
def decode_triggers(stored: str | None) -> tuple[str, ...]:
    """A block's keywords from their stored form (NULL: none)."""
    return tuple(json.loads(stored)) if stored else ()


def block_from_row(row: Row) -> Block:
    """A Block from a row of the blocks table, columns in BLOCK_COLUMNS order."""
    idle_since = None if row[9] is None else dt(row[9])
    triggers = () if row[13] is None else decode_triggers(row[13])
    ends_at = None if row[14] is None else dt(row[14])
    return Block(
        *(row[0], row[1], row[2], row[3], _LEVELS[row[4]], _STATES[row[5]], row[6]),
        *(dt(row[7]), dt(row[8]), idle_since, row[10], row[11], bool(row[12])),
        *(triggers, ends_at),
    )


def audit_rows(
    scope: str, change: Author, at: datetime, entries: Iterable[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """Rows of AUDIT_COLUMNS for changes to a scope's shared blocks, one per entry: (kind, label,
    old content, new content, detail)."""
    origin = change.origin.encode() if change.origin else None
    head = (scope, change.actor, change.channel.value)
    return [
        (*head, kind.value, detail, label, old, new, ts(at), origin)
        for kind, label, old, new, detail in entries
    ]


def audit_from_row(row: Row) -> AuditEntry:
    """An AuditEntry from a row of AUDIT_COLUMNS."""
    return AuditEntry(
        *(row[0], row[1], Channel(row[2]), ChangeKind(row[3]), row[4], row[5], row[6], row[7]),
        *(dt(row[8]), Origin.decode(row[9])),
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

"""Every change to a block keeps the block's state before it, for a while: a label's history
within its scope (across removals), undo of a scope's last operation, and restoring a version.
Versions are written in the same transaction as the change they record."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from storage import models
from storage.dialect import Database, Executor, Step
from storage.models import (
    WITHHELD,
    Block,
    BlockState,
    Change,
    ChangeKind,
    Channel,
    Level,
    Origin,
    State,
    Version,
)
from storage.rows import dt, ts

_COLUMNS = (
    "op, scope, label_key, label, kind, detail, actor, channel, origin, at, existed, content, "
    "level, state, priority, sensitive, created_at, undone_by"
)
INSERT = f"INSERT INTO block_versions ({_COLUMNS}) VALUES ({', '.join('?' * 18)})"
# Everything older than the label's newest `keep`: one index seek finds the cut, and nothing is
# deleted (or read) while the label has fewer versions, as it has on most changes.
_KEEP_NEWEST = (
    "DELETE FROM block_versions WHERE scope = ? AND label_key = ? AND id <= "
    "(SELECT id FROM block_versions WHERE scope = ? AND label_key = ? "
    "ORDER BY id DESC LIMIT 1 OFFSET ?)"
)


def new_op() -> str:
    """A new operation's id: the versions it writes are undone together."""
    return uuid.uuid4().hex


def version_row(
    op: str,
    scope: str,
    label: str,
    kind: ChangeKind,
    change: Change,
    at: datetime,
    before: Block | BlockState | None,
    detail: str = "",
    created_at: datetime | None = None,
) -> tuple[Any, ...]:
    """A row of block_versions: the state before a change of kind to label, and the change."""
    state = BlockState.of(before) if isinstance(before, Block) else before
    if isinstance(before, Block):
        created_at = before.created_at
    origin = change.origin.encode() if change.origin else None
    head = (op, scope, models.label_key(label), label, kind.value, detail)
    who = (change.actor, change.channel.value, origin, ts(at))
    if state is None:
        return (*head, *who, 0, None, None, None, None, 0, None, None)
    after = (
        *(state.content, state.level.value, state.state.value, state.priority),
        int(state.sensitive),
    )
    return (*head, *who, 1, *after, None if created_at is None else ts(created_at), None)


def recorded(rows_: Sequence[tuple[Any, ...]], keep: int) -> tuple[Step, ...]:
    """The steps writing version rows and keeping each of their labels' newest `keep`."""
    if not rows_:
        return ()
    labels = sorted({(row[1], row[2]) for row in rows_})
    trims = [Step(_KEEP_NEWEST, (scope, key, scope, key, keep)) for scope, key in labels]
    # One row (most changes) as a plain statement: a batch costs asyncpg a round trip more.
    insert = Step(INSERT, rows_[0]) if len(rows_) == 1 else Step(INSERT, list(rows_), many=True)
    return (insert, *trims)


# The newest version of each label that has no block now and was sensitive when removed.
_REMOVED_SENSITIVE = (
    "SELECT v.id FROM block_versions v WHERE v.existed = 1 AND v.sensitive = 1 "
    "AND v.id = (SELECT MAX(w.id) FROM block_versions w "
    "WHERE w.scope = v.scope AND w.label_key = v.label_key) "
    "AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.scope = v.scope AND b.label_key = v.label_key)"
)

_SELECT = (
    "SELECT id, op, scope, label, kind, detail, actor, channel, at, existed, content, level, "
    "state, priority, created_at, origin, undone_by, sensitive FROM block_versions"
)


def _version(row: Sequence[Any]) -> Version:
    """A Version from a row of _SELECT."""
    before = (
        BlockState(row[10], Level(row[11]), State(row[12]), int(row[13]), bool(row[17]))
        if row[9]
        else None
    )
    return Version(
        *(int(row[0]), row[1], row[2], row[3], ChangeKind(row[4]), row[5], row[6]),
        *(Channel(row[7]), dt(row[8]), before, None if row[14] is None else dt(row[14])),
        *(Origin.decode(row[15]), row[16]),
    )


async def write_steps(tx: Executor, steps: Sequence[Step]) -> None:
    """Run steps inside a transaction."""
    for step in steps:
        if step.many:
            await tx.executemany(step.sql, step.args)
        else:
            await tx.execute(step.sql, *step.args)


class VersionStore(Protocol):
    """The versions of blocks: history, undo and restore."""

    _db: Database

    async def versions(self, scope: str, label: str) -> list[Version]:
        """A label's versions in its scope (across removals), newest first."""
        found = await self._db.fetch(
            f"{_SELECT} WHERE scope = ? AND label_key = ? ORDER BY id DESC",
            *(scope, models.label_key(label)),
        )
        return [_version(row) for row in found]

    async def labels_with_versions(self, scope: str) -> list[str]:
        """The labels of a scope that have kept versions (removed blocks' too), by label."""
        found = await self._db.fetch(
            "SELECT label FROM block_versions v WHERE scope = ? AND id = (SELECT MAX(id) FROM "
            "block_versions w WHERE w.scope = v.scope AND w.label_key = v.label_key) "
            "ORDER BY label_key",
            scope,
        )
        return [row[0] for row in found]

    async def last_operation(self, scope: str) -> list[Version]:
        """The versions of the scope's newest operation that an undo may revert: not an undo
        itself, not undone already (none when there is none)."""
        op = await self._db.fetchval(
            "SELECT op FROM block_versions WHERE scope = ? AND channel != ? AND undone_by IS NULL "
            "ORDER BY id DESC LIMIT 1",
            *(scope, Channel.UNDO.value),
        )
        if op is None:
            return []
        # One import or transfer is one operation over many scopes: undo takes back this
        # scope's part of it only.
        found = await self._db.fetch(f"{_SELECT} WHERE scope = ? AND op = ? ORDER BY id", scope, op)
        return [_version(row) for row in found]

    async def forget_versions_before(self, moment: datetime) -> int:
        """Drop versions of changes made before moment (retention). One outlives it, its
        content withheld: the newest version of a removed label that was sensitive, since that
        is how the review knows the label was (the model never makes it plain again)."""
        await self._db.execute(
            f"UPDATE block_versions SET content = ? WHERE at < ? AND content != ? AND id IN "
            f"({_REMOVED_SENSITIVE})",
            *(WITHHELD, ts(moment), WITHHELD),
        )
        return await self._db.execute(
            f"DELETE FROM block_versions WHERE at < ? AND id NOT IN ({_REMOVED_SENSITIVE})",
            ts(moment),
        )

    async def export_versions(self) -> dict[str, list[Version]]:
        """Every scope's versions, oldest first."""
        found: dict[str, list[Version]] = {}
        for row in await self._db.fetch(f"{_SELECT} ORDER BY scope, id"):
            version = _version(row)
            found.setdefault(version.scope, []).append(version)
        return found

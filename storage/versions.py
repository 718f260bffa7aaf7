"""Every change to a block keeps the block's state before it, for a while: a label's history
within its scope (across removals), undo of a scope's last operation, and restoring a version.
Versions are read here; they are written (in the same transaction as the change they record)
and forgotten by storage.changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from storage import models
from storage.dialect import Database
from storage.models import BlockState, ChangeKind, Channel, Level, Origin, State, Version
from storage.rows import decode_triggers, dt

_SELECT = (
    "SELECT id, op, scope, label, kind, detail, actor, channel, at, existed, content, level, "
    "state, priority, created_at, origin, undone_by, sensitive, triggers, ends_at "
    "FROM block_versions"
)


def _version(row: Sequence[Any]) -> Version:
    """A Version from a row of _SELECT."""
    before = (
        BlockState(
            *(row[10], Level(row[11]), State(row[12]), int(row[13]), bool(row[17])),
            *(decode_triggers(row[18]), None if row[19] is None else dt(row[19])),
        )
        if row[9]
        else None
    )
    return Version(
        *(int(row[0]), row[1], row[2], row[3], ChangeKind(row[4]), row[5], row[6]),
        *(Channel(row[7]), dt(row[8]), before, None if row[14] is None else dt(row[14])),
        *(Origin.decode(row[15]), row[16]),
    )


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

    async def export_versions(self) -> dict[str, list[Version]]:
        """Every scope's versions, oldest first."""
        found: dict[str, list[Version]] = {}
        for row in await self._db.fetch(f"{_SELECT} ORDER BY scope, id"):
            version = _version(row)
            found.setdefault(version.scope, []).append(version)
        return found

"""Every change to a block keeps the block's state before it, for a while: a label's history
within its scope (across removals), undo of a scope's last operation, and restoring a version.
Versions are written in the same transaction as the change they record."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from storage import models, rows
from storage.dialect import Database, Executor, Step
from storage.errors import LimitReached, OverBudget
from storage.models import (
    Block,
    BlockState,
    Change,
    ChangeKind,
    Channel,
    Level,
    Limits,
    Origin,
    State,
    Version,
    Wanted,
)
from storage.rows import BLOCK_COLUMNS, block_from_row, dt, ts

_COLUMNS = (
    "op, scope, label_key, label, kind, detail, actor, channel, origin, at, existed, content, "
    "level, state, priority, created_at, undone_by"
)
INSERT = f"INSERT INTO block_versions ({_COLUMNS}) VALUES ({', '.join('?' * 17)})"
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
        return (*head, *who, 0, None, None, None, None, None, None)
    after = (state.content, state.level.value, state.state.value, state.priority)
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


_SELECT = (
    "SELECT id, op, scope, label, kind, detail, actor, channel, at, existed, content, level, "
    "state, priority, created_at, origin, undone_by FROM block_versions"
)


def _version(row: Sequence[Any]) -> Version:
    """A Version from a row of _SELECT."""
    before = BlockState(row[10], Level(row[11]), State(row[12]), int(row[13])) if row[9] else None
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

    async def apply_versions(
        self,
        scope: str,
        wanted: Sequence[Wanted],
        *,
        now: datetime,
        limits: Limits,
        change: Change,
        undoes: str | None = None,
        audited: bool = False,
    ) -> list[tuple[str, Block | None, BlockState | None]]:
        """Bring labels of a scope to the states wanted, as one operation in one transaction,
        each change kept as a version (and audited when asked); with undoes, that operation is
        marked undone by this one. The limits hold as of now: LimitReached or OverBudget (and
        nothing changed) when the scope would grow past one. Returns, per label changed, its
        label, the block before and the state after."""
        op, stamp = new_op(), ts(now)
        async with self._db.transaction(scope) as tx:
            current = {
                models.label_key(b.label): b
                for b in map(
                    block_from_row,
                    await tx.fetch(f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope = ?", scope),
                )
            }
            plan = _plan(current, wanted)
            _check(current, plan, limits)
            calls = await tx.fetchval("SELECT calls FROM scope_calls WHERE scope = ?", scope)
            steps, versions, audit = [], [], []
            for label, before, after, created in plan:
                kind, detail = _kind(before, after)
                versions.append(version_row(op, scope, label, kind, change, now, before))
                audit.append(
                    (kind, label, before and before.content, after and after.content, detail)
                )
                steps.append(_write(scope, label, before, after, created, stamp, calls))
            if undoes is not None:
                steps.append(
                    Step(
                        "UPDATE block_versions SET undone_by = ? WHERE scope = ? AND op = ?",
                        (op, scope, undoes),
                    )
                )
            if audited and audit:
                steps.append(
                    Step(rows.AUDIT_INSERT, rows.audit_rows(scope, change, now, audit), many=True)
                )
            await write_steps(tx, [*steps, *recorded(versions, limits.versions)])
        return [(label, before, after) for label, before, after, _ in plan]

    async def forget_versions_before(self, moment: datetime) -> int:
        """Drop versions of changes made before moment (retention)."""
        return await self._db.execute("DELETE FROM block_versions WHERE at < ?", ts(moment))

    async def export_versions(self) -> dict[str, list[Version]]:
        """Every scope's versions, oldest first."""
        found: dict[str, list[Version]] = {}
        for row in await self._db.fetch(f"{_SELECT} ORDER BY scope, id"):
            version = _version(row)
            found.setdefault(version.scope, []).append(version)
        return found


Plan = list[tuple[str, Block | None, BlockState | None, datetime | None]]


def _plan(current: dict[str, Block], wanted: Sequence[Wanted]) -> Plan:
    """(label, block now, state wanted, creation) for each label that would change."""
    plan: Plan = []
    for want in wanted:
        block = current.get(models.label_key(want.label))
        if block is None and want.state is None:
            continue
        if block is not None and want.state == BlockState.of(block):
            continue
        label = block.label if block is not None else want.label
        plan.append((label, block, want.state, want.created_at))
    return plan


def _check(current: dict[str, Block], plan: Plan, limits: Limits) -> None:
    """Refuse a plan that grows the scope past its block limit or its character budget."""
    count, chars = len(current), sum(len(b.content) for b in current.values())
    new_count, new_chars = count, chars
    for _, before, after, _ in plan:
        new_count += (after is not None) - (before is not None)
        new_chars += (len(after.content) if after else 0) - (len(before.content) if before else 0)
    if new_count > limits.max_blocks and new_count > count:
        raise LimitReached(limits.max_blocks)
    budget = limits.max_total_chars
    if budget and new_chars > budget and new_chars > chars:
        raise OverBudget(new_chars, budget)


def _kind(before: Block | None, after: BlockState | None) -> tuple[ChangeKind, str]:
    """What changing before into after is, in the audit trail's words."""
    if before is None:
        assert after is not None
        return ChangeKind.ADD, after.level.value + (
            " pinned" if after.state is State.PINNED else ""
        )
    if after is None:
        return ChangeKind.REMOVE, ""
    if after.content != before.content:
        return ChangeKind.EDIT, ""
    if after.level is not before.level:
        return ChangeKind.LEVEL, after.level.value
    if after.state is not before.state:
        return ChangeKind.STATE, after.state.value
    return ChangeKind.PRIORITY, str(after.priority)


def _write(
    scope: str,
    label: str,
    before: Block | None,
    after: BlockState | None,
    created: datetime | None,
    stamp: float,
    calls: int | None,
) -> Step:
    """The statement bringing one label from before to after. A block brought into the idle
    state counts its idle time from now."""
    if after is None:
        assert before is not None
        return Step("DELETE FROM blocks WHERE id = ?", (before.id,))
    idle = after.state is State.IDLE
    idle_since = stamp if idle else None
    idle_calls = int(calls or 0) if idle else None
    values = (after.content, after.level.value, after.state.value, after.priority)
    if before is not None:
        return Step(
            "UPDATE blocks SET content = ?, level = ?, state = ?, priority = ?, updated_at = ?, "
            "idle_since = ?, idle_calls = ?, rev = rev + 1 WHERE id = ?",
            (*values, stamp, idle_since, idle_calls, before.id),
        )
    return Step(
        "INSERT INTO blocks (scope, label, label_key, content, level, state, priority, "
        "created_at, updated_at, idle_since, idle_calls) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            *(scope, label, models.label_key(label), *values),
            *(stamp if created is None else ts(created), stamp, idle_since, idle_calls),
        ),
    )

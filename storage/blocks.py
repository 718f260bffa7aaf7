"""Blocks of every scope, the model-call counts that age idle blocks, and the audit trail of
shared blocks. Every write is guarded: a limit that no longer holds makes it change nothing,
and the exception raised says which limit (or that the block changed since it was read)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, Protocol

from storage.dialect import Database, Step
from storage.errors import Conflict, LabelTaken, LimitReached, NotFound, OverBudget
from storage.models import (
    AuditEntry,
    Block,
    Change,
    ChangeKind,
    Level,
    Limits,
    NewBlock,
    State,
    label_key,
)
from storage.rows import (
    AUDIT_COLUMNS,
    AUDIT_INSERT,
    BLOCK_COLUMNS,
    BLOCK_INSERT_COLUMNS,
    PendingCalls,
    audit_from_row,
    audit_row,
    block_from_row,
    block_insert_rows,
    import_audit_rows,
    ts,
)

Scopes = dict[str, tuple[int, list[Block]]]  # scope → (model-call count, blocks)
_INSERT = (
    "INSERT INTO blocks (scope, label, label_key, content, level, state, priority, created_at, "
    "updated_at) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? "
    "WHERE (SELECT COUNT(*) FROM blocks WHERE scope = ?) < ? "
    "AND (? = 0 OR (SELECT COALESCE(SUM(length(content)), 0) FROM blocks WHERE scope = ?) "
    "+ length(?) <= ?) ON CONFLICT (scope, label_key) DO NOTHING"
)
# The budget refuses only a change that makes the scope larger and over budget.
_UPDATE = (
    "UPDATE blocks SET content = ?, level = ?, state = ?, priority = ?, updated_at = ?, {idle}, "
    "rev = rev + 1 WHERE id = ? AND rev = ? AND (? = 0 OR length(?) <= length(content) OR "
    "(SELECT COALESCE(SUM(length(b.content)), 0) FROM blocks b WHERE b.scope = blocks.scope) "
    "- length(content) + length(?) <= ?)"
)
_GOING_IDLE = (
    "idle_since = ?, idle_calls = (SELECT COALESCE(MAX(calls), 0) FROM scope_calls "
    "WHERE scope = blocks.scope)"
)
_INSERT_ROW = (
    f"INSERT INTO blocks ({', '.join(BLOCK_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(BLOCK_INSERT_COLUMNS))})"
)


class BlockStore(Protocol):
    """The store's blocks, their model-call counts and the audit trail of shared blocks."""

    _db: Database
    _pending_calls: PendingCalls

    async def blocks(self, scopes: Sequence[str]) -> list[Block]:
        """Every block of the given scopes, in any state, oldest creation first."""
        if not scopes:
            return []
        rows = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope IN (?*) ORDER BY created_at, id",
            list(scopes),
        )
        return [block_from_row(row) for row in rows]

    async def insert_block(
        self, new: NewBlock, *, now: datetime, limits: Limits, change: Change, audited: bool = False
    ) -> None:
        """Insert a block, committed on return. LabelTaken, LimitReached or OverBudget when the
        scope stands in the way; with audited, the change goes to the scope's audit trail."""
        stamp = ts(now)
        audit: tuple[Step, ...] = ()
        if audited:
            detail = new.level.value + (" pinned" if new.state is State.PINNED else "")
            entry = audit_row(
                new.scope, change, ChangeKind.ADD, new.label, None, new.content, now, detail
            )
            audit = (Step(AUDIT_INSERT, entry),)
        args = (
            *(new.scope, new.label, label_key(new.label), new.content, new.level.value),
            *(new.state.value, new.priority, stamp, stamp, new.scope, limits.max_blocks),
            *(limits.max_total_chars, new.scope, new.content, limits.max_total_chars),
        )
        if await self._db.write(Step(_INSERT, args), *audit, lock=(new.scope,), guard=True):
            return
        row = await self._db.fetchrow(
            "SELECT (SELECT label FROM blocks WHERE scope = ? AND label_key = ?), COUNT(*), "
            "COALESCE(SUM(length(content)), 0) FROM blocks WHERE scope = ?",
            new.scope,
            label_key(new.label),
            new.scope,
        )
        assert row is not None
        if row[0] is not None:
            raise LabelTaken(row[0])
        if row[1] >= limits.max_blocks:
            raise LimitReached(limits.max_blocks)
        total = int(row[2]) + len(new.content)
        if limits.max_total_chars and total > limits.max_total_chars:
            raise OverBudget(total, limits.max_total_chars)
        raise Conflict("the scope changed while adding")

    async def update_block(
        self,
        block: Block,
        *,
        now: datetime,
        limits: Limits,
        change: Change,
        audited: bool = False,
        content: str | None = None,
        level: Level | None = None,
        state: State | None = None,
        priority: int | None = None,
    ) -> None:
        """Change a block that is still at the revision read, committed on return. Conflict when
        it changed since, NotFound when it is gone, OverBudget when new content would grow the
        scope past its budget. Going idle records the time and the scope's model-call count;
        leaving idle clears both."""
        new_content = block.content if content is None else content
        new_state = block.state if state is None else state
        if new_state is State.IDLE and block.state is not State.IDLE:
            await self.flush_calls()  # the idle mark records the scope's current count
            idle, idle_args = _GOING_IDLE, [ts(now)]
        elif new_state is State.IDLE:
            idle, idle_args = "idle_since = idle_since", []
        else:
            idle, idle_args = "idle_since = NULL, idle_calls = NULL", []
        new_level = block.level if level is None else level
        new_priority = block.priority if priority is None else priority
        budget = limits.max_total_chars
        args = (
            *(new_content, new_level.value, new_state.value, new_priority, ts(now), *idle_args),
            *(block.id, block.rev, budget, new_content, new_content, budget),
        )
        audit: tuple[Step, ...] = ()
        if audited:
            rows = _update_audit(block, change, now, content, level, state, priority)
            audit = (Step(AUDIT_INSERT, rows, many=True),)
        update = Step(_UPDATE.format(idle=idle), args)
        if await self._db.write(update, *audit, lock=(block.scope,), guard=True):
            return
        row = await self._db.fetchrow(
            "SELECT rev, (SELECT COALESCE(SUM(length(b.content)), 0) FROM blocks b "
            "WHERE b.scope = blocks.scope) - length(content) FROM blocks WHERE id = ?",
            block.id,
        )
        if row is None:
            raise NotFound(f"block {block.label!r} is gone")
        total = int(row[1]) + len(new_content)
        if row[0] == block.rev and budget and total > budget:
            raise OverBudget(total, budget)
        raise Conflict(f"block {block.label!r} changed while saving")

    async def delete_block(
        self, block: Block, *, now: datetime, change: Change, audited: bool = False
    ) -> None:
        """Delete a block, committed on return; NotFound when it is already gone."""
        audit: tuple[Step, ...] = ()
        if audited:
            entry = audit_row(
                block.scope, change, ChangeKind.REMOVE, block.label, block.content, None, now
            )
            audit = (Step(AUDIT_INSERT, entry),)
        delete = Step("DELETE FROM blocks WHERE id = ?", (block.id,))
        if not await self._db.write(delete, *audit, lock=(block.scope,), guard=True):
            raise NotFound(f"block {block.label!r} is gone")

    async def clear_scope(
        self, scope: str, *, now: datetime, change: Change, audited: bool = False
    ) -> int:
        """Delete every block of a scope, pinned included; returns how many went."""
        async with self._db.transaction(scope) as tx:
            if audited:
                rows = await tx.fetch("SELECT label, content FROM blocks WHERE scope = ?", scope)
                await tx.executemany(
                    AUDIT_INSERT,
                    [
                        audit_row(scope, change, ChangeKind.CLEAR, r[0], r[1], None, now)
                        for r in rows
                    ],
                )
            return await tx.execute("DELETE FROM blocks WHERE scope = ?", scope)

    async def delete_blocks(self, ids: Collection[int]) -> int:
        """Delete the blocks with these ids (idle clean-up); returns how many went."""
        if not ids:
            return 0
        return await self._db.execute("DELETE FROM blocks WHERE id IN (?*)", list(ids))

    # --- model-call counts --------------------------------------------------------------------

    async def start_model_call(self, scopes: Sequence[str]) -> tuple[list[Block], dict[str, int]]:
        """Count one model call for each scope and return, in one query, the scopes' blocks (in
        any state, in no particular order) and, for each scope that has blocks, its call count
        before this call."""
        if not scopes:
            return [], {}
        rows = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS}, (SELECT calls FROM scope_calls c WHERE c.scope = "
            "blocks.scope) FROM blocks WHERE scope IN (?*)",
            list(scopes),
        )
        stored = {row[1]: row[12] or 0 for row in rows}
        return [block_from_row(row) for row in rows], self._pending_calls.count(scopes, stored)

    async def flush_calls(self) -> None:
        """Write the counted model calls that are not yet in the database."""
        async with self._pending_calls.writing() as steps:
            if steps:
                await self._db.write(*steps)

    async def model_calls(self, scope: str) -> int:
        """How many model calls have been made with this scope."""
        stored = await self._db.fetchval("SELECT calls FROM scope_calls WHERE scope = ?", scope)
        return int(stored or 0) + self._pending_calls.of(scope)

    # --- export and import --------------------------------------------------------------------

    async def export_scopes(self) -> Scopes:
        """Every scope that has blocks or counted calls: its call count and blocks (oldest
        first)."""
        await self.flush_calls()
        scopes: Scopes = {}
        for row in await self._db.fetch("SELECT scope, calls FROM scope_calls"):
            scopes[row[0]] = (int(row[1]), [])
        rows = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks ORDER BY scope, created_at, id"
        )
        for row in rows:
            block = block_from_row(row)
            scopes.setdefault(block.scope, (0, []))[1].append(block)
        return scopes

    async def replace_scopes(
        self, scopes: Scopes, *, now: datetime, change: Change, audited: Collection[str] = ()
    ) -> int:
        """Make each given scope hold exactly these blocks (times, states and all) and this call
        count, in one transaction; other scopes are untouched. Changes to the scopes in audited
        go to their audit trail. Returns blocks written."""
        await self.flush_calls()
        written = 0
        async with self._db.transaction(*scopes) as tx:
            for scope, (calls, blocks) in scopes.items():
                if scope in audited:
                    rows = await tx.fetch(
                        "SELECT label_key, label, content FROM blocks WHERE scope = ?", scope
                    )
                    before = {row[0]: (row[1], row[2]) for row in rows}
                    await tx.executemany(
                        AUDIT_INSERT, import_audit_rows(scope, before, blocks, change, now)
                    )
                await tx.execute("DELETE FROM blocks WHERE scope = ?", scope)
                await tx.execute(
                    "INSERT INTO scope_calls (scope, calls) VALUES (?, ?) "
                    "ON CONFLICT (scope) DO UPDATE SET calls = excluded.calls",
                    scope,
                    calls,
                )
                await tx.executemany(_INSERT_ROW, block_insert_rows(scope, blocks))
                written += len(blocks)
        return written

    # --- the audit trail of shared blocks -----------------------------------------------------

    async def audit_log(self, group_scope: str, limit: int) -> list[AuditEntry]:
        """The latest changes to a group's shared blocks, newest first."""
        rows = await self._db.fetch(
            f"SELECT {AUDIT_COLUMNS} FROM shared_audit WHERE group_scope = ? "
            "ORDER BY at DESC, id DESC LIMIT ?",
            group_scope,
            limit,
        )
        return [audit_from_row(row) for row in rows]

    async def prune_audit(self, group_scope: str, before: datetime) -> int:
        """Forget a group's audit entries older than before; returns how many went."""
        return await self._db.execute(
            "DELETE FROM shared_audit WHERE group_scope = ? AND at < ?", group_scope, ts(before)
        )


def _update_audit(
    block: Block,
    change: Change,
    now: datetime,
    content: str | None,
    level: Level | None,
    state: State | None,
    priority: int | None,
) -> list[tuple[Any, ...]]:
    """One audit row per kind of change an update makes."""
    after = block.content if content is None else content
    rows = []
    for kind, value, detail in (
        (ChangeKind.EDIT, content, ""),
        (ChangeKind.LEVEL, level, level.value if level else ""),
        (ChangeKind.STATE, state, state.value if state else ""),
        (ChangeKind.PRIORITY, priority, str(priority)),
    ):
        if value is not None:
            rows.append(
                audit_row(block.scope, change, kind, block.label, block.content, after, now, detail)
            )
    return rows

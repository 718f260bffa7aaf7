"""Blocks of every scope, the model-call counts that age idle blocks, the audit trail of shared
blocks, and the read-only views the operator's web page browses them with. Every write is
guarded: a limit that no longer holds makes it change nothing, and the exception raised says
which limit (or that the block changed since it was read)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, Protocol

from storage import models, rows
from storage.dialect import Database, Step
from storage.errors import Conflict, LabelTaken, LimitReached, NotFound, OverBudget
from storage.models import (
    AuditEntry,
    Block,
    BlockState,
    Change,
    ChangeKind,
    Channel,
    Level,
    Limits,
    NewBlock,
    State,
    Version,
)
from storage.proposals import applied_step
from storage.rows import BLOCK_COLUMNS, block_from_row, prefix_range, ts
from storage.search import SearchIndex
from storage.versions import INSERT as VERSION_INSERT
from storage.versions import new_op, recorded, version_row, write_steps

Scopes = dict[str, tuple[int, list[Block]]]  # scope → (model-call count, blocks)
KEEP = Limits(0)  # for writes that only remove: the default number of versions kept
CLEANUP = Change("cleanup", Channel.CLEANUP)
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
    f"INSERT INTO blocks ({', '.join(rows.BLOCK_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(rows.BLOCK_INSERT_COLUMNS))})"
)
_IN_ORDER = "ORDER BY scope, created_at, id"


def _audit(scope: str, change: Change, at: datetime, *entries: tuple[Any, ...]) -> Step:
    """The step writing entries (kind, label, old content, new content, detail) to the trail."""
    return Step(rows.AUDIT_INSERT, rows.audit_rows(scope, change, at, entries), many=True)


async def _audit_entries(
    db: Database, where: str, args: Sequence[Any], limit: int, offset: int
) -> list[AuditEntry]:
    """A page of the audit entries where selects, newest first."""
    found = await db.fetch(
        f"SELECT {rows.AUDIT_COLUMNS} FROM shared_audit {where} "
        "ORDER BY at DESC, id DESC LIMIT ? OFFSET ?",
        *(*args, limit, offset),
    )
    return [rows.audit_from_row(row) for row in found]


def _insert_rows(scope: str, blocks: Sequence[Block]) -> list[tuple[Any, ...]]:
    """Rows of BLOCK_INSERT_COLUMNS for inserting blocks as they are, oldest first."""
    return [
        (
            *(scope, b.label, models.label_key(b.label), b.content, b.level.value, b.state.value),
            *(b.priority, ts(b.created_at), ts(b.updated_at)),
            *(None if b.idle_since is None else ts(b.idle_since), b.idle_calls),
        )
        for b in sorted(blocks, key=lambda b: b.created_at)
    ]


def _import_entries(
    before: dict[str, tuple[str, str]], blocks: Sequence[Block]
) -> list[tuple[Any, ...]]:
    """Audit entries for each label an import changes; before maps label keys to (label, content)
    as stored."""
    after = {models.label_key(b.label): (b.label, b.content) for b in blocks}
    gone: tuple[str, str | None] = ("", None)
    entries = []
    for key in sorted({*before, *after}):
        old, new = before.get(key, gone), after.get(key, gone)
        if old != new:
            entries.append((ChangeKind.IMPORT, new[0] or old[0], old[1], new[1], ""))
    return entries


def _import_versions(
    op: str,
    scope: str,
    before: dict[str, Block],
    blocks: Sequence[Block],
    change: Change,
    now: datetime,
) -> list[tuple[Any, ...]]:
    """A version (the state before) of each label an import changes."""
    after = {models.label_key(b.label): b for b in blocks}
    rows_ = []
    for key in sorted({*before, *after}):
        old, new = before.get(key), after.get(key)
        if old is None or new is None or BlockState.of(old) != BlockState.of(new):
            label = new.label if new is not None else old.label if old is not None else key
            rows_.append(version_row(op, scope, label, ChangeKind.IMPORT, change, now, old))
    return rows_


def _given(versions: Sequence[Version]) -> list[tuple[Any, ...]]:
    """Rows for versions exactly as given (an import of an export made with history)."""
    rows_ = []
    for v in versions:
        change = Change(v.actor, v.channel, v.origin)
        row = version_row(
            v.op, v.scope, v.label, v.kind, change, v.at, v.before, v.detail, v.created_at
        )
        rows_.append((*row[:-1], v.undone_by))
    return rows_


class BlockStore(Protocol):
    """The store's blocks, their model-call counts and the audit trail of shared blocks."""

    _db: Database
    _pending_calls: rows.PendingCalls

    async def blocks(self, scopes: Sequence[str]) -> list[Block]:
        """Every block of the given scopes, in any state, oldest creation first."""
        if not scopes:
            return []
        found = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope IN (?*) ORDER BY created_at, id",
            list(scopes),
        )
        return [block_from_row(row) for row in found]

    async def insert_block(
        self, new: NewBlock, *, now: datetime, limits: Limits, change: Change, audited: bool = False
    ) -> None:
        """Insert a block, committed on return. LabelTaken, LimitReached or OverBudget when the
        scope stands in the way; with audited, the change goes to the scope's audit trail."""
        stamp, key, budget = ts(now), models.label_key(new.label), limits.max_total_chars
        args = (
            *(new.scope, new.label, key, new.content, new.level.value, new.state.value),
            *(new.priority, stamp, stamp, new.scope, limits.max_blocks, budget, new.scope),
            *(new.content, budget),
        )
        detail = new.level.value + (" pinned" if new.state is State.PINNED else "")
        entry = (ChangeKind.ADD, new.label, None, new.content, detail)
        audit = (_audit(new.scope, change, now, entry),) if audited else ()
        version = version_row(
            new_op(), new.scope, new.label, ChangeKind.ADD, change, now, None, detail
        )
        kept = (*recorded([version], limits.versions), *applied_step(new.scope, change, now))
        if await self._db.write(Step(_INSERT, args), *kept, *audit, lock=(new.scope,), guard=True):
            return
        row = await self._db.fetchrow(
            "SELECT (SELECT label FROM blocks WHERE scope = ? AND label_key = ?), COUNT(*), "
            "COALESCE(SUM(length(content)), 0) FROM blocks WHERE scope = ?",
            *(new.scope, key, new.scope),
        )
        assert row is not None
        if row[0] is not None:
            raise LabelTaken(row[0])
        if row[1] >= limits.max_blocks:
            raise LimitReached(limits.max_blocks)
        total = int(row[2]) + len(new.content)
        if budget and total > budget:
            raise OverBudget(total, budget)
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
        entries = [
            (kind, block.label, block.content, new_content, detail)
            for kind, value, detail in (
                (ChangeKind.EDIT, content, ""),
                (ChangeKind.LEVEL, level, level.value if level else ""),
                (ChangeKind.STATE, state, state.value if state else ""),
                (ChangeKind.PRIORITY, priority, str(priority)),
            )
            if value is not None
        ]
        audit = (_audit(block.scope, change, now, *entries),) if audited and entries else ()
        kind, detail = (entries[0][0], entries[0][4]) if entries else (ChangeKind.EDIT, "")
        version = version_row(new_op(), block.scope, block.label, kind, change, now, block, detail)
        kept = (*recorded([version], limits.versions), *applied_step(block.scope, change, now))
        update = Step(_UPDATE.format(idle=idle), args)
        if await self._db.write(update, *kept, *audit, lock=(block.scope,), guard=True):
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
        self,
        block: Block,
        *,
        now: datetime,
        change: Change,
        audited: bool = False,
        limits: Limits = KEEP,
    ) -> None:
        """Delete a block, committed on return; NotFound when it is already gone."""
        entry = (ChangeKind.REMOVE, block.label, block.content, None, "")
        audit = (_audit(block.scope, change, now, entry),) if audited else ()
        version = version_row(
            new_op(), block.scope, block.label, ChangeKind.REMOVE, change, now, block
        )
        kept = recorded([version], limits.versions)
        delete = Step("DELETE FROM blocks WHERE id = ?", (block.id,))
        if not await self._db.write(delete, *kept, *audit, lock=(block.scope,), guard=True):
            raise NotFound(f"block {block.label!r} is gone")

    async def clear_scope(
        self,
        scope: str,
        *,
        now: datetime,
        change: Change,
        audited: bool = False,
        limits: Limits = KEEP,
    ) -> int:
        """Delete every block of a scope, pinned included, as one operation; returns how many
        went."""
        op = new_op()
        async with self._db.transaction(scope) as tx:
            found = [
                block_from_row(row)
                for row in await tx.fetch(
                    f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope = ?", scope
                )
            ]
            versions = [
                version_row(op, scope, b.label, ChangeKind.CLEAR, change, now, b) for b in found
            ]
            steps = list(recorded(versions, limits.versions))
            if audited and found:
                entries = [(ChangeKind.CLEAR, b.label, b.content, None, "") for b in found]
                steps.append(_audit(scope, change, now, *entries))
            for step in steps:
                await (
                    tx.executemany(step.sql, step.args)
                    if step.many
                    else tx.execute(step.sql, *step.args)
                )
            return await tx.execute("DELETE FROM blocks WHERE scope = ?", scope)

    async def delete_expired(self, blocks: Collection[Block], *, now: datetime) -> int:
        """Delete idle blocks whose retention has passed (actor and channel: cleanup), each kept
        as a version; returns how many went."""
        if not blocks:
            return 0
        op = new_op()
        versions = [
            version_row(op, b.scope, b.label, ChangeKind.REMOVE, CLEANUP, now, b) for b in blocks
        ]
        delete = Step("DELETE FROM blocks WHERE id IN (?*)", ([b.id for b in blocks],))
        return await self._db.write(delete, *recorded(versions, KEEP.versions))

    # --- model-call counts --------------------------------------------------------------------

    async def start_model_call(self, scopes: Sequence[str]) -> tuple[list[Block], dict[str, int]]:
        """Count one model call for each scope and return, in one query, the scopes' blocks (in
        any state, in no particular order) and, for each scope that has blocks, its call count
        before this call."""
        if not scopes:
            return [], {}
        found = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS}, (SELECT calls FROM scope_calls c WHERE c.scope = "
            "blocks.scope) FROM blocks WHERE scope IN (?*)",
            list(scopes),
        )
        stored = {row[1]: row[12] or 0 for row in found}
        return [block_from_row(row) for row in found], self._pending_calls.count(scopes, stored)

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
        for scope, calls in await self._db.fetch("SELECT scope, calls FROM scope_calls"):
            scopes[scope] = (int(calls), [])
        for row in await self._db.fetch(f"SELECT {BLOCK_COLUMNS} FROM blocks {_IN_ORDER}"):
            block = block_from_row(row)
            scopes.setdefault(block.scope, (0, []))[1].append(block)
        return scopes

    async def replace_scopes(
        self,
        scopes: Scopes,
        *,
        now: datetime,
        change: Change,
        audited: Collection[str] = (),
        versions: dict[str, list[Version]] | None = None,
        limits: Limits = KEEP,
    ) -> int:
        """Make each given scope hold exactly these blocks (times, states and all) and this call
        count, in one transaction (one operation); other scopes are untouched. Each label that
        changes is kept as a version, and audited for the scopes in audited; a scope in versions
        gets exactly the versions given instead (an import of an export made with history), and
        none is added. Returns blocks written."""
        await self.flush_calls()
        written, op = 0, new_op()
        async with self._db.transaction(*scopes) as tx:
            for scope, (calls, blocks) in scopes.items():
                found = await tx.fetch(f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope = ?", scope)
                before = {models.label_key(row[2]): block_from_row(row) for row in found}
                if versions is not None and scope in versions:
                    await tx.execute("DELETE FROM block_versions WHERE scope = ?", scope)
                    await tx.executemany(VERSION_INSERT, _given(versions.get(scope, [])))
                else:
                    changed = _import_versions(op, scope, before, blocks, change, now)
                    await write_steps(tx, recorded(changed, limits.versions))
                if scope in audited:
                    entries = _import_entries(
                        {key: (b.label, b.content) for key, b in before.items()}, blocks
                    )
                    await write_steps(tx, [_audit(scope, change, now, *entries)] if entries else [])
                await tx.execute("DELETE FROM blocks WHERE scope = ?", scope)
                await tx.execute(
                    "INSERT INTO scope_calls (scope, calls) VALUES (?, ?) "
                    "ON CONFLICT (scope) DO UPDATE SET calls = excluded.calls",
                    *(scope, calls),
                )
                await tx.executemany(_INSERT_ROW, _insert_rows(scope, blocks))
                written += len(blocks)
        return written

    # --- notes on a scope ----------------------------------------------------------------------

    async def set_note(self, scope: str, name: str, text: str | None, *, now: datetime) -> None:
        """Keep (or with None, drop) a note on a scope, which its status shows."""
        if text is None:
            await self._db.execute(
                "DELETE FROM scope_notes WHERE scope = ? AND name = ?", scope, name
            )
            return
        await self._db.execute(
            "INSERT INTO scope_notes (scope, name, text, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (scope, name) DO UPDATE SET text = excluded.text, at = excluded.at",
            *(scope, name, text, ts(now)),
        )

    async def notes(self, scope: str) -> dict[str, str]:
        """The notes kept on a scope, by name."""
        found = await self._db.fetch("SELECT name, text FROM scope_notes WHERE scope = ?", scope)
        return {name: text for name, text in found}

    async def scopes_with_label(self, prefix: str, label: str) -> list[str]:
        """The scopes whose keys start with prefix that hold a block of this label."""
        found = await self._db.fetch(
            "SELECT scope FROM blocks WHERE scope >= ? AND scope < ? AND label_key = ? "
            "ORDER BY scope",
            *(*prefix_range(prefix), models.label_key(label)),
        )
        return [row[0] for row in found if row[0].startswith(prefix)]

    # --- the audit trail of shared blocks -----------------------------------------------------

    async def audit_log(self, group_scope: str, limit: int) -> list[AuditEntry]:
        """The latest changes to a group's shared blocks, newest first."""
        return await _audit_entries(self._db, "WHERE group_scope = ?", [group_scope], limit, 0)

    async def prune_audit(self, group_scope: str, before: datetime) -> int:
        """Forget a group's audit entries older than before; returns how many went."""
        return await self._db.execute(
            "DELETE FROM shared_audit WHERE group_scope = ? AND at < ?", group_scope, ts(before)
        )


class BrowseStore(Protocol):
    """Read-only views over blocks and the audit trail, for the operator's web page."""

    _db: Database
    _search: SearchIndex

    async def first_scope_after(self, key: str) -> str | None:
        """The first scope key holding blocks that sorts after key, if any."""
        value = await self._db.fetchval("SELECT MIN(scope) FROM blocks WHERE scope > ?", key)
        return None if value is None else str(value)

    async def scopes_with_prefix(
        self, prefix: str, *, after: str, limit: int
    ) -> list[tuple[str, int]]:
        """Scopes holding blocks whose keys start with prefix and sort after the key after, in
        key order, each with its number of blocks; at most limit of them."""
        found = await self._db.fetch(
            "SELECT scope, COUNT(*) FROM blocks WHERE scope >= ? AND scope < ? AND scope > ? "
            "GROUP BY scope ORDER BY scope LIMIT ?",
            *(*prefix_range(prefix), after, limit),
        )
        return [(scope, int(count)) for scope, count in found if scope.startswith(prefix)]

    async def blocks_with_prefix(self, prefix: str) -> list[Block]:
        """Every block of the scopes whose keys start with prefix, by scope, oldest first."""
        found = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope >= ? AND scope < ? {_IN_ORDER}",
            *prefix_range(prefix),
        )
        return [block_from_row(row) for row in found if row[1].startswith(prefix)]

    async def search_blocks(
        self, text: str, *, limit: int, within: Sequence[str] | None = None
    ) -> list[Block]:
        """Blocks whose label or content contains text (SQLite ignores the case of ASCII
        letters, PostgreSQL that of every letter), at most limit, by scope (then creation);
        only in scopes whose keys start with one of the prefixes within (None: every scope).
        Read through the search index where there is one, with the same answer."""
        found = await self._search.find(text, limit=limit, within=within)
        return [block_from_row(row) for row in found]

    async def catch_up_search(self) -> int:
        """Bring the search index up to date with the blocks changed since it last was (SQLite
        indexes changes in batches); returns how many blocks it indexed."""
        return await self._search.catch_up()

    async def audit_entries(
        self,
        *,
        group: str | None = None,
        actor: str | None = None,
        kind: ChangeKind | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> list[AuditEntry]:
        """Changes to shared blocks, newest first, filtered by group, actor, kind of change and
        time [since, until); a page of them."""
        conditions, args = [], []
        for sql, value in (
            ("group_scope = ?", group),
            ("actor = ?", actor),
            ("kind = ?", kind.value if kind else None),
            ("at >= ?", ts(since) if since else None),
            ("at < ?", ts(until) if until else None),
        ):
            if value is not None and value != "":
                conditions.append(sql)
                args.append(value)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        return await _audit_entries(self._db, where, args, limit, offset)

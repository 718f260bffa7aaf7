"""Blocks of every scope, the model-call counts that age idle blocks, the audit trail of shared
blocks, and the read-only views the operator's web page browses them with. Blocks change
through storage.changes only (and idle ones are cleaned up here)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from storage import models, rows
from storage.dialect import Database, Step
from storage.models import (
    AuditEntry,
    Author,
    Block,
    ChangeKind,
    Channel,
    Limits,
)
from storage.rows import BLOCK_COLUMNS, BLOCK_WIDTH, block_from_row, prefix_range, ts
from storage.search import SearchIndex

Scopes = dict[str, tuple[int, list[Block]]]  # scope → (model-call count, blocks)
KEEP = Limits(0)  # for writes that only remove: the default number of versions kept
CLEANUP = Author("cleanup", Channel.CLEANUP)
_IN_ORDER = "ORDER BY scope, created_at, id"
# A model call's read: the scopes' blocks sent always (or idle), then a row per scope with its
# version and call count (the first column NULL), in one round trip.
_NO_BLOCK = ", ".join(["NULL", "v.scope", *["NULL"] * (BLOCK_WIDTH - 2)])
_FOR_A_CALL = (
    f"SELECT {BLOCK_COLUMNS}, NULL, NULL FROM blocks WHERE scope IN (?*) AND triggers IS NULL "
    f"UNION ALL SELECT {_NO_BLOCK}, v.version, "
    "(SELECT calls FROM scope_calls c WHERE c.scope = v.scope) "
    "FROM scope_versions v WHERE v.scope IN (?*)"
)


class TriggeredBlocks:
    """The blocks that wait for keywords of the scopes most recently asked for, each with the
    version of its scope they were read at; a bounded number of scopes."""

    def __init__(self, scopes: int = 4096) -> None:
        self._kept: OrderedDict[str, tuple[int, list[Block]]] = OrderedDict()
        self._most = scopes

    def version(self, scope: str) -> int | None:
        """The version of scope its kept blocks were read at (None: none kept)."""
        kept = self._kept.get(scope)
        if kept is None:
            return None
        self._kept.move_to_end(scope)
        return kept[0]

    def blocks(self, scope: str) -> list[Block]:
        """The kept blocks of scope that wait for keywords."""
        kept = self._kept.get(scope)
        return kept[1] if kept else []

    def forget(self, scope: str) -> None:
        """Keep nothing of scope."""
        self._kept.pop(scope, None)

    def keep(self, scope: str, version: int, blocks: list[Block]) -> None:
        """Keep scope's blocks as read at version, dropping the longest unasked scope past
        the bound."""
        self._kept[scope] = (version, blocks)
        self._kept.move_to_end(scope)
        while len(self._kept) > self._most:
            self._kept.popitem(last=False)


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


def group_records_forgotten(group: str, members_prefix: str) -> list[tuple[str | None, Step]]:
    """The statements forgetting what is kept beside a group's blocks (gone before, as block
    changes): its audit trail (counted as "audit"), and the model-call counts, notes and
    versions of its shared scope and its members' scopes (whose keys start with members_prefix)."""
    mine = "scope = ? OR substr(scope, 1, length(?)) = ?"
    scopes = (group, members_prefix, members_prefix)
    return [
        ("audit", Step("DELETE FROM shared_audit WHERE group_scope = ?", (group,))),
        (None, Step(f"DELETE FROM scope_calls WHERE {mine}", scopes)),
        (None, Step(f"DELETE FROM scope_notes WHERE {mine}", scopes)),
        (None, Step(f"DELETE FROM scope_versions WHERE {mine}", scopes)),
    ]


class BlockStore(Protocol):
    """The store's blocks, their model-call counts and the audit trail of shared blocks."""

    _db: Database
    _pending_calls: rows.PendingCalls
    _triggered: TriggeredBlocks

    async def blocks(self, scopes: Sequence[str]) -> list[Block]:
        """Every block of the given scopes, in any state, oldest creation first."""
        if not scopes:
            return []
        found = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope IN (?*) ORDER BY created_at, id",
            list(scopes),
        )
        return [block_from_row(row) for row in found]

    # --- model-call counts --------------------------------------------------------------------

    async def start_model_call(self, scopes: Sequence[str]) -> tuple[list[Block], dict[str, int]]:
        """Count one model call for each scope and return, in one query, the scopes' blocks (in
        any state, in no particular order) and, for each scope that has had blocks, its call
        count before this call. A scope's blocks that wait for keywords are read again only
        when its version says they changed (a scope may hold a thousand of them)."""
        if not scopes:
            return [], {}
        found = await self._db.fetch(_FOR_A_CALL, list(scopes), list(scopes))
        plain, stored, stale = [], {}, []
        for row in found:
            if row[0] is not None:
                plain.append(block_from_row(row))
                continue
            scope, version = row[1], row[BLOCK_WIDTH]
            stored[scope] = row[BLOCK_WIDTH + 1] or 0
            if self._triggered.version(scope) != version:
                stale.append((scope, version))
        for scope in scopes:
            if scope not in stored:  # no version: none of its blocks is left
                self._triggered.forget(scope)
        if stale:
            await self._read_triggered(stale)
        waiting = [b for scope in scopes for b in self._triggered.blocks(scope)]
        return plain + waiting, self._pending_calls.count(scopes, stored)

    async def _read_triggered(self, stale: Sequence[tuple[str, int]]) -> None:
        """Read again the blocks that wait for keywords of scopes whose version changed."""
        found = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope IN (?*) AND triggers IS NOT NULL",
            [scope for scope, _ in stale],
        )
        by_scope: dict[str, list[Block]] = {scope: [] for scope, _ in stale}
        for row in found:
            by_scope[row[1]].append(block_from_row(row))
        for scope, version in stale:
            self._triggered.keep(scope, version, by_scope[scope])

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

    async def forget_audit_before(self, moment: datetime) -> int:
        """Forget every group's audit entries older than moment (retention); returns how many
        went."""
        return await self._db.execute("DELETE FROM shared_audit WHERE at < ?", ts(moment))


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
        time [since, until); a page of them. A change of several aspects at once is one entry
        of its first aspect's kind naming the others in its detail: it is found by each."""
        conditions: list[str] = []
        args: list[str | float] = []
        if kind is not None:
            conditions.append("(kind = ? OR (kind != ? AND detail LIKE ?))")
            aspect = "content" if kind is ChangeKind.EDIT else kind.value
            args += [kind.value, ChangeKind.RESTORE.value, f"%; {aspect}%"]
        for sql, value in (
            ("group_scope = ?", group),
            ("actor = ?", actor),
            ("at >= ?", ts(since) if since else None),
            ("at < ?", ts(until) if until else None),
        ):
            if value is not None and value != "":
                conditions.append(sql)
                args.append(value)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        return await _audit_entries(self._db, where, args, limit, offset)

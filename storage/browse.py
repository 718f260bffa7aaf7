"""Browsing for the operator's web page: scopes by key prefix, paged; blocks by prefix; search;
the audit trail filtered."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from storage.dialect import Database
from storage.models import AuditEntry, Block, ChangeKind
from storage.rows import (
    AUDIT_COLUMNS,
    BLOCK_COLUMNS,
    audit_filter,
    audit_from_row,
    block_from_row,
    like_pattern,
    prefix_range,
)


class BrowseStore(Protocol):
    """Read-only views over blocks and the audit trail."""

    _db: Database

    async def first_scope_after(self, key: str) -> str | None:
        """The first scope key holding blocks that sorts after key, if any."""
        value = await self._db.fetchval("SELECT MIN(scope) FROM blocks WHERE scope > ?", key)
        return None if value is None else str(value)

    async def scopes_with_prefix(
        self, prefix: str, *, after: str, limit: int
    ) -> list[tuple[str, int]]:
        """Scopes holding blocks whose keys start with prefix and sort after the key after, in
        key order, each with its number of blocks; at most limit of them."""
        low, high = prefix_range(prefix)
        rows = await self._db.fetch(
            "SELECT scope, COUNT(*) FROM blocks WHERE scope >= ? AND scope < ? AND scope > ? "
            "GROUP BY scope ORDER BY scope LIMIT ?",
            low,
            high,
            after,
            limit,
        )
        return [(row[0], int(row[1])) for row in rows if row[0].startswith(prefix)]

    async def blocks_with_prefix(self, prefix: str) -> list[Block]:
        """Every block of the scopes whose keys start with prefix, by scope, oldest first."""
        low, high = prefix_range(prefix)
        rows = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope >= ? AND scope < ? "
            "ORDER BY scope, created_at, id",
            low,
            high,
        )
        return [block_from_row(row) for row in rows if row[1].startswith(prefix)]

    async def search_blocks(
        self, text: str, *, limit: int, skip_scopes_like: str | None = None
    ) -> list[Block]:
        """Blocks whose label or content contains text (ignoring the case of ASCII letters), at
        most limit, by scope; scopes matching the LIKE pattern skip_scopes_like are left out."""
        pattern, like = like_pattern(text), self._db.ilike
        rows = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE (label {like} ? ESCAPE '\\' "
            f"OR content {like} ? ESCAPE '\\') "
            "AND (CAST(? AS TEXT) IS NULL OR scope NOT LIKE ?) "
            "ORDER BY scope, created_at, id LIMIT ?",
            pattern,
            pattern,
            skip_scopes_like,
            skip_scopes_like,
            limit,
        )
        return [block_from_row(row) for row in rows]

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
        where, args = audit_filter(group=group, actor=actor, kind=kind, since=since, until=until)
        rows = await self._db.fetch(
            f"SELECT {AUDIT_COLUMNS} FROM shared_audit {where} "
            "ORDER BY at DESC, id DESC LIMIT ? OFFSET ?",
            *args,
            limit,
            offset,
        )
        return [audit_from_row(row) for row in rows]

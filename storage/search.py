"""Finding blocks by a piece of their label or content (the web page's search) through an index
of trigrams, with the meaning of a scan: blocks where `label LIKE %text% OR content LIKE %text%`
(SQLite's LIKE ignores the case of ASCII letters, PostgreSQL's ILIKE that of every letter), by
scope, then creation, at most `limit` of them.

Each dialect has its index (storage.dialect's TextIndex): SQLite an FTS5 trigram table that
`catch_up` brings up to date with the blocks changed since (a periodic job runs it, and so does
a search before it reads the index), PostgreSQL a pg_trgm GIN index it keeps itself; schema step
15 makes it. Where neither is there (a SQLite without FTS5's trigram tokenizer, a PostgreSQL
server without pg_trgm), a search scans, as it always did.

The index only proposes candidates: the text condition decides, checked on every one. A search
reads, in turn, until it has its answer:
1. the first HEAD_ROWS blocks in key order of each area searched (a term common there is
   answered from them alone);
2. every candidate of the index, when there are at most CANDIDATES (a term of three characters
   or more: a trigram);
3. the blocks after those of step 1, in key order, until `limit` blocks match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from storage.dialect import Database, Row
from storage.rows import BLOCK_COLUMNS, prefix_range

HEAD_ROWS = 2_000
CANDIDATES = 5_000
CATCH_UP_BATCH = 1_000
_ORDER = "ORDER BY scope, created_at, id"


@dataclass(frozen=True)
class _Area:
    """The scope keys searched: those starting with prefix (None: every key)."""

    prefix: str | None

    def where(self, low: str | None = None, high: str | None = None) -> tuple[str, list[Any]]:
        """The condition selecting the area's keys in [low, high) (by default all of them), as
        an index range, and its arguments."""
        if self.prefix is not None:
            start, end = prefix_range(self.prefix)
            low, high = max(low or start, start), min(high or end, end)
        sql, args = [], []
        for value, test in ((low, "scope >= ?"), (high, "scope < ?")):
            if value is not None:
                sql.append(test)
                args.append(value)
        return " AND ".join(sql) or "1 = 1", args

    def exact(self) -> tuple[str, list[Any]]:
        """The condition that a key is in the area, whatever the collation does to ranges."""
        if self.prefix is None:
            return "1 = 1", []
        return "substr(scope, 1, ?) = ?", [len(self.prefix), self.prefix]


class SearchIndex:
    """The search index of one database, and searches through it."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._index = db.text_index

    async def catch_up(self) -> int:
        """Index the blocks changed since the index was last brought up to date, in batches
        (each its own transaction); returns how many. Nothing to do on PostgreSQL."""
        return await self._index.catch_up(CATCH_UP_BATCH)

    async def find(self, text: str, *, limit: int, within: Sequence[str] | None) -> list[Row]:
        """Rows (BLOCK_COLUMNS) of the blocks whose label or content contains text, by scope
        (in the order of the prefixes given, then key order), at most limit; only in scopes
        whose keys start with one of the prefixes within (None: every scope)."""
        areas = [_Area(p) for p in sorted(set(within))] if within is not None else [_Area(None)]
        like = f"(label {self._db.ilike} ? ESCAPE '\\' OR content {self._db.ilike} ? ESCAPE '\\')"
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        matches = (like, [f"%{escaped}%"] * 2)
        found: list[Row] = []
        for number, area in enumerate(areas):
            rows, rest = await self._head(area, matches, limit - len(found))
            found += rows
            if len(found) >= limit:
                return found
            if rest is not None:  # the area goes on after what was read
                indexed = await self._indexed(text, areas, matches, limit)
                if indexed is not None:
                    return indexed
                return found + await self._scan(areas[number:], rest, matches, limit - len(found))
        return found  # every area was read whole

    async def _head(
        self, area: _Area, matches: tuple[str, list[Any]], limit: int
    ) -> tuple[list[Row], str | None]:
        """The matches among the area's first HEAD_ROWS blocks in key order, all of them in
        the scopes read whole; and the key from which the area was not read (None: all was)."""
        where, args = area.where()
        rest = await self._db.fetchval(
            f"SELECT scope FROM blocks WHERE {where} ORDER BY scope, label_key LIMIT 1 OFFSET ?",
            *args,
            HEAD_ROWS - 1,
        )
        where, args = area.where(high=rest)
        exact, exact_args = area.exact()
        # The blocks read are a LIMITed subquery in key order: no planner reads them otherwise.
        rows = await self._db.fetch(
            f"SELECT {BLOCK_COLUMNS} FROM (SELECT {BLOCK_COLUMNS} FROM blocks WHERE {where} "
            f"ORDER BY scope, label_key LIMIT ?) b WHERE {matches[0]} AND {exact} {_ORDER} "
            "LIMIT ?",
            *(*args, HEAD_ROWS, *matches[1], *exact_args, limit),
        )
        return rows, rest

    async def _scan(
        self, areas: Sequence[_Area], start: str, matches: tuple[str, list[Any]], limit: int
    ) -> list[Row]:
        """The matches in key order from the key start on in the first area, then in the
        others, until limit."""
        found: list[Row] = []
        async with self._db.reading(through_index=False) as tx:
            for number, area in enumerate(areas):
                where, args = area.where(low=start if number == 0 else None)
                exact, exact_args = area.exact()
                found += await tx.fetch(
                    f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE {where} AND {exact} AND "
                    f"{matches[0]} {_ORDER} LIMIT ?",
                    *(*args, *exact_args, *matches[1], limit - len(found)),
                )
                if len(found) >= limit:
                    break
        return found

    async def _indexed(
        self, text: str, areas: Sequence[_Area], matches: tuple[str, list[Any]], limit: int
    ) -> list[Row] | None:
        """The answer through the index, when it has few enough candidates for text (None:
        not, or no index for it)."""
        if not await self._index.present():
            return None
        candidates = self._index.candidates(text, matches)
        if candidates is None:
            return None
        count_sql, count_args, condition, condition_args = candidates
        await self.catch_up()
        visible = [area.where() for area in areas]
        exact = [area.exact() for area in areas]
        within = " OR ".join(
            f"({w} AND {e})" for (w, _), (e, _) in zip(visible, exact, strict=True)
        )
        within_args = [
            arg for (_, w), (_, e) in zip(visible, exact, strict=True) for arg in (*w, *e)
        ]
        async with self._db.reading(through_index=True) as tx:
            if int(await tx.fetchval(count_sql, *count_args, CANDIDATES + 1)) > CANDIDATES:
                return None
            return await tx.fetch(
                f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE {condition} AND {matches[0]} "
                f"AND ({within}) {_ORDER} LIMIT ?",
                *(*condition_args, *matches[1], *within_args, limit),
            )

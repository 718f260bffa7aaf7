"""Finding blocks by a piece of their label or content (the web page's search) through an index
of trigrams, with the meaning of a scan: blocks where `label LIKE %text% OR content LIKE %text%`
(SQLite's LIKE ignores the case of ASCII letters, PostgreSQL's ILIKE that of every letter), by
scope, then creation, at most `limit` of them.

SQLite indexes labels and content in an FTS5 trigram table. Writing it in the transaction of
every change would cost more than the change (FTS5 writes a segment per transaction), so triggers
only note each changed block, with the text the index holds for it, and `catch_up` indexes the
noted blocks in batches: a periodic job runs it, and so does a search before it reads the index.
A search reads the noted blocks too, so it never misses a change. PostgreSQL keeps a pg_trgm GIN
index itself. Where neither is there (a SQLite without FTS5's trigram tokenizer, a PostgreSQL
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

import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from storage.dialect import Database, Executor, Row
from storage.rows import BLOCK_COLUMNS, prefix_range

log = logging.getLogger(__name__)
HEAD_ROWS = 2_000
CANDIDATES = 5_000
CATCH_UP_BATCH = 1_000
TRIGRAM = 3  # characters: a shorter term has no trigram for the index to look up
_ORDER = "ORDER BY scope, created_at, id"
# The text each noted block has in the index (indexed 0: none yet), to take it out again.
_NOTED = "blocks_search_noted"
_NOTE_OLD = (
    f"INSERT INTO {_NOTED} (id, indexed, label, content) SELECT old.id, 1, old.label, "
    f"old.content WHERE NOT EXISTS (SELECT 1 FROM {_NOTED} WHERE id = old.id)"
)
_SQLITE_INDEX = [
    "CREATE TABLE blocks_search_noted (id INTEGER PRIMARY KEY, indexed INTEGER NOT NULL, "
    "label TEXT, content TEXT)",
    # The first note of a block stays until the block is indexed: it holds what the index has.
    "CREATE TRIGGER blocks_search_added AFTER INSERT ON blocks BEGIN "
    f"INSERT INTO {_NOTED} (id, indexed) SELECT new.id, 0 "
    f"WHERE NOT EXISTS (SELECT 1 FROM {_NOTED} WHERE id = new.id); END",
    "CREATE TRIGGER blocks_search_changed AFTER UPDATE OF label, content ON blocks "
    f"WHEN old.label IS NOT new.label OR old.content IS NOT new.content BEGIN {_NOTE_OLD}; END",
    f"CREATE TRIGGER blocks_search_removed AFTER DELETE ON blocks BEGIN {_NOTE_OLD}; END",
    "INSERT INTO blocks_search (blocks_search) VALUES ('rebuild')",
]
_FTS5 = (
    "CREATE VIRTUAL TABLE blocks_search USING fts5(label, content, content='blocks', "
    # detail=none: no positions, a third of the size and of the cost to write; a term's
    # trigrams are then looked up as a set, and the text condition settles the rest.
    "content_rowid='id', tokenize='trigram', detail=none)"
)


PG_SEARCH_INDEX = (
    "CREATE INDEX blocks_search ON blocks USING gin (label gin_trgm_ops, content gin_trgm_ops)"
)


async def create_index(tx: Executor, db: Database) -> None:
    """The search index of blocks, when this database can have one (schema step 15); without,
    a warning says why and searches scan."""
    if db.one_process:
        reason = await tx.attempt(_FTS5)
        if reason is None:
            for statement in _SQLITE_INDEX:
                await tx.execute(statement)
            return
        log.warning(
            "search scans every block: this SQLite (%s) has no FTS5 trigram tokenizer (%s); "
            "SQLite 3.34 or later with FTS5 has one",
            *(sqlite3.sqlite_version, reason),
        )
        return
    reason = await tx.attempt("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    if reason is None:
        await tx.execute(PG_SEARCH_INDEX)
        return
    log.warning(
        "search scans every block: the PostgreSQL extension pg_trgm could not be created "
        "(%s). To index it later, as a user who may: CREATE EXTENSION pg_trgm; %s;",
        *(reason, PG_SEARCH_INDEX),
    )


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
        self._present: bool | None = None  # whether the index is there (asked once)

    async def present(self) -> bool:
        """Whether this database has the search index (and, on SQLite, can read it)."""
        if self._present is None:
            if self._db.one_process:
                try:
                    await self._db.fetch("SELECT rowid FROM blocks_search LIMIT 0")
                    self._present = True
                except sqlite3.OperationalError:  # no such table, or no FTS5 here
                    self._present = False
            else:
                found = await self._db.fetchval("SELECT to_regclass('blocks_search')")
                self._present = found is not None
        return self._present

    async def catch_up(self) -> int:
        """Index the blocks changed since the index was last brought up to date, in batches
        (each its own transaction); returns how many. Nothing to do on PostgreSQL."""
        if not self._db.one_process or not await self.present():
            return 0
        done = 0
        while True:
            async with self._db.transaction() as tx:
                last = await tx.fetchval(
                    f"SELECT MAX(id) FROM (SELECT id FROM {_NOTED} ORDER BY id LIMIT ?)",
                    CATCH_UP_BATCH,
                )
                if last is None:
                    return done
                await tx.execute(
                    "INSERT INTO blocks_search (blocks_search, rowid, label, content) "
                    f"SELECT 'delete', id, label, content FROM {_NOTED} "
                    "WHERE id <= ? AND indexed = 1",
                    last,
                )
                # Each noted block looked up by id: as a join, SQLite walks every block up to
                # the last noted id and looks for its note.
                await tx.execute(
                    "INSERT INTO blocks_search (rowid, label, content) SELECT id, label, content "
                    f"FROM blocks WHERE id IN (SELECT id FROM {_NOTED} WHERE id <= ?)",
                    last,
                )
                done += await tx.execute(f"DELETE FROM {_NOTED} WHERE id <= ?", last)

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
        if not await self.present():
            return None
        if self._db.one_process:
            candidates = _fts_candidates(text)
        else:
            candidates = _trgm_candidates(text, matches)
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


Candidates = tuple[str, list[Any], str, list[Any]]


def _fts_candidates(text: str) -> Candidates | None:
    """How many candidates FTS5 has for text (up to a limit), and the condition selecting
    them: the blocks with every trigram of text, and the blocks noted since the index was
    brought up to date."""
    if len(text) < TRIGRAM or "\x00" in text:  # FTS5 reads its query up to a NUL
        return None
    trigrams = dict.fromkeys(text[i : i + TRIGRAM] for i in range(len(text) - TRIGRAM + 1))
    query = " AND ".join('"' + trigram.replace('"', '""') + '"' for trigram in trigrams)
    lookup = "SELECT rowid FROM blocks_search WHERE blocks_search MATCH ?"
    return (
        f"SELECT (SELECT COUNT(*) FROM ({lookup} LIMIT ?)) + (SELECT COUNT(*) FROM {_NOTED})",
        [query],
        f"id IN ({lookup} UNION ALL SELECT id FROM {_NOTED})",
        [query],
    )


def _trgm_candidates(text: str, matches: tuple[str, list[Any]]) -> Candidates | None:
    """How many blocks match text (up to a limit), read through pg_trgm, and the condition
    selecting them (the text condition itself)."""
    # pg_trgm looks a LIKE pattern up by the trigrams inside its words: with no word of three
    # letters or digits there is none, and the index would return every block.
    run = longest = 0
    for character in text:
        run = run + 1 if character.isalnum() else 0
        longest = max(longest, run)
    if longest < TRIGRAM:
        return None
    return (
        f"SELECT COUNT(*) FROM (SELECT 1 FROM blocks WHERE {matches[0]} LIMIT ?) c",
        matches[1],
        "1 = 1",
        [],
    )

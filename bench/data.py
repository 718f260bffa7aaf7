"""Synthetic stores: scopes of 10 blocks of about 200 characters, mixed levels and states, in
pinbot's SQLite schema and in the JSON layouts of the baselines."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from storage import Store
from storage.models import label_key

BLOCKS_PER_SCOPE = 10
PLATFORM = "bench"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "pinned",
    "context",
    "rule",
    "note",
    "project",
    "deadline",
    "budget",
    "meeting",
    "answer",
    "briefly",
    "cite",
    "sources",
    "never",
]


def scope_of(index: int) -> str:
    """The DM scope of synthetic user index."""
    return f"{PLATFORM}:direct:{index}"


def group_scope_of(index: int) -> str:
    """Scope index of a store shaped like group chats: each group has its shared scope and nine
    members with personal blocks."""
    group, member = divmod(index, 10)
    key = f"telegram:group:-100{group}"
    return key if member == 0 else f"{key}::u:{member}"


def _content(rng: random.Random) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < 200:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:200]


def rows(
    scopes: int, seed: int = 7, scope_for: Callable[[int], str] = scope_of
) -> Iterator[tuple[object, ...]]:
    """Block rows for `scopes` scopes: 3 strong and 7 context each; one idle, one pinned."""
    rng = random.Random(seed)
    # Recent times: idle blocks are checked for cleanup on every turn but are not yet due, so the
    # figures show the steady state, not a one-off deletion per scope.
    stamp = time.time() - 3600
    for index in range(scopes):
        scope = scope_for(index)
        for number in range(BLOCKS_PER_SCOPE):
            label = f"block{number}"
            level = "strong" if number < 3 else "context"
            state = "idle" if number == 9 else "pinned" if number == 0 else "active"
            idle_since = stamp if state == "idle" else None
            yield (
                scope,
                label,
                label_key(label),
                _content(rng),
                level,
                state,
                rng.choice((0, 0, 0, 5)),
                stamp + number,
                stamp + number,
                idle_since,
                0 if state == "idle" else None,
            )


def build_sqlite(path: Path, scopes: int, scope_for: Callable[[int], str] = scope_of) -> None:
    """Create a pinbot database at path holding `scopes` scopes of 10 blocks, indexed for
    search as a running pinbot keeps it."""
    asyncio.run(_create_schema(path))
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO blocks (scope, label, label_key, content, level, state, priority, "
            "created_at, updated_at, idle_since, idle_calls) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            rows(scopes, scope_for=scope_for),
        )
    asyncio.run(_catch_up_search(path))
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


# This module also runs on an earlier commit's packages (bench/history.py measures both trees
# with the same code): what the search index and the usage sums need is imported or called
# only where the tree has it.


async def _catch_up_search(path: Path) -> None:
    """Index the store's blocks for search (SQLite indexes changed blocks in batches), in a tree
    that has a search index."""
    store = await Store.open(path)
    try:
        catch_up = getattr(store, "catch_up_search", None)
        if catch_up is not None:
            await catch_up()
    finally:
        await store.close()


async def usage_summed(store: Store) -> None:
    """Make the store's usage sums again from its usage rows, after rows were written straight
    into the table (as a schema step or a transfer makes them again)."""
    from storage import usage_sums

    async with store._db.transaction() as tx:
        await usage_sums.rebuild(tx)


def build_postgres(url: str, scopes: int, scope_for: Callable[[int], str] = scope_of) -> None:
    """Fill the (empty) PostgreSQL database at url with the same blocks as build_sqlite."""
    asyncio.run(_fill_postgres(url, scopes, scope_for))


async def _fill_postgres(url: str, scopes: int, scope_for: Callable[[int], str]) -> None:
    import asyncpg

    from storage.rows import BLOCK_INSERT_COLUMNS

    store = await Store.open(url=url)  # the schema
    await store.close()
    connection = await asyncpg.connect(url)
    try:
        # The search index is built once after the copy, as the schema step builds it.
        indexed = await connection.fetchval("SELECT to_regclass('blocks_search')") is not None
        if indexed:
            await connection.execute("DROP INDEX blocks_search")
        await connection.copy_records_to_table(
            "blocks",
            records=rows(scopes, scope_for=scope_for),
            # The columns rows() fills (a newer schema's further ones keep their defaults).
            columns=list(BLOCK_INSERT_COLUMNS)[:11],
        )
        if indexed:
            try:
                from storage.schema import PG_SEARCH_INDEX
            except ImportError:  # an earlier tree (bench.history.call_in) kept it in search
                from storage.search import PG_SEARCH_INDEX  # type: ignore[attr-defined,no-redef]

            await connection.execute(PG_SEARCH_INDEX)
        await connection.execute("ANALYZE blocks")
    finally:
        await connection.close()


async def _create_schema(path: Path) -> None:
    store = await Store.open(path)
    await store.close()


def _as_json_blocks(scope_rows: list[tuple[object, ...]]) -> dict[str, object]:
    return {
        str(r[1]): {
            "content": r[3],
            "level": r[4],
            "state": r[5],
            "priority": r[6],
            "created": r[7],
            "updated": r[8],
        }
        for r in scope_rows
    }


def build_json_single(path: Path, scopes: int) -> None:
    """All scopes in one JSON file, as the sticky-context plugin keeps its workspace file."""
    store: dict[str, object] = {}
    current: list[tuple[object, ...]] = []
    for row in rows(scopes):
        current.append(row)
        if len(current) == BLOCKS_PER_SCOPE:
            store[str(row[0])] = {"version": 1, "slots": _as_json_blocks(current)}
            current = []
    path.write_text(json.dumps(store), encoding="utf-8")


def build_json_per_scope(folder: Path, scopes: int) -> None:
    """One JSON file per scope."""
    folder.mkdir(parents=True, exist_ok=True)
    current: list[tuple[object, ...]] = []
    for row in rows(scopes):
        current.append(row)
        if len(current) == BLOCKS_PER_SCOPE:
            index = str(row[0]).rsplit(":", 1)[1]
            (folder / f"{index}.json").write_text(
                json.dumps({"version": 1, "slots": _as_json_blocks(current)}), encoding="utf-8"
            )
            current = []

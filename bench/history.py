"""Block history (issue 28): every change to a block keeps the block's state before it in
block_versions. Measured here, in the same run: what a stored version takes on disk (after one
real `/pin edit` of every block of a small store, and at the largest store after one edit per
block), on SQLite and PostgreSQL; and, against the commit before history (BEFORE), committed
`/pin add` and `/pin edit` per second and the turn's p50, the two trees alternating. This
checkout's bench modules measure both trees (the same harness), each in its own process on that
tree's packages."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg

from bench import baseline, commands, data
from bot.config import parse_config
from bot.core.entry.incoming import SILENT, Incoming
from bot.core.entry.pinbot import Pinbot
from bot.core.people import ChatKind, Conversation
from bot.core.replies import Result
from bot.llm.offline import OfflineChatModel
from storage import open_store
from storage.changes import VERSION_INSERT, new_op, version_row
from storage.models import Author, ChangeKind, Channel
from storage.rows import BLOCK_COLUMNS, block_from_row, dt

BEFORE = "559a96f"  # fa0da32^: the last commit before block history (issue 28)
TABLE = "block_versions"
# Runs in the measured tree's process: a function of this checkout's bench module, on that
# tree's packages (so both trees are measured by the same code).
_CALL = """
import json, runpy, sys
function = runpy.run_path(sys.argv[1])[sys.argv[2]]
print(json.dumps(function(*json.loads(sys.argv[3]))))
"""
# A fixed shuffle of block ids, the same in SQLite and PostgreSQL: edits arrive in no order.
_SHUFFLED = "ORDER BY (id * 2654435761) % 4294967296"


def call_in(tree: Path, module: str, function: str, *args: Any) -> Any:
    """function(*args) of this checkout's bench/<module>.py, run in a fresh process on tree."""
    path = str(baseline.ROOT / "bench" / f"{module}.py")
    return baseline.run_in(tree, _CALL, path, function, json.dumps(args))


# --- what a version takes on disk -------------------------------------------------------------


def sqlite_size(path: Path) -> dict[str, Any]:
    """The history table's bytes on disk (table and each index, from dbstat), its rows and
    their mean content length."""
    with sqlite3.connect(path) as db:
        indexes = [
            row[0]
            for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (TABLE,)
            )
        ]
        marks = ", ".join("?" * (1 + len(indexes)))
        pages = dict(
            db.execute(
                f"SELECT name, SUM(pgsize) FROM dbstat WHERE name IN ({marks}) GROUP BY name",
                (TABLE, *indexes),
            ).fetchall()
        )
        count, content = db.execute(
            f"SELECT COUNT(*), COALESCE(AVG(length(content)), 0) FROM {TABLE}"
        ).fetchone()
    return _size(count, content, pages.get(TABLE, 0), {i: pages.get(i, 0) for i in indexes})


async def postgres_size(url: str) -> dict[str, Any]:
    """The history table's bytes on disk (heap with TOAST, and each index), its rows and their
    mean content length."""
    connection = await asyncpg.connect(url)
    try:
        table = await connection.fetchval(f"SELECT pg_table_size('{TABLE}')")
        indexes = await connection.fetch(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
            f"WHERE indrelid = '{TABLE}'::regclass"
        )
        rows = await connection.fetchrow(
            f"SELECT COUNT(*), COALESCE(AVG(length(content)), 0) FROM {TABLE}"
        )
    finally:
        await connection.close()
    assert rows is not None
    return _size(rows[0], float(rows[1]), table, {name: size for name, size in indexes})


def _size(count: int, content: float, table: int, indexes: dict[str, int]) -> dict[str, Any]:
    total = table + sum(indexes.values())
    per = total / count if count else 0.0
    return {
        "versions": count,
        "total_bytes": total,
        "table_bytes": table,
        "index_bytes": dict(sorted(indexes.items())),
        "bytes_per_version": round(per, 1),
        "content_chars": round(content, 1),
        "overhead_bytes_per_version": round(per - content, 1) if count else 0.0,
    }


async def edit_every_block(path: Path, scopes: int, url: str | None = None) -> None:
    """One real `/pin edit` of every block of the store (at url when given), in a shuffled
    order, through Pinbot.handle: each keeps the block's state before it as a version."""
    store = await open_store(path=str(path), url=url)
    bot = Pinbot(parse_config({}), store, OfflineChatModel())
    edits = [(user, number) for user in range(scopes) for number in range(data.BLOCKS_PER_SCOPE)]
    random.Random(28).shuffle(edits)
    try:
        for user, number in edits:
            conversation = Conversation("bench", ChatKind.DIRECT, str(user), str(user))
            reply = await bot.handle(
                Incoming(conversation, f"/pin edit block{number} {commands.EDITED}"), SILENT
            )
            assert reply is not None and reply.outcome is Result.DONE, reply
    finally:
        await store.close()


def version_rows(path: Path) -> Iterator[tuple[Any, ...]]:
    """The version one `/pin edit` by its owner keeps of each block of the SQLite store at path
    (rows as the write path makes them), blocks in a fixed shuffled order a millisecond apart."""
    start = time.time()
    with sqlite3.connect(path) as db:
        found = db.execute(f"SELECT {BLOCK_COLUMNS} FROM blocks {_SHUFFLED}")
        for index, row in enumerate(found):
            block = block_from_row(row)
            change = Author(block.scope.rsplit(":", 1)[1], Channel.COMMAND)
            at = dt(start + index / 1000)
            yield version_row(
                new_op(), block.scope, block.label, ChangeKind.EDIT, change, at, block
            )


def add_versions_sqlite(path: Path) -> None:
    """Store one edit's version of every block of the SQLite store at path."""
    with sqlite3.connect(path) as db:
        db.executemany(VERSION_INSERT, version_rows(path))
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


async def add_versions_postgres(url: str, blocks_from: Path) -> None:
    """Store in the PostgreSQL database at url the versions add_versions_sqlite stores (its
    blocks are the same as blocks_from's)."""
    # The columns in the order version_row makes them: the write path's own INSERT's.
    columns = VERSION_INSERT.split("(", 1)[1].split(")", 1)[0].split(", ")
    connection = await asyncpg.connect(url)
    try:
        await connection.copy_records_to_table(
            TABLE, records=version_rows(blocks_from), columns=columns
        )
    finally:
        await connection.close()


def measure_sizes(
    folder: Path, small: int, largest: tuple[Path, str], database: Callable[[str], str]
) -> dict[str, Any]:
    """Bytes per version after a real edit of each block of a store of `small` scopes, and the
    history table of the largest store (SQLite file, PostgreSQL URL) after one edit per block."""
    path = folder / "history-edits.sqlite3"
    data.build_sqlite(path, small)
    url = database("history_edits")
    data.build_postgres(url, small)
    asyncio.run(edit_every_block(path, small))
    asyncio.run(edit_every_block(path, small, url))
    store, store_url = largest
    add_versions_sqlite(store)
    asyncio.run(add_versions_postgres(store_url, store))
    return {
        "edited_blocks": small * data.BLOCKS_PER_SCOPE,
        "sqlite": sqlite_size(path),
        "postgres": asyncio.run(postgres_size(url)),
        "largest": {
            "sqlite": sqlite_size(store),
            "postgres": asyncio.run(postgres_size(store_url)),
        },
    }


# --- against the commit before history --------------------------------------------------------


def commands_against(
    old: Path, folder: Path, count: int, runs: int, database: Callable[[str], str]
) -> dict[str, Any]:
    """Committed /pin add, edit and remove per second (and process CPU per command), this tree
    against BEFORE, on fresh SQLite and PostgreSQL stores, alternating runs."""
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for run in range(runs):
        for tree, name in ((baseline.ROOT, "ours"), (old, "before")):
            path = folder / f"history-commands-{name}-{run}.sqlite3"
            call_in(tree, "data", "build_sqlite", str(path), 0)
            url = database(f"history_commands_{name}_{run}")
            for backend, at in (("sqlite", None), ("postgres", url)):
                figures = call_in(tree, "commands", "run_each_verb", str(path), count, 100, at)
                samples.setdefault(backend, {}).setdefault(name, []).append(figures)
    return {backend: _verbs(by_tree) for backend, by_tree in samples.items()}


def _verbs(by_tree: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per verb: each tree's median rate and CPU, and ours over BEFORE's."""
    verbs: dict[str, Any] = {}
    for verb in by_tree["ours"][0]:
        medians = {
            name: {
                key: round(statistics.median(run[verb][key] for run in runs), 3)
                for key in ("per_s", "cpu_ms")
            }
            for name, runs in by_tree.items()
        }
        ours, before = medians["ours"], medians["before"]
        verbs[verb] = {
            **medians,
            "rate_ratio": round(ours["per_s"] / before["per_s"], 3),
            "cpu_ratio": round(ours["cpu_ms"] / before["cpu_ms"], 3),
        }
    return verbs


def turns_against(
    old: Path,
    folder: Path,
    scopes: int,
    turns: int,
    runs: int,
    ours: tuple[Path, str],
    database: Callable[[str], str],
) -> dict[str, Any]:
    """The turn's p50 and p99 on the largest store, this tree (its store holding one version of
    every block) against BEFORE (on the same blocks built by its own schema), alternating runs."""
    path = folder / "history-turns-before.sqlite3"
    call_in(old, "data", "build_sqlite", str(path), scopes)
    url = database("history_turns_before")
    call_in(old, "data", "build_postgres", url, scopes)
    stores = {"ours": ours, "before": (path, url)}
    samples: dict[str, dict[str, list[dict[str, float]]]] = {}
    for run in range(runs):
        for tree, name in ((baseline.ROOT, "ours"), (old, "before")):
            store, store_url = stores[name]
            for backend, at in (("sqlite", None), ("postgres", store_url)):
                figures = call_in(tree, "turn", "run_ours", str(store), scopes, turns, run, at)
                samples.setdefault(backend, {}).setdefault(name, []).append(figures)
    result: dict[str, Any] = {}
    for backend, by_tree in samples.items():
        medians = {name: _median(runs_) for name, runs_ in by_tree.items()}
        ratio = medians["ours"]["p50_us"] / medians["before"]["p50_us"]
        result[backend] = {**medians, "p50_ratio": round(ratio, 3)}
    return result


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(run[key] for run in runs), 1) for key in runs[0]}


def run(
    folder: Path,
    settings: dict[str, Any],
    runs: int,
    largest: tuple[Path, str],
    database: Callable[[str], str],
) -> dict[str, Any]:
    """Every history figure. largest: the largest store's SQLite file and PostgreSQL URL, which
    get one version of every block; database(name) makes an empty PostgreSQL database."""
    sizes = measure_sizes(folder, settings["history_edit_scopes"], largest, database)
    with baseline.tree_of(BEFORE) as old:
        if old is None:
            return {"before": BEFORE, "available": False, "sizes": sizes}
        scopes, count = settings["scopes"][-1], settings["commands"]
        return {
            "before": BEFORE,
            "available": True,
            "runs": runs,
            "sizes": sizes,
            "commands": commands_against(old, folder, count, runs, database),
            "turns": turns_against(old, folder, scopes, settings["turns"], runs, largest, database),
        }

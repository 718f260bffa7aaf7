"""Search through the index gives the scan's answer on both backends: whichever way a search
reads (the first blocks in key order, the index's candidates, or a scan from where the first
read stopped), for terms of every kind (case, CJK, accents, LIKE's wildcards, quotes, two
characters), and after every kind of write to blocks, before and after the index catches up."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from storage import Store, schema, search
from storage.models import (
    Author,
    Block,
    BlockState,
    Channel,
    Level,
    Limits,
    NewBlock,
    State,
    Wanted,
)
from storage.rows import BLOCK_COLUMNS, block_from_row
from tests.pg import PgCluster, fresh_database
from tests.storage import writes
from tests.templates import migrated_database, migrated_sqlite

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BY_7 = Author("7", Channel.COMMAND)
ROOMY = Limits(1000)
TEXTS = [
    "Answer in one sentence, please.",
    "ANSWER briefly; cite SOURCES",
    "日本語のテキストを短く",
    "Réponds en français, école ÉCOLE",
    "100%_off sale: 50% off_peak",
    'quote "this" and \\ that',
    "project deadline Friday",
    "Projektplan für nächste Woche",
    "ab cd ef",
    "x",
]
TERMS = [
    "answer",
    "ANSWER",
    "Answer in one",
    "本語",
    "日本語のテ",
    "école",
    "ÉCOLE",
    "ecole",
    "100%_",
    "0%_o",
    "%",
    "_",
    "%_",
    '"this"',
    "\\ th",
    "ab",
    "b c",
    "project",
    "PROJ",
    "nächste",
    "NÄCHSTE",
    "in none of them",
    "zz",
]
SCOPES = [
    "t:direct:1",
    "t:direct:2",
    "t:group:-1",
    "t:group:-1::u:5",
    "t:group:-2",
    "f:group:-3",
    "f:direct:4",
]
WITHIN: list[list[str] | None] = [None, ["t:group:", "f:group:"], ["t:group:-1"], []]


Opener = Callable[[], Awaitable[Store]]


@pytest.fixture(params=["sqlite", "postgres"])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens new empty stores of the parametrized backend."""
    opened: list[Store] = []

    async def open_one() -> Store:
        url, path = None, tmp_path / f"s{len(opened)}.sqlite3"
        if request.param == "postgres":
            url = await migrated_database(request.getfixturevalue("pg_cluster"))
        else:
            await migrated_sqlite(path)
        opened.append(await Store.open(path, url=url))
        return opened[-1]

    yield open_one
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_store: Opener) -> Store:
    return await open_store()


@pytest.fixture(params=["first blocks", "index", "scan"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which way a search of these small stores gets its answer."""
    if request.param != "first blocks":
        monkeypatch.setattr(search, "HEAD_ROWS", 3)  # the first read stops early
    if request.param == "scan":
        monkeypatch.setattr(search, "CANDIDATES", 0)  # the index always has too many
    return str(request.param)


async def scanned(store: Store, text: str, limit: int, within: Sequence[str] | None) -> list[Block]:
    """The answer of a plain scan: every block, the text condition, by scope then creation."""
    like = store._db.ilike
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = await store._db.fetch(
        f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE label {like} ? ESCAPE '\\' "
        f"OR content {like} ? ESCAPE '\\' ORDER BY scope, created_at, id",
        *([f"%{escaped}%"] * 2),
    )
    blocks = [block_from_row(row) for row in rows]
    if within is not None:
        blocks = [b for b in blocks if any(b.scope.startswith(prefix) for prefix in within)]
    return blocks[:limit]


async def fill(store: Store) -> None:
    for number, scope in enumerate(SCOPES):
        for index, text in enumerate(TEXTS):
            label = f"L{index}" if index % 3 else f"Answer{index}"
            block = NewBlock(scope, label, text, Level.CONTEXT)
            now = NOW + timedelta(seconds=number * 100 - index)  # creation order differs
            await writes.insert(store, block, now=now, limits=ROOMY, by=BY_7)


async def same_answers(store: Store, limits: Sequence[int] = (1, 5, 100)) -> None:
    for term in TERMS:
        for within in WITHIN:
            for limit in limits:
                found = await store.search_blocks(term, limit=limit, within=within)
                expected = await scanned(store, term, limit, within)
                assert [b.id for b in found] == [b.id for b in expected], (term, within, limit)


async def test_every_way_of_searching_gives_the_scans_answer(store: Store, way: str) -> None:
    await fill(store)
    await same_answers(store)  # changes not yet indexed: the noted blocks are searched too
    await store.catch_up_search()
    await same_answers(store)


async def edited(store: Store, block: Block, **change: object) -> None:
    await writes.update(store, block, now=NOW, limits=ROOMY, by=BY_7, **change)  # type: ignore[arg-type]


async def test_every_write_to_blocks_keeps_search_right(store: Store, way: str) -> None:
    await fill(store)
    await store.catch_up_search()
    by_scope = {scope: await store.blocks([scope]) for scope in SCOPES}
    first = by_scope["t:group:-1"]
    await edited(store, first[0], content="now about a project, not answers")
    await edited(store, first[1], state=State.IDLE)  # not the text: nothing to index
    again = next(b for b in await store.blocks(["t:group:-1"]) if b.id == first[1].id)
    await edited(store, again, content="ＡＮＳＷＥＲ in full width")
    await writes.delete(store, first[2], now=NOW, by=BY_7)
    await same_answers(store, limits=(100,))
    await store.catch_up_search()
    await same_answers(store, limits=(100,))
    await writes.clear(store, "t:group:-2", now=NOW, by=BY_7)
    # The newest block goes and a new one may take its id (SQLite reuses the largest).
    newest = max((b for blocks in by_scope.values() for b in blocks), key=lambda b: b.id)
    await writes.delete(store, newest, now=NOW, by=BY_7)
    await writes.insert(
        store,
        NewBlock("t:group:-9", "reused", "école du project", Level.STRONG),
        now=NOW,
        limits=ROOMY,
        by=BY_7,
    )
    await same_answers(store, limits=(100,))
    exported = await store.export_scopes()
    renamed = [
        dataclasses.replace(b, label=b.label + "x", content="réécrit: " + b.content)
        for b in exported["t:direct:1"][1]
    ]
    await writes.replace(store, {"t:direct:1": (0, renamed)}, now=NOW, by=BY_7)
    await store.move_group(
        "t:group:-1", "t:group:-7", members_prefix="t:group:-1::u:", sessions_prefix="t:group:-1:"
    )
    for block in await store.blocks(["f:direct:4"]):
        await writes.delete(store, block, now=NOW, by=BY_7)
    await writes.bring(
        store,
        "f:group:-3",
        [
            Wanted("L1", BlockState("projet école", Level.STRONG, State.ACTIVE)),
            Wanted("brand-new", BlockState("日本語 project", Level.CONTEXT, State.PINNED)),
        ],
        now=NOW,
        limits=ROOMY,
        by=BY_7,
    )
    await same_answers(store, limits=(100,))
    await store.catch_up_search()
    await same_answers(store, limits=(100,))
    await index_is_exact(store)


async def index_is_exact(store: Store) -> None:
    """Caught up, SQLite's index holds exactly the blocks' text, nothing stale (FTS5 compares
    it with the blocks, and raises when they differ)."""
    if store.kind == "SQLite":
        await store.catch_up_search()
        await store._db.execute(
            "INSERT INTO blocks_search (blocks_search, rank) VALUES ('integrity-check', 1)"
        )


async def test_a_transfer_load_is_searched_and_indexed(
    store: Store, open_store: Opener, way: str
) -> None:
    await fill(store)
    dump = await store.dump()
    other = await open_store()
    await other.load(dump)
    await same_answers(other, limits=(100,))
    await other.catch_up_search()
    await same_answers(other, limits=(100,))
    await index_is_exact(other)


async def test_the_index_is_read_and_kept_small(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(store)
    monkeypatch.setattr(search, "HEAD_ROWS", 1)
    if store.kind == "SQLite":
        assert await store.catch_up_search() == len(SCOPES) * len(TEXTS)
        assert await store.catch_up_search() == 0
        raw = store._db
        ids = await raw.fetch(
            "SELECT rowid FROM blocks_search WHERE blocks_search MATCH '\"本語の\"'"
        )
        assert len(ids) == len(SCOPES)
    else:
        assert await store.catch_up_search() == 0  # PostgreSQL keeps its index itself
        async with store._db.reading(through_index=True) as tx:
            plan = await tx.fetch("EXPLAIN SELECT id FROM blocks WHERE content ILIKE '%deadline%'")
        assert "blocks_search" in " ".join(row[0] for row in plan)
    found = await store.search_blocks("deadline", limit=100)
    assert len(found) == len(SCOPES)


async def test_without_an_index_a_search_scans_with_the_same_answer(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    pg_cluster: PgCluster,
) -> None:
    # SQLite without FTS5's trigram tokenizer: the step cannot make the table.
    fts5, *then = schema.SQLITE_SEARCH_INDEX
    broken = [fts5.replace("fts5(", "no_such_module("), *then]
    monkeypatch.setattr(schema, "SQLITE_SEARCH_INDEX", broken)
    monkeypatch.setattr(search, "HEAD_ROWS", 1)
    with caplog.at_level(logging.WARNING, logger="storage.schema"):
        async with await Store.open(tmp_path / "plain.sqlite3") as sqlite:
            await fill(sqlite)
            await same_answers(sqlite, limits=(100,))
            assert await sqlite.catch_up_search() == 0
    assert "search scans every block: this SQLite" in caplog.text
    # A PostgreSQL user who may not create the extension pg_trgm: the upgrade goes on.
    url = await fresh_database(pg_cluster)
    role = f"plain_user_{os.getpid()}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN")
        await admin.execute(f"GRANT CREATE, USAGE ON SCHEMA public TO {role}")
    finally:
        await admin.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="storage.schema"):
        as_plain_user = url.replace("postgres@", f"{role}@", 1)
        async with await Store.open(url=as_plain_user) as postgres:
            await fill(postgres)
            await same_answers(postgres, limits=(100,))
    assert "pg_trgm could not be created" in caplog.text
    assert "CREATE EXTENSION pg_trgm" in caplog.text

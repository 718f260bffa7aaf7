"""The store: migrations, WAL, guarded writes under concurrency, counters, history."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import aiosqlite
import pytest

from storage.migrations import LATEST, MIGRATIONS, migrate, schema_version
from storage.models import Level, NewBlock, State
from storage.sqlite import Store

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def new(label: str, content: str = "text", scope: str = "s") -> NewBlock:
    return NewBlock(scope=scope, label=label, content=content, level=Level.CONTEXT)


async def test_opens_empty_file_at_latest_schema_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite3"
    async with await Store.open(path):
        pass
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == LATEST
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"blocks", "scope_calls", "history"} <= tables


@pytest.mark.parametrize("start", range(1, LATEST))
async def test_migrates_from_every_earlier_version_keeping_blocks(
    tmp_path: Path, start: int
) -> None:
    path = tmp_path / f"v{start}.sqlite3"
    async with aiosqlite.connect(path, isolation_level=None) as db:
        assert await migrate(db, target=start) == start
        await db.execute(
            "INSERT INTO blocks (scope, label, label_key, content, level, state, created_at, "
            "updated_at) VALUES ('s', 'Rules', 'rules', 'Be brief', 'strong', 'pinned', 1, 1)"
        )
    async with await Store.open(path) as store:
        blocks = await store.blocks(["s"])
        assert [(b.label, b.content, b.level, b.state) for b in blocks] == [
            ("Rules", "Be brief", Level.STRONG, State.PINNED)
        ]
        await store.append_turn("k", "hi", "hello", now=NOW, drop_ids=[])
        assert [e.content for e in await store.history("k")] == ["hi", "hello"]


async def test_migrations_are_numbered_consecutively() -> None:
    assert sorted(MIGRATIONS) == list(range(1, LATEST + 1))


async def test_refuses_a_database_from_a_newer_pinbot(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite3"
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {LATEST + 1}")
    with pytest.raises(RuntimeError, match="newer"):
        await Store.open(path)


async def test_reopening_applies_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "again.sqlite3"
    async with await Store.open(path) as store:
        assert await store.insert_block(new("a"), now=NOW, max_blocks=5, max_total_chars=0)
    async with await Store.open(path) as store:
        async with aiosqlite.connect(path) as db:
            assert await schema_version(db) == LATEST
        assert [b.label for b in await store.blocks(["s"])] == ["a"]


async def test_fifty_concurrent_inserts_leave_exactly_the_limit(store: Store) -> None:
    results = await asyncio.gather(
        *(
            store.insert_block(new(f"b{i}"), now=NOW, max_blocks=20, max_total_chars=0)
            for i in range(50)
        )
    )
    assert sum(results) == 20
    assert len(await store.blocks(["s"])) == 20


async def test_concurrent_inserts_respect_the_character_budget(store: Store) -> None:
    results = await asyncio.gather(
        *(
            store.insert_block(new(f"b{i}", "x" * 10), now=NOW, max_blocks=100, max_total_chars=95)
            for i in range(30)
        )
    )
    assert sum(results) == 9
    assert sum(len(b.content) for b in await store.blocks(["s"])) == 90


async def test_duplicate_label_differing_in_case_is_rejected(store: Store) -> None:
    assert await store.insert_block(new("Rules"), now=NOW, max_blocks=5, max_total_chars=0)
    assert not await store.insert_block(new("rULES"), now=NOW, max_blocks=5, max_total_chars=0)
    assert await store.insert_block(
        new("rules", scope="other"), now=NOW, max_blocks=5, max_total_chars=0
    )


async def test_update_is_refused_at_a_stale_revision(store: Store) -> None:
    await store.insert_block(new("a"), now=NOW, max_blocks=5, max_total_chars=0)
    (block,) = await store.blocks(["s"])
    assert await store.update_block(block, now=NOW, max_total_chars=0, content="first")
    assert not await store.update_block(block, now=NOW, max_total_chars=0, content="stale")
    (after,) = await store.blocks(["s"])
    assert after.content == "first" and after.rev == block.rev + 1


async def test_idle_records_time_and_the_scope_call_count(store: Store) -> None:
    await store.insert_block(new("a"), now=NOW, max_blocks=5, max_total_chars=0)
    blocks, before = await store.start_model_call(["s", "t"])
    assert [b.label for b in blocks] == ["a"] and before == {"s": 0}  # t has no blocks
    assert (await store.start_model_call(["s"]))[1] == {"s": 1}
    assert await store.model_calls("s") == 2 and await store.model_calls("t") == 1
    (block,) = await store.blocks(["s"])
    assert await store.update_block(block, now=NOW, max_total_chars=0, state=State.IDLE)
    (idle,) = await store.blocks(["s"])
    assert idle.idle_since == NOW and idle.idle_calls == 2
    assert await store.update_block(idle, now=NOW, max_total_chars=0, state=State.ACTIVE)
    (active,) = await store.blocks(["s"])
    assert active.idle_since is None and active.idle_calls is None


async def test_history_turn_and_compaction_drop(store: Store) -> None:
    await store.append_turn("k", "one", "r1", now=NOW, drop_ids=[])
    first = await store.history("k")
    await store.append_turn("k", "two", "r2", now=NOW, drop_ids=[e.id for e in first])
    assert [(e.role, e.content) for e in await store.history("k")] == [
        ("user", "two"),
        ("assistant", "r2"),
    ]
    assert await store.history("other") == []
    assert await store.integrity_ok()


async def test_counted_calls_reach_the_disk_with_the_turn_and_on_close(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite3"

    def on_disk() -> dict[str, int]:
        with sqlite3.connect(path) as raw:
            return dict(raw.execute("SELECT scope, calls FROM scope_calls").fetchall())

    store = await Store.open(path)
    await store.start_model_call(["s"])
    assert on_disk() == {}  # not yet written: the hot path makes no write
    await store.append_turn("s", "hi", "hello", now=NOW)
    assert on_disk() == {"s": 1}
    await store.start_model_call(["s", "t"])
    await store.close()
    assert on_disk() == {"s": 2, "t": 1}


async def test_label_keys_migration_keeps_the_older_of_two_look_alikes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "v4.sqlite3"
    async with aiosqlite.connect(path, isolation_level=None) as db:
        await migrate(db, target=4)
        for label, created in (("Ｔｏｎｅ", 1), ("tone", 2), ("Other", 3), ("TONE~2", 4)):
            await db.execute(
                "INSERT INTO blocks (scope, label, label_key, content, level, state, "
                "created_at, updated_at) VALUES ('s', ?, ?, 'c', 'strong', 'active', ?, ?)",
                (label, label.casefold(), created, created),
            )
    with caplog.at_level("WARNING", logger="storage.migrations"):
        async with await Store.open(path) as store:
            labels = [b.label for b in await store.blocks(["s"])]
    # the older keeps its label; a newer look-alike gets ~2, and so does one that then collides
    assert labels == ["Ｔｏｎｅ", "tone~2", "Other", "TONE~2~2"]
    assert len([r for r in caplog.records if "renamed" in r.getMessage()]) == 2

"""The schema on both backends: one list of steps, from any earlier version to the latest, and
databases made by an earlier release upgraded in place with every row kept."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from storage import Store, search
from storage.decisions import PROPOSALS, SUGGESTIONS
from storage.dialect import Database, connect
from storage.errors import SchemaTooNew
from storage.models import (
    BlockChange,
    BlockState,
    Change,
    ChangeKind,
    Channel,
    Level,
    Limits,
    NewSuggestion,
    Seen,
    State,
    UsageTotals,
    Wanted,
    label_key,
)
from storage.schema import LATEST, STEPS, migrate
from tests.pg import PgCluster, fresh_database

NOW = datetime(2026, 1, 1, tzinfo=UTC)
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(params=["sqlite", "postgres"])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    """Where a database of the parametrized backend goes: {"path": …} or {"url": …}."""
    if request.param == "postgres":
        yield {"path": "", "url": await fresh_database(request.getfixturevalue("pg_cluster"))}
    else:
        yield {"path": str(tmp_path / "db.sqlite3")}


async def _database(where: dict[str, str]) -> Database:
    return await connect(path=where["path"], url=where.get("url"))


async def _insert_block(
    db: Database, scope: str, label: str, key: str, content: str, created: int
) -> None:
    """A strong active block written straight into the table, as an earlier release had it."""
    await db.execute(
        "INSERT INTO blocks (scope, label, label_key, content, level, state, created_at, "
        "updated_at) VALUES (?, ?, ?, ?, 'strong', 'active', ?, ?)",
        *(scope, label, key, content, created, created),
    )


def test_steps_are_numbered_consecutively() -> None:
    assert sorted(STEPS) == list(range(1, LATEST + 1))


@pytest.mark.parametrize("start", range(1, LATEST))
async def test_every_earlier_version_upgrades_keeping_blocks(
    target: dict[str, str], start: int
) -> None:
    db = await _database(target)
    try:
        assert await migrate(db, target=start) == start
        await db.execute(
            "INSERT INTO blocks (scope, label, label_key, content, level, state, created_at, "
            "updated_at) VALUES ('s', 'Rules', 'rules', 'Be brief', 'strong', 'pinned', 1, 1)"
        )
    finally:
        await db.close()
    async with await Store.open(target["path"], url=target.get("url")) as store:
        assert await store.schema_version() == LATEST
        blocks = await store.blocks(["s"])
        assert [(b.label, b.content, b.level, b.state) for b in blocks] == [
            ("Rules", "Be brief", Level.STRONG, State.PINNED)
        ]
        await store.append_turn("k", "hi", "hello", now=NOW, drop_ids=[])
        assert [e.content for e in await store.history("k")] == ["hi", "hello"]


async def test_a_database_of_a_newer_pinbot_is_refused(target: dict[str, str]) -> None:
    db = await _database(target)
    try:
        await migrate(db)
        async with db.transaction() as tx:
            await db.set_schema_version(tx, LATEST + 1)
    finally:
        await db.close()
    with pytest.raises(SchemaTooNew, match="newer"):
        await Store.open(target["path"], url=target.get("url"))


async def test_processes_opening_at_once_apply_each_step_once(target: dict[str, str]) -> None:
    stores = await asyncio.gather(
        *(Store.open(target["path"], url=target.get("url")) for _ in range(4))
    )
    try:
        assert {await store.schema_version() for store in stores} == {LATEST}
    finally:
        for store in stores:
            await store.close()


async def test_the_label_keys_step_keeps_the_older_of_two_look_alikes(
    target: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    db = await _database(target)
    try:
        await migrate(db, target=4)
        for label, created in (("Ｔｏｎｅ", 1), ("tone", 2), ("Other", 3), ("TONE~2", 4)):
            await _insert_block(db, "s", label, label.casefold(), "c", created)
    finally:
        await db.close()
    with caplog.at_level("WARNING", logger="storage.schema"):
        async with await Store.open(target["path"], url=target.get("url")) as store:
            labels = [b.label for b in await store.blocks(["s"])]
    # the older keeps its label; a newer look-alike gets ~2, and so does one that then collides
    assert labels == ["Ｔｏｎｅ", "tone~2", "Other", "TONE~2~2"]
    assert len([r for r in caplog.records if "renamed" in r.getMessage()]) == 2


async def test_step_15_indexes_blocks_and_sums_usage_in_place(
    target: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = await _database(target)
    try:
        await migrate(db, target=14)
        for n, content in enumerate(("Answer briefly.", "日本語で答える", "Cite 100%_ sources")):
            await _insert_block(db, f"t:group:{n}", f"l{n}", f"l{n}", content, n)
        for sender, day, group, tokens in (
            ("5", "2026-01-01", "t:group:1", 10),
            ("6", "2026-01-02", "", 30),
            ("5", "2026-01-02", "t:group:1", 20),
        ):
            await db.execute(
                "INSERT INTO usage (platform, sender, day, group_key, model, calls, "
                "prompt_tokens, cached_tokens, completion_tokens, estimated_calls, cost, "
                "priced_calls) VALUES ('t', ?, ?, ?, '', 1, ?, 0, 0, 0, 0, 0)",
                *(sender, day, group, tokens),
            )
    finally:
        await db.close()
    monkeypatch.setattr(search, "HEAD_ROWS", 1)  # so that a search reads the index
    async with await Store.open(target["path"], url=target.get("url")) as store:
        assert await store.catch_up_search() == 0  # every block was indexed by the step
        for term, scope in (("ANSWER", "t:group:0"), ("本語", "t:group:1"), ("0%_", "t:group:2")):
            assert [b.scope for b in await store.search_blocks(term, limit=10)] == [scope]
        per_day = await store.usage_days("2026-01-01")
        assert [(day, t.prompt_tokens) for day, t in per_day] == [
            ("2026-01-01", 10),
            ("2026-01-02", 50),
        ]
        users, groups = await store.usage_report("2026-01-01", 50, window=7)
        assert [(u.key, u.totals.prompt_tokens) for u in users] == [("5", 30), ("6", 30)]
        assert [(g.key, g.totals.prompt_tokens) for g in groups] == [("t:group:1", 30)]


async def _release_store(
    backend: str, tmp_path: Path, cluster: PgCluster | None, release: str = "5d1093f"
) -> Store:
    """A database made by release (5d1093f: its own tables, its own schema numbering; 1c7eede:
    block history and proposals, one of them made on a block that changed since), opened by
    this pinbot."""
    if backend == "sqlite":
        path = tmp_path / "release.sqlite3"
        shutil.copy(FIXTURES / f"release-{release}.sqlite3", path)
        return await Store.open(path)
    assert cluster is not None
    url = await fresh_database(cluster)
    connection = await asyncpg.connect(url)
    try:
        dump = (FIXTURES / f"release-{release}.postgres.sql").read_text()
        # psql's own commands (\\restrict) are not SQL
        sql = "\n".join(line for line in dump.splitlines() if not line.startswith("\\"))
        await connection.execute(sql)
    finally:
        await connection.close()
    return await Store.open(url=url)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_database_of_the_last_release_upgrades_in_place_keeping_everything(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cluster = request.getfixturevalue("pg_cluster") if backend == "postgres" else None
    async with await _release_store(backend, tmp_path, cluster) as store:
        assert await store.schema_version() == LATEST
        dump = await store.dump()
        counts = {table: len(rows) for table, rows in dump.items()}
        assert counts == {
            "blocks": 10,
            "block_versions": 0,
            "scope_notes": 0,
            "proposals": 0,
            "scope_calls": 2,
            "history": 5,
            "inbox": 2,
            "shared_audit": 8,
            "usage": 2,
            "suggestions": 0,
            "usage_compaction": 0,
        }
        (rules,) = [b for b in await store.blocks(["telegram:direct:42"]) if b.label == "Rules"]
        assert (rules.content, rules.level, rules.state, rules.priority) == (
            "Be brief.\nAnswer in English.",
            Level.STRONG,
            State.PINNED,
            5,
        )
        (deadline,) = await store.blocks(["telegram:group:-100123"])
        assert deadline.state is State.IDLE and deadline.idle_since is not None
        log = await store.audit_log("telegram:group:-100123", 20)
        assert [(e.kind, e.detail) for e in reversed(log)] == [
            (ChangeKind.ADD, "context"),
            (ChangeKind.EDIT, "level strong"),
            (ChangeKind.STATE, "idle"),
            (ChangeKind.PRIORITY, "3"),
            (ChangeKind.ADD, "strong pinned"),
            (ChangeKind.REMOVE, ""),
            (ChangeKind.CLEAR, ""),
            (ChangeKind.IMPORT, ""),
        ]
        assert [e.channel for e in reversed(log)][-2:] == [Channel.COMMAND, Channel.IMPORT]
        assert log[-2].old_content == "Friday 5pm" and log[-2].new_content == "Monday 9am"
        history = await store.history("telegram:direct:42")
        assert [e.role for e in history] == ["summary", "user", "assistant"]
        assert (await store.sender_usage("telegram", "42", "2026-11-30", "2026-11-30")).calls == 2
        assert await store.model_calls("telegram:direct:42") == 1
        # What the release left waiting is still there: one update processed, one waiting.
        pending = await store.next_update("telegram:-100123")
        assert pending is not None and pending.payload == '{"update_id": 1002}'
        # And the upgraded database takes new changes and new ids.
        await store.append_turn("telegram:direct:42", "again", "yes", now=NOW)
        # Pin suggestions and the compaction part of usage (the suggestions step) work on it.
        new = NewSuggestion("telegram:direct:42", "tz", "Lives in Lisbon.", "asked twice", "x")
        added = await store.add_decision(SUGGESTIONS, new, now=NOW, expires_at=NOW, max_pending=1)
        assert added is not None and added.number == 1
        assert [
            s.new
            for s in await store.decisions(
                SUGGESTIONS, "telegram:direct:42", ("pending", "dismissed")
            )
        ] == [new]
        used = UsageTotals(1, 10, 0, 5, 0, 0.0, 0)
        await store.add_usage(
            platform="telegram",
            sender="42",
            day="2026-11-30",
            group_key="",
            usage=used,
            compaction=True,
        )
        day = ("telegram", "42", "2026-11-30", "2026-11-30")
        assert await store.sender_usage(*day, compaction=True) == used
        assert (await store.sender_usage(*day)).calls == 3
        assert await store.integrity_ok()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_database_of_1c7eede_upgrades_and_its_pending_proposals_keep_their_block(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Release 1c7eede decided proposals by the block's revision; upgraded, a pending proposal
    whose block is still the one it was made on gets that block's mark (and applies), and one
    whose block changed since gets none (and is refused as made on an older block)."""
    cluster = request.getfixturevalue("pg_cluster") if backend == "postgres" else None
    async with await _release_store(backend, tmp_path, cluster, "1c7eede") as store:
        assert await store.schema_version() == LATEST
        counts = {table: len(rows) for table, rows in (await store.dump()).items()}
        assert {k: counts[k] for k in ("blocks", "block_versions", "proposals")} == {
            "blocks": 3,
            "block_versions": 7,
            "proposals": 2,
        }
        assert [v.kind for v in await store.versions("telegram:direct:42", "notes")] == [
            ChangeKind.REMOVE,
            ChangeKind.ADD,
        ]
        group = "telegram:group:-100123"
        _, marks = await store.scope_now(group)
        fresh, stale = await store.decisions(PROPOSALS, group)
        assert fresh.new.base_version == marks["deadline"] != ""
        assert stale.new.base_version is None
        assert await store.integrity_ok()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_database_of_1c7eede_gets_sensitive_blocks_with_nothing_of_its_own_sensitive(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Step 17: every block and version of the release stays as it was, none sensitive; a
    block then made sensitive records the flag in its version, which brings it back."""
    cluster = request.getfixturevalue("pg_cluster") if backend == "postgres" else None
    async with await _release_store(backend, tmp_path, cluster, "1c7eede") as store:
        blocks, marks = await store.scope_now("telegram:direct:42")
        assert blocks and not any(block.sensitive for block in blocks)
        versions = await store.versions("telegram:direct:42", "notes")
        assert all(v.before is None or not v.before.sensitive for v in versions)
        block = blocks[0]
        state = BlockState.of(block)
        change = BlockChange(
            block.scope,
            (Wanted(block.label, replace(state, sensitive=True)),),
            Change("42", Channel.COMMAND),
            {label_key(block.label): Seen(block, marks[label_key(block.label)])},
        )
        await store.apply_change(change, now=NOW, limits=Limits(20))
        (now,) = [b for b in await store.blocks([block.scope]) if b.label == block.label]
        assert now.sensitive and now.content == block.content
        newest = (await store.versions(block.scope, block.label))[0]
        assert (newest.kind, newest.detail, newest.before) == (ChangeKind.SENSITIVE, "on", state)
        assert await store.integrity_ok()

"""The schema on both backends: one list of steps, from any earlier version to the latest, and
databases made by an earlier release upgraded in place with every row kept."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from storage import Store, search
from storage.decisions import PROPOSALS, SUGGESTIONS
from storage.dialect import Database, connect
from storage.errors import SchemaTooNew
from storage.models import (
    Author,
    BlockChange,
    BlockState,
    ChangeKind,
    Channel,
    Level,
    Limits,
    NewProposal,
    NewSuggestion,
    Origin,
    ProposalStatus,
    Seen,
    State,
    SuggestionStatus,
    UsageTotals,
    Wanted,
    label_key,
)
from storage.schema import LATEST, STEPS, migrate
from storage.settings import SettingChange
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


async def _release_copy(
    backend: str, tmp_path: Path, cluster: PgCluster | None, release: str
) -> dict[str, str]:
    """A copy of the database release made on backend, not opened yet: where it is."""
    if backend == "sqlite":
        path = tmp_path / "release.sqlite3"
        shutil.copy(FIXTURES / f"release-{release}.sqlite3", path)
        return {"path": str(path)}
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
    return {"path": "", "url": url}


async def _release_store(
    backend: str, tmp_path: Path, cluster: PgCluster | None, release: str = "5d1093f"
) -> Store:
    """A database made by release (5d1093f: its own tables, its own schema numbering; 1c7eede:
    block history and proposals, one of them made on a block that changed since; 36c7ab2: rows
    in every table, see fixtures/make_release_36c7ab2.py), opened by this pinbot."""
    where = await _release_copy(backend, tmp_path, cluster, release)
    return await Store.open(where["path"], url=where.get("url"))


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
            "removed_groups": 0,
            "group_settings": 0,  # step 24's: no group set anything yet
            "group_setting_versions": 0,
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
            Author("42", Channel.COMMAND),
            {label_key(block.label): Seen(block, marks[label_key(block.label)])},
        )
        await store.apply_change(change, now=NOW, limits=Limits(20))
        (now,) = [b for b in await store.blocks([block.scope]) if b.label == block.label]
        assert now.sensitive and now.content == block.content
        newest = (await store.versions(block.scope, block.label))[0]
        assert (newest.kind, newest.detail, newest.before) == (ChangeKind.SENSITIVE, "on", state)
        assert await store.integrity_ok()


R36_DM, R36_GROUP = "telegram:direct:42", "telegram:group:-100123"
# What release 36c7ab2's fixture holds, table by table (fixtures/make_release_36c7ab2.py), the
# same on both backends; beside them SQLite's search index, and PostgreSQL's rate buckets (SQLite
# keeps them in memory) and its record of the steps applied.
R36_ROWS = {
    "blocks": 14,
    "block_versions": 32,
    "budget_holds": 1,
    "chat_leases": 1,
    "history": 7,
    "inbox": 3,
    "proposals": 4,
    "scope_calls": 3,
    "scope_notes": 2,
    "shared_audit": 11,
    "suggestions": 4,
    "usage": 4,
    "usage_compaction": 1,
    "usage_day_sums": 2,
    "usage_window_sums": 3,
    "usage_windows": 1,
    "workers": 1,
}
R36_BACKEND_ROWS = {
    "sqlite": {"blocks_search_noted": 1, "rate_buckets": 0},
    "postgres": {"rate_buckets": 1, "pinbot_migrations": 18},
}


async def _row_counts(where: dict[str, str]) -> dict[str, int]:
    """Every table of the database and its number of rows, read on a connection of its own."""
    db = await _database(where)
    try:
        tables = await db.fetch(
            db.pick(
                sqlite="SELECT name FROM sqlite_master WHERE type = 'table'",
                postgres="SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public'",
            )
        )
        return {t[0]: int(await db.fetchval(f'SELECT COUNT(*) FROM "{t[0]}"')) for t in tables}
    finally:
        await db.close()


async def _distinct_scopes(where: dict[str, str]) -> int:
    """How many scopes have blocks, read on a connection of its own."""
    db = await _database(where)
    try:
        return int(await db.fetchval("SELECT COUNT(DISTINCT scope) FROM blocks"))
    finally:
        await db.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_database_of_36c7ab2_opens_keeping_every_row_as_it_was(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = request.getfixturevalue("pg_cluster") if backend == "postgres" else None
    where = await _release_copy(backend, tmp_path, cluster, "36c7ab2")
    held = await _row_counts(where)
    assert {t: held.get(t) for t in R36_ROWS} == R36_ROWS
    assert {t: held.get(t) for t in R36_BACKEND_ROWS[backend]} == R36_BACKEND_ROWS[backend]
    async with await Store.open(where["path"], url=where.get("url")) as store:
        assert await store.schema_version() == LATEST
        if backend == "postgres":  # one bookkeeping row per step applied
            held["pinbot_migrations"] = LATEST
        held["removed_groups"] = 0  # the table step 21 adds: no group was removed yet
        held["group_settings"] = held["group_setting_versions"] = 0  # step 24's
        # step 23: each scope that has blocks starts at version 1 (SQLite's counter: one row)
        held["scope_versions"] = await _distinct_scopes(where)
        if backend == "sqlite":
            held["scope_version_counter"] = 1
        assert await _row_counts(where) == held
        # blocks of every level and state, two of them sensitive: kept whole, flag and all
        found = [
            (b.label, b.content, b.level, b.state, b.priority, b.sensitive, b.idle_calls)
            for b in await store.blocks([R36_DM])
        ]
        strong, context = Level.STRONG, Level.CONTEXT
        assert found == [
            ("Rules", "Be brief.\nAnswer in English.", strong, State.PINNED, 5, False, None),
            ("tone", "Friendly, informal.", strong, State.ACTIVE, 2, False, None),
            ("bank", "IBAN DE89 3704 0044 0532 0130 00", strong, State.ACTIVE, 0, True, None),
            ("city", "Lives in Lisbon.", context, State.ACTIVE, 0, True, None),
            ("pet", "A cat named Miso.", context, State.ACTIVE, 0, False, None),
            ("plan", "Trip in March.", context, State.IDLE, 0, False, 3),
            ("diet", "Vegetarian.", context, State.ACTIVE, 0, False, None),
        ]
        (project,) = [b for b in await store.blocks(["feishu:direct:ou_1"]) if b.idle_since]
        assert (project.label, project.idle_calls, project.created_at.date().isoformat()) == (
            "project",
            4,
            "2026-11-11",
        )
        # versions: the states before each change, an undone edit, a removed label's, a clear
        undo, edit, add = await store.versions(R36_DM, "pet")
        assert [(v.kind, v.channel) for v in (undo, edit, add)] == [
            (ChangeKind.EDIT, Channel.UNDO),
            (ChangeKind.EDIT, Channel.COMMAND),
            (ChangeKind.ADD, Channel.COMMAND),
        ]
        assert undo.before is not None and undo.before.content == "A dog named Miso."
        assert edit.before == BlockState("A cat named Miso.", context, State.ACTIVE)
        assert (edit.undone_by, undo.undone_by, add.before) == (undo.op, None, None)
        turned = (await store.versions(R36_DM, "city"))[0]
        assert (turned.kind, turned.detail, turned.before) == (
            ChangeKind.SENSITIVE,
            "on",
            BlockState("Lives in Lisbon.", context, State.ACTIVE),
        )
        removed = (await store.versions(R36_DM, "notes"))[0]
        assert removed.kind is ChangeKind.REMOVE and removed.before is not None
        assert removed.before.content == "Some notes."
        cleared = await store.versions("telegram:group:-100456", "a")
        assert [v.kind for v in cleared] == [ChangeKind.CLEAR, ChangeKind.ADD]
        assert [v.kind for v in await store.versions("feishu:direct:ou_1", "lang")] == [
            ChangeKind.IMPORT
        ]
        # the group's audit trail, the sensitive label's contents masked, origins kept
        withheld = "[sensitive content withheld]"
        assert [
            (e.kind, e.detail, e.label, e.old_content, e.new_content, e.channel)
            for e in reversed(await store.audit_log(R36_GROUP, 20))
        ] == [
            (ChangeKind.ADD, "context", "deadline", None, "Friday 5pm", Channel.COMMAND),
            (ChangeKind.EDIT, "", "deadline", "Friday 5pm", "Monday 9am", Channel.COMMAND),
            (ChangeKind.ADD, "context", "style", None, "Use British spelling.", Channel.COMMAND),
            (ChangeKind.ADD, "strong", "wifi", None, withheld, Channel.COMMAND),
            (ChangeKind.SENSITIVE, "on", "wifi", withheld, withheld, Channel.COMMAND),
            (
                *(ChangeKind.ADD, "context pinned", "pinned message", None, "Meeting room B."),
                Channel.TELEGRAM_PIN,
            ),
            (ChangeKind.ADD, "context", "lunch", None, "Lunch at noon.", Channel.PROPOSAL),
        ]
        (pinned,) = [e for e in await store.audit_log(R36_GROUP, 20) if e.label == "lunch"]
        assert pinned.origin == Origin(proposal=2)
        # decided proposals and suggestions stay decided
        statuses = [await store.decision(PROPOSALS, R36_GROUP, n) for n in (2, 3, 4)]
        assert [(p.status, p.decided_by) for p in statuses if p is not None] == [
            (ProposalStatus.APPLIED, "7"),
            (ProposalStatus.REJECTED, "7"),
            (ProposalStatus.EXPIRED, ""),
        ]
        assert [
            (s.number, s.status)
            for s in await store.decisions(SUGGESTIONS, R36_DM, ("pending", "dismissed"))
        ] == [
            (1, SuggestionStatus.PENDING),
            (2, SuggestionStatus.DISMISSED),
        ]
        assert await store.shown_at(SUGGESTIONS, R36_DM, "42", "77")
        # history (the summary first), counts, notes, usage and its kept sums
        assert [(e.role, e.content) for e in await store.history(R36_DM)] == [
            ("summary", "The user asked question 1."),
            ("user", "question 2"),
            ("assistant", "answer 2"),
            ("user", "question 3"),
            ("assistant", "answer 3"),
        ]
        assert [await store.model_calls(s) for s in (R36_DM, "feishu:direct:ou_1")] == [3, 9]
        assert await store.notes(R36_GROUP) == {"chatpin": "The pinned message is too long."}
        day = "2026-12-01"
        used = await store.sender_usage("telegram", "42", day, day)
        assert replace(used, cost=0.0) == UsageTotals(3, 500, 20, 110, 1, 0.0, 2)
        assert used.cost == pytest.approx(0.002)
        compaction = await store.sender_usage("telegram", "42", day, day, compaction=True)
        assert compaction == UsageTotals(1, 300, 0, 60, 0, 0.0, 0)
        assert await store.group_usage(R36_GROUP, "2026-11-30", day) == UsageTotals(
            3, 450, 100, 100, 0, 0.0, 0
        )
        users, groups = await store.usage_report("2026-11-25", 10, window=7)
        assert [(u.key, u.totals.billed_tokens) for u in users] == [("42", 610), ("7", 550)]
        assert [(g.key, g.totals.billed_tokens) for g in groups] == [(R36_GROUP, 550)]
        per_day = await store.usage_days("2026-11-30")
        assert [(d, t.billed_tokens) for d, t in per_day] == [("2026-11-30", 60), (day, 1100)]
        # the search index: the block changed after it was last caught up is indexed now
        monkeypatch.setattr(search, "HEAD_ROWS", 1)  # so that a search reads the index
        assert await store.catch_up_search() == (1 if backend == "sqlite" else 0)
        for term, label in (("MISO", "pet"), ("noon", "lunch"), ("Atlas", "project")):
            assert [b.label for b in await store.search_blocks(term, limit=10)] == [label]
        assert await store.integrity_ok()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_what_36c7ab2_left_pending_goes_on_and_its_database_takes_new_writes(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cluster = request.getfixturevalue("pg_cluster") if backend == "postgres" else None
    where = await _release_copy(backend, tmp_path, cluster, "36c7ab2")
    async with await Store.open(where["path"], url=where.get("url")) as store:
        # the pending proposal was made on the block as it still is: approving it applies
        (pending,) = await store.decisions(PROPOSALS, R36_GROUP)
        blocks, marks = await store.scope_now(R36_GROUP)
        (style,) = [b for b in blocks if b.label == "style"]
        assert (pending.number, pending.new.label, pending.new.content) == (
            1,
            "style",
            "Use Oxford spelling.",
        )
        assert pending.new.base_version == marks["style"] != ""
        assert (pending.chat, pending.message_id) == ("-100123", "901")
        wanted = BlockState("Use Oxford spelling.", Level.CONTEXT, State.ACTIVE)
        approve = BlockChange(
            R36_GROUP,
            (Wanted("style", wanted),),
            Author("7", Channel.PROPOSAL, Origin(proposal=1)),
            {"style": Seen(style, marks["style"])},
            audited=True,
        )
        await store.apply_change(approve, now=NOW, limits=Limits(20))
        decided = await store.decision(PROPOSALS, R36_GROUP, 1)
        assert decided is not None and decided.status is ProposalStatus.APPLIED
        assert [b.content for b in await store.blocks([R36_GROUP]) if b.label == "style"] == [
            "Use Oxford spelling."
        ]
        # the pending suggestion is still there to decide
        (suggested,) = [
            s
            for s in await store.decisions(SUGGESTIONS, R36_DM, ("pending", "dismissed"))
            if s.number == 1
        ]
        assert (suggested.new.label, suggested.new.content) == (
            "tz",
            "Lives in the Lisbon time zone.",
        )
        assert await store.decide_once(SUGGESTIONS, R36_DM, 1, SuggestionStatus.PINNED, now=NOW)
        # the waiting update is the chat's next; the processed one is not
        chat = "telegram:-100123"
        waiting = await store.next_update(chat)
        assert waiting is not None and waiting.payload == '{"update_id": 1002}'
        assert await store.next_update("telegram:42") is None
        assert await store.finish_update(waiting.seq, now=NOW) is None
        # new rows in every kind of table, their ids after the release's
        await store.register_worker(now=NOW)
        arrival = await store.record_update(
            "telegram", "1003", chat=chat, position=1003, payload="{}", now=NOW
        )
        assert arrival.recorded and arrival.first is not None and arrival.first.seq == 4
        assert not (
            await store.record_update(
                "telegram", "1002", chat=chat, position=1002, payload="{}", now=NOW
            )
        ).recorded
        release_ids = {b.id for b in await store.blocks([R36_DM, R36_GROUP])}
        added = BlockChange(
            R36_DM,
            (Wanted("pets", BlockState("Two cats.", Level.CONTEXT, State.ACTIVE)),),
            Author("42", Channel.COMMAND),
            {label_key("pets"): None},
        )
        await store.apply_change(added, now=NOW, limits=Limits(20))
        (pets,) = [b for b in await store.blocks([R36_DM]) if b.label == "pets"]
        assert pets.id > max(release_ids)
        await store.append_turn(R36_DM, "again", "yes", now=NOW)
        assert [e.content for e in await store.history(R36_DM)][-2:] == ["again", "yes"]
        proposed = NewProposal(R36_GROUP, "menu", "Pizza.", None, None, "asked", "model")
        made = await store.add_decision(PROPOSALS, proposed, now=NOW, expires_at=NOW, max_pending=5)
        assert made is not None and made.number == 5
        new = NewSuggestion(R36_DM, "lang", "Speaks Portuguese.", "asked", "speaksportuguese")
        suggestion = await store.add_decision(
            SUGGESTIONS, new, now=NOW, expires_at=NOW, max_pending=5
        )
        assert suggestion is not None and suggestion.number == 5
        used = UsageTotals(1, 10, 0, 5, 0, 0.0, 0)
        day = "2026-12-01"
        await store.add_usage(
            platform="telegram", sender="42", day=day, group_key="", usage=used, compaction=True
        )
        assert (await store.sender_usage("telegram", "42", day, day)).calls == 4
        assert (await store.sender_usage("telegram", "42", day, day, compaction=True)).calls == 2
        assert await store.integrity_ok()
    counts = await _row_counts(where)
    grown = {"blocks": 15, "inbox": 4, "workers": 2, "proposals": 5, "suggestions": 5}
    assert {t: counts[t] for t in grown} == grown


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_group_of_36c7ab2_the_bot_leaves_goes_after_its_grace_keeping_the_rest(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Upgraded, the release's database notes a removal (step 21), sees the bot back from its
    inbox, and forgets a removed group's rows but its blocks (which go as block changes) in
    one transaction, everyone else's as they were."""
    cluster = request.getfixturevalue("pg_cluster") if backend == "postgres" else None
    async with await _release_store(backend, tmp_path, cluster, "36c7ab2") as store:
        chat = "telegram:-100123"
        removed = datetime(2027, 1, 1, tzinfo=UTC)  # after every update the release recorded
        await store.group_removed(R36_GROUP, chat=chat, now=removed)
        assert await store.removed_groups(removed) == []
        assert await store.removed_groups(removed + timedelta(1)) == [(R36_GROUP, removed)]
        await store.record_update(
            "telegram", "1004", chat=chat, position=1004, payload="{}", now=removed + timedelta(1)
        )
        assert await store.groups_back() == [R36_GROUP]
        assert await store.removed_groups(removed + timedelta(1)) == []
        await store.group_removed(R36_GROUP, chat=chat, now=removed + timedelta(2))
        before = {table: len(rows) for table, rows in (await store.dump()).items()}
        other = "telegram:group:-100456"
        others_audit = await store.audit_log(other, 20)
        audited = len(await store.audit_log(R36_GROUP, 20))
        members, sessions = f"{R36_GROUP}::u:", f"{R36_GROUP}:"
        gone = await store.forget_group(
            R36_GROUP,
            members_prefix=members,
            sessions_prefix=sessions,
            chat=chat,
            removed_before=removed + timedelta(3),
        )
        assert gone is not None and (gone["audit"], gone["proposals"]) == (audited, 4)
        after = {table: len(rows) for table, rows in (await store.dump()).items()}
        assert after["blocks"] == before["blocks"]  # blocks go as block changes, not here
        assert after["shared_audit"] == before["shared_audit"] - audited
        assert await store.audit_log(R36_GROUP, 20) == []
        assert await store.audit_log(other, 20) == others_audit
        assert await store.decisions(PROPOSALS, R36_GROUP, ("pending", "applied")) == []
        assert [b.label for b in await store.blocks([R36_DM])][:2] == ["Rules", "tone"]
        # the group's usage is its members' and the day's still, under no group
        day = "2026-12-01"
        assert await store.group_usage(R36_GROUP, "2026-11-30", day) == UsageTotals(
            0, 0, 0, 0, 0, 0.0, 0
        )
        assert (await store.sender_usage("telegram", "7", "2026-11-30", day)).billed_tokens == 550
        assert [(d, t.billed_tokens) for d, t in await store.usage_days("2026-11-30")] == [
            ("2026-11-30", 60),
            (day, 1100),
        ]
        assert await store.integrity_ok()


async def test_a_database_at_step_21_opens_at_22_its_blocks_sent_always_and_never_ending(
    target: dict[str, str],
) -> None:
    """The last release's schema (step 21) gains keywords and ends: every block and kept
    version it holds is sent always and never ends, and the blocks take both from then on."""
    db = await _database(target)
    try:
        assert await migrate(db, target=21) == 21
        await db.execute(
            "INSERT INTO blocks (scope, label, label_key, content, level, state, priority, "
            "created_at, updated_at, idle_since, idle_calls, sensitive) "
            "VALUES ('t:direct:1', 'Trip', 'trip', 'Flight LH123.', 'context', 'idle', 3, "
            "1, 2, 2, 5, 1)"
        )
        await db.execute(
            "INSERT INTO block_versions (op, scope, label_key, label, kind, detail, actor, "
            "channel, origin, at, existed, content, level, state, priority, created_at, "
            "undone_by, sensitive) VALUES ('op1', 't:direct:1', 'trip', 'Trip', 'state', "
            "'idle', '1', 'command', NULL, 2, 1, 'Flight LH123.', 'context', 'active', 3, 1, "
            "NULL, 1)"
        )
        await db.execute(
            "INSERT INTO history (session, role, content, created_at, sender) "
            "VALUES ('t:direct:1', 'user', 'hi', 1, '1')"
        )
    finally:
        await db.close()
    async with await Store.open(target["path"], url=target.get("url")) as store:
        assert await store.schema_version() == LATEST >= 22
        (block,) = await store.blocks(["t:direct:1"])
        assert (block.label, block.state, block.priority, block.sensitive) == (
            "Trip",
            State.IDLE,
            3,
            True,
        )
        assert (block.triggers, block.ends_at) == ((), None)
        (version,) = await store.versions("t:direct:1", "trip")
        assert version.before == BlockState(
            "Flight LH123.", Level.CONTEXT, State.ACTIVE, 3, True, (), None
        )
        assert [e.content for e in await store.history("t:direct:1")] == ["hi"]
        _, marks = await store.scope_now("t:direct:1")
        later = replace(BlockState.of(block), triggers=("flight",), ends_at=NOW)
        change = BlockChange(
            "t:direct:1",
            (Wanted("Trip", later),),
            Author("1", Channel.COMMAND),
            {label_key("Trip"): Seen(block, marks["trip"])},
        )
        await store.apply_change(change, now=NOW, limits=Limits(20))
        (block,) = await store.blocks(["t:direct:1"])
        assert (block.triggers, block.ends_at) == (("flight",), NOW)


async def test_a_database_at_step_23_opens_at_24_with_no_settings_keeping_everything(
    target: dict[str, str],
) -> None:
    """The schema before groups ran themselves (step 23) gains their settings (step 24): no
    group or topic sets anything, so the config applies as before; every block, turn and
    audit entry stays, and the settings take changes from then on."""
    db = await _database(target)
    try:
        assert await migrate(db, target=23) == 23
        await _insert_block(db, "t:group:-5", "Rules", "rules", "Be kind.", 1)
        await db.execute(
            "INSERT INTO shared_audit (group_scope, actor, channel, kind, detail, label, "
            "old_content, new_content, at) VALUES ('t:group:-5', '7', 'command', 'add', "
            "'strong', 'Rules', NULL, 'Be kind.', 1)"
        )
        await db.execute(
            "INSERT INTO history (session, role, content, created_at, sender) "
            "VALUES ('t:group:-5:topic:3', 'user', 'hi', 1, '7')"
        )
    finally:
        await db.close()
    before = await _row_counts(target)
    async with await Store.open(target["path"], url=target.get("url")) as store:
        assert await store.schema_version() == LATEST >= 24
        after = await _row_counts(target)
        assert after.pop("group_settings") == after.pop("group_setting_versions") == 0
        if "pinbot_migrations" in before:  # PostgreSQL notes the step applied
            before["pinbot_migrations"] += LATEST - 23
        assert after == before
        places = ["t:group:-5", "t:group:-5:topic:3"]
        assert await store.settings_of(places) == {}
        (rules,) = await store.blocks(["t:group:-5"])
        assert (rules.label, rules.content) == ("Rules", "Be kind.")
        (entry,) = await store.audit_log("t:group:-5", 5)
        assert (entry.action, entry.new_content) == ("add strong", "Be kind.")
        assert [e.content for e in await store.history(places[1])] == ["hi"]
        change = SettingChange(
            places[1], places[0], {"pins": "true"}, Author("7", Channel.COMMAND), {}, "op"
        )
        assert await store.apply_settings(change, now=NOW) == ["pins"]
        assert await store.settings_of(places) == {places[1]: {"pins": "true"}}

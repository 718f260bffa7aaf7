"""A person's data is theirs: `/export me` hands them everything held about them, `/forget me`
removes it from every table and from the disk, and everyone else's data stays as it was. One
person with blocks in a direct chat and two groups (a shared block changed, a personal block in
each), conversation in each, usage, a proposal made and one decided, and a pin suggestion; driven
through the core's one entry with the real openai client against the fake model server, on
SQLite and PostgreSQL; the scan reads every column of every table, and the SQLite file and WAL."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.core.entry import Pinbot
from bot.core.replies import Reply
from bot.llm.openai_backend import OpenAIChatModel
from storage import Store
from tests.conftest import TEST_KEY_ENV, agent_llm, ask, make_config, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.process import run_pinbot_here
from tests.templates import migrated_database, migrated_sqlite

ME = "987654321"  # the person who asks to be forgotten
ADMIN, MEMBER = "555000111", "444000222"
G1, G2 = "-1009990001", "-1009990002"
MARK = "zebra"  # every text the person writes holds it; nobody else's does
GROUP_ONE = f"telegram:group:{G1}"


def dm(user: str) -> Any:
    from tests.conftest import dm as direct

    return direct(user, platform="telegram")


def in_group(user: str, chat: str) -> Any:
    from tests.conftest import group

    return group(user, chat, platform="telegram")


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Store, Path | None]]:
    if request.param == "postgres":
        url = await migrated_database(request.getfixturevalue("pg_cluster"))
        async with await Store.open(url=url) as opened:
            yield opened, None
    else:
        path = tmp_path / "pins.sqlite3"
        async with await Store.open(await migrated_sqlite(path)) as opened:
            yield opened, path


@pytest.fixture
async def bot(
    backend: tuple[Store, Path | None],
    fake_openai: FakeOpenAI,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Pinbot]:
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test")
    llm = agent_llm(fake_openai.base_url)
    config = make_config(
        llm=llm,
        chat={"history_max_turns": 2, "compaction_keep_turns": 1, "history_max_chars": 100000},
        pins={
            "enable_in_group": True,
            "group_shared_admin_ids": [f"{GROUP_ONE}::u:{ME}", int(ADMIN)],
        },
        limits={"pin_commands_per_minute": 0, "model_turns_per_minute": 0},
    )
    model = OpenAIChatModel.from_config(config.llm)
    yield Pinbot(config, backend[0], model, clock=clock)
    await model.close()


async def say(bot: Pinbot, conversation: Any, text: str) -> str:
    return text_of(await ask(bot, conversation, text, mentioned=True))


async def live_a_little(bot: Pinbot, fake_openai: FakeOpenAI) -> None:
    """The person and two others use the bot: blocks, turns, proposals, a suggestion."""
    me = dm(ME)
    assert (await say(bot, me, f"/pin add diet Vegan, {MARK} no nuts")).startswith("Saved")
    for n in (1, 2, 3):
        await say(bot, me, f"{MARK} question {n}")
    tea = {"label": "tea", "content": f"{MARK} green tea", "reason": f"{MARK} said so"}
    fake_openai.script = [
        tool_calls(("compact_history", {"summary": f"{MARK} talked", "suggestions": [tea]})),
        completion("answer 4"),
    ]
    await say(bot, me, f"{MARK} question 4")
    assert "tea" in await say(bot, me, "/pin suggestions")
    # Group one: they are a shared admin there.
    mine_g1 = in_group(ME, G1)
    assert (await say(bot, mine_g1, "/pin shared add rules Be kind.")).startswith("Saved")
    assert (await say(bot, mine_g1, f"/pin add mine {MARK} in g1")).startswith("Saved")
    await say(bot, mine_g1, f"{MARK} hello group one")
    admin_g1 = in_group(ADMIN, G1)
    assert (await say(bot, admin_g1, "/pin shared edit rules Be kind, always.")).startswith("Saved")
    await say(bot, in_group(MEMBER, G1), "member keeps talking in g1")
    # The member proposes in group one, and the person decides it.
    fake_openai.script = [
        tool_calls(("pin_propose", {"label": "snacks", "content": "Fruit", "reason": "member"})),
        completion("proposed"),
    ]
    await say(bot, in_group(MEMBER, G1), "propose snacks please")
    assert (await say(bot, mine_g1, "/pin shared approve 1")).startswith("Approved")
    # Group two: a member there, they propose; and a personal block.
    mine_g2 = in_group(ME, G2)
    fake_openai.script = [
        tool_calls(("pin_propose", {"label": "music", "content": f"{MARK} jazz", "reason": MARK})),
        completion("proposed"),
    ]
    await say(bot, mine_g2, f"{MARK} propose music")
    assert (await say(bot, mine_g2, f"/pin add g2note {MARK} two")).startswith("Saved")
    # Someone else's own data.
    assert (await say(bot, dm(MEMBER), "/pin add cnote member note")).startswith("Saved")
    await say(bot, dm(MEMBER), "member private talk")


async def every_row(store: Store) -> dict[str, set[tuple[Any, ...]]]:
    """Every row of every table (SQLite's search index and its shadow tables included)."""
    db = store._db  # the test reads the database whole, as no part of pinbot needs to
    tables = await db.fetch(
        db.pick(
            sqlite="SELECT name FROM sqlite_master WHERE type = 'table'",
            postgres="SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public'",
        )
    )
    return {
        name: {tuple(row) for row in await db.fetch(f'SELECT * FROM "{name}"')}
        for (name,) in tables
    }


def mentions_me(row: tuple[Any, ...]) -> bool:
    text = " ".join(
        value.decode("latin-1") if isinstance(value, bytes) else str(value) for value in row
    )
    return ME in text or MARK in text


# Rows that change for everyone when one person goes: sums made again from the usage rows (the
# same totals), and the summaries of the conversations in their groups (they may hold what they
# said); the search index's own bookkeeping, and SQLite's counters of rows added.
# The counts and versions that change for everyone when any row of theirs does.
CHANGED_FOR_ALL = {
    "usage_day_sums",
    "usage_window_sums",
    "usage_windows",
    "sqlite_sequence",
    "scope_version_counter",
    "scope_versions",
}


async def test_forget_me_leaves_nothing_of_them_and_everyone_else_as_they_were(
    bot: Pinbot, backend: tuple[Store, Path | None], fake_openai: FakeOpenAI
) -> None:
    store, path = backend
    await live_a_little(bot, fake_openai)
    before = await every_row(store)
    budgets = await store._db.fetch(
        "SELECT group_key, SUM(calls), SUM(prompt_tokens) FROM usage GROUP BY group_key "
        "ORDER BY group_key"
    )
    asked = await say(bot, dm(ME), "/forget me")
    assert "3 pinned blocks" in asked and "/forget me confirm" in asked
    in_group_reply = await say(bot, in_group(ME, G1), "/forget me confirm")
    assert "direct chat" in in_group_reply  # nothing happens in a group
    done = await say(bot, dm(ME), "/forget me confirm")
    assert done.startswith("Done: I removed everything") and "3 pinned blocks" in done
    after = await every_row(store)
    found = {t: [r for r in rows if mentions_me(r)] for t, rows in after.items()}
    assert {t: rows for t, rows in found.items() if rows} == {}
    for table, rows in before.items():
        if table in CHANGED_FOR_ALL or table.startswith("blocks_search"):
            continue
        kept = {row for row in rows if not mentions_me(row)}
        if table == "history":  # the group conversations' summaries went with them
            kept = {row for row in kept if row[2] != "summary"}
        assert kept <= after[table], table
    # The shared block keeps its content; its history and the audit name a former member.
    shared = {b.label: b.content for b in await store.blocks([GROUP_ONE])}
    assert shared == {"rules": "Be kind, always.", "snacks": "Fruit"}
    actors = {row[3] for row in after["shared_audit"]}
    assert "a former member" in actors and ADMIN in actors
    assert (
        await store._db.fetch(
            "SELECT group_key, SUM(calls), SUM(prompt_tokens) FROM usage GROUP BY group_key "
            "ORDER BY group_key"
        )
        == budgets
    )  # every group's budget adds up as before
    assert [b.label for b in await store.blocks(["telegram:direct:" + MEMBER])] == ["cnote"]
    if path is not None:  # not in the file nor in its WAL, as bytes
        for file in (path, path.with_name(path.name + "-wal")):
            if file.exists():
                data = file.read_bytes()
                assert MARK.encode() not in data and ME.encode() not in data, file


async def test_export_me_holds_every_kind_and_only_for_them_in_a_direct_chat(
    bot: Pinbot, backend: tuple[Store, Path | None], fake_openai: FakeOpenAI
) -> None:
    store, _ = backend
    await live_a_little(bot, fake_openai)
    in_group_reply = await ask(bot, in_group(ME, G1), "/export me", mentioned=True)
    assert isinstance(in_group_reply, Reply) and in_group_reply.document is None
    assert "direct chat" in in_group_reply.text
    reply = await ask(bot, dm(ME), "/export me")
    assert isinstance(reply, Reply) and reply.document is not None
    document = json.loads(reply.document.data)
    assert (document["format"], document["version"], document["user"]) == (
        "pinbot-person-export",
        1,
        ME,
    )
    assert {(b["scope"], b["label"]) for b in document["blocks"]} == {
        (f"telegram:direct:{ME}", "diet"),
        (f"{GROUP_ONE}::u:{ME}", "mine"),
        (f"telegram:group:{G2}::u:{ME}", "g2note"),
    }
    assert set(document["versions"]) == {b["scope"] for b in document["blocks"]}
    said = await store._db.fetch(
        "SELECT content FROM history WHERE sender = ? OR session = ?", ME, f"telegram:direct:{ME}"
    )
    assert sorted(t["content"] for t in document["turns"]) == sorted(row[0] for row in said)
    assert any(MARK in t["content"] for t in document["turns"] if t["role"] == "user")
    used = await store._db.fetch("SELECT COUNT(*) FROM usage WHERE sender = ?", ME)
    assert len(document["usage"]) == used[0][0] > 0
    assert {(p["label"], p["proposer"] == ME) for p in document["proposals"]} == {
        ("music", True),  # made
        ("snacks", False),  # decided
    }
    assert [s["label"] for s in document["suggestions"]] == ["tea"]
    assert {(a["label"], a["kind"]) for a in document["audit"]} >= {("rules", "add")}
    assert not any(MEMBER in json.dumps(b) for b in document["blocks"])  # nobody else's


async def test_the_operator_commands_run_the_same_code(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"storage:\n  path: {tmp_path / 'pins.sqlite3'}\n", encoding="utf-8")
    code, _, err = await run_pinbot_here(
        "console", "--config", str(config), "--user", "77", stdin=b"/pin add tone zebra\nhi\n"
    )
    assert code == 0, err
    code, out, _ = await run_pinbot_here("export", "--config", str(config), "--user", "console:77")
    exported = json.loads(out)
    assert code == 0 and [b["label"] for b in exported["blocks"]] == ["tone"]
    assert len(exported["turns"]) == 2
    code, out, _ = await run_pinbot_here("forget", "--config", str(config), "--user", "console:77")
    assert code == 0 and "Run again with --yes" in out
    code, out, _ = await run_pinbot_here(
        "forget", "--config", str(config), "--user", "console:77", "--yes"
    )
    assert code == 0 and out.startswith("Done: I removed everything") and "1 pinned block" in out
    code, out, _ = await run_pinbot_here("export", "--config", str(config), "--user", "console:77")
    assert json.loads(out)["blocks"] == [] and json.loads(out)["turns"] == []
    code, _, err = await run_pinbot_here("forget", "--config", str(config), "--user", "nobody")
    assert code == 2 and "telegram:<user id>" in err


async def test_the_console_writes_the_export_into_the_current_folder(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"storage:\n  path: {tmp_path / 'pins.sqlite3'}\n", encoding="utf-8")
    folder = tmp_path / "here"
    folder.mkdir()
    code, out, err = await run_pinbot_here(
        "console",
        "--config",
        str(config),
        "--user",
        "77",
        stdin=b"/pin add tone Be brief.\n/export me\n",
        cwd=folder,
    )
    assert code == 0, err
    (written,) = folder.iterdir()
    assert f"wrote {written.name}" in out and written.name.startswith("pinbot-console-77-")
    assert [b["label"] for b in json.loads(written.read_text())["blocks"]] == ["tone"]
    assert written.stat().st_mode & 0o077 == 0  # theirs alone

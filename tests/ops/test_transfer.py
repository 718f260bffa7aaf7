"""Export and import: an exact round trip, every problem of a bad file reported with nothing
written, dry runs, and the CLI commands that expose them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.core.blocks.ops import BlockOps
from bot.core.blocks.review import BlockPolicy
from bot.core.blocks.transfer import apply_import, describe_changes, export_document, plan_import
from storage import Store
from tests.conftest import BotFactory, ask, dm, group, make_config
from tests.fakes.clock import FakeClock
from tests.process import run_pinbot_here

NOW = FakeClock()()


async def populate(make_bot: BotFactory, clock: FakeClock) -> None:
    bot = make_bot(pins={"enable_in_group": True, "group_shared_admin_ids": ["7"]})
    await ask(bot, dm(), "/pin add 规则 请用中文回答。\n第二行 — ünïcödé ✓ --pinned")
    await ask(bot, dm(), "/pin add-context notes line one\n\tindented line two")
    await ask(bot, dm(), "/pin add old stale")
    await ask(bot, dm(), "/pin idle old")
    await ask(bot, dm(), "hello")
    await ask(bot, group("7"), "/pin shared add-strong house Be kind")
    await ask(bot, group("42", topic="3"), "/pin add mine Ma note")
    clock.advance(days=1)
    await ask(bot, dm(), "/pin edit notes line one, edited\n\tindented line two")


async def test_round_trip_is_exact(
    make_bot: BotFactory, store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    await populate(make_bot, clock)
    first = await export_document(store, clock())
    assert first["scopes"]["console:direct:42"]["model_calls"] == 1
    async with await Store.open(tmp_path / "copy.sqlite3") as copy:
        plan = plan_import(json.loads(json.dumps(first)), BlockPolicy(make_config().pins), clock())
        assert plan.problems == []
        assert await apply_import(BlockOps(copy, BlockPolicy(make_config().pins)), plan) == 5
        second = await export_document(copy, clock())
    assert {k: v for k, v in second.items() if k != "exported_at"} == {
        k: v for k, v in first.items() if k != "exported_at"
    }
    notes = next(b for b in first["scopes"]["console:direct:42"]["blocks"] if b["label"] == "notes")
    assert notes["content"] == "line one, edited\n\tindented line two"
    assert notes["updated_at"] != notes["created_at"]


def bad_document() -> dict[str, Any]:
    good = {
        "label": "ok",
        "content": "fine",
        "level": "strong",
        "state": "active",
        "priority": 0,
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    return {
        "format": "pinbot-blocks",
        "version": 1,
        "scopes": {
            "console:direct:1": {
                "blocks": [
                    good,
                    {**good, "label": "OK"},
                    {**good, "label": "has space"},
                    {**good, "label": "long", "content": "x" * 501},
                    {**good, "label": "lvl", "level": "loud"},
                    {**good, "label": "when", "created_at": "yesterday"},
                    {**good, "label": "idle", "state": "idle"},
                    {**good, "label": "extra", "colour": "red"},
                ]
            },
            "console:group:-5": {
                "blocks": [
                    {**good, "label": "key", "content": "token sk-abcdefghijklmnopqrstuvwxyz123456"}
                ]
            },
            "nonsense": {"blocks": []},
        },
    }


async def test_import_reports_every_problem_and_writes_nothing(store: Store) -> None:
    plan = plan_import(bad_document(), BlockPolicy(make_config().pins), NOW)
    text = "\n".join(plan.problems)
    for fragment in (
        "label 'OK' appears twice",
        "block 'has space'",
        "limit is 500",
        "block 'lvl': level must be",
        "block 'when': created_at 'yesterday'",
        "block 'idle': an idle block needs idle_since",
        "block 'extra': unknown key 'colour'",
        "looks like an OpenAI API key",
        "scope 'nonsense': not a scope key",
    ):
        assert fragment in text, fragment
    assert len(plan.problems) == 9
    assert await store.export_scopes() == {}


async def test_dry_run_describes_changes(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    await populate(make_bot, clock)
    document = await export_document(store, clock())
    blocks = document["scopes"]["console:direct:42"]["blocks"]
    blocks[0]["content"] = "changed"
    del blocks[1]
    blocks.append({**blocks[0], "label": "brand-new"})
    plan = plan_import(document, BlockPolicy(make_config().pins), NOW)
    changes = await describe_changes(store, plan)
    assert len(changes) == 1 and changes[0].startswith("console:direct:42: add brand-new; change")
    assert "remove" in changes[0]


async def run_cli(*args: str, db: Path) -> tuple[int, str, str]:
    """`pinbot ARGS` (its main, in this process) on the SQLite database db."""
    config = db.parent / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"storage: {{path: '{db}'}}\n", encoding="utf-8")
    return await run_pinbot_here(*args, "--config", str(config))


async def test_cli_export_and_import(
    make_bot: BotFactory, store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    await populate(make_bot, clock)
    source = tmp_path / "pins.sqlite3"  # the store fixture's file
    assert source.exists()
    exported = tmp_path / "export.json"
    code, _, err = await run_cli("export", "-o", str(exported), db=source)
    assert code == 0, err
    code, stdout_export, _ = await run_cli("export", db=source)
    assert json.loads(stdout_export)["scopes"] == json.loads(exported.read_text())["scopes"]
    target = tmp_path / "other" / "target.sqlite3"
    code, out, _ = await run_cli("import", str(exported), "--dry-run", db=target)
    assert code == 0 and "console:direct:42: add notes, old, 规则" in out and "dry run" in out
    assert not target.exists()  # a dry run writes nothing, not even an empty database
    code, out, _ = await run_cli("import", str(exported), db=target)
    assert code == 0 and "imported 5 block(s) in 3 scope(s)" in out
    # The same file again: the store holds it already, which is said once.
    code, out, _ = await run_cli("import", str(exported), db=target)
    assert (code, out.strip()) == (0, "no changes")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(bad_document()), encoding="utf-8")
    code, out, _ = await run_cli("import", str(bad), db=target)
    assert code == 1 and "9 problem(s); nothing was imported" in out


@pytest.mark.parametrize("text", ["not json", "[]", '{"format": "other"}'])
async def test_import_of_a_wrong_file(tmp_path: Path, text: str) -> None:
    file = tmp_path / "wrong.json"
    file.write_text(text, encoding="utf-8")
    code, out, err = await run_cli("import", str(file), db=tmp_path / "db.sqlite3")
    assert code == 1 and ("cannot read" in err or "not a pinbot export" in out)


def test_import_accepts_an_agent_prefix_on_scope_keys() -> None:
    document = {
        "format": "pinbot-blocks",
        "version": 1,
        "scopes": {
            "agent:main:telegram:direct:5": {
                "blocks": [
                    {
                        "label": "a",
                        "content": "b",
                        "level": "strong",
                        "state": "active",
                        "created_at": "2026-01-01T00:00:00+00:00",
                    }
                ]
            }
        },
    }
    plan = plan_import(document, BlockPolicy(make_config().pins), NOW)
    assert plan.problems == [] and list(plan.scopes) == ["telegram:direct:5"]


async def test_cli_import_refuses_scope_keys_the_bot_never_reads(tmp_path: Path) -> None:
    """Issue 36, finding 3: each of these was imported; blocks under them are in no request."""
    block = {"label": "a", "content": "b"}
    never_read = [
        "TELEGRAM:direct:42",
        "telegram:direct:042",
        "foo:direct:1",
        "telegram:group:-100123x",
        "telegram:group:42",
        f"telegram:group:-{'1' * 40}",
        "feishu:group:..",
    ]
    good = {"telegram:direct:42": {"blocks": [block]}}  # with them, and nothing written either
    db = tmp_path / "db.sqlite3"
    for key in never_read:
        file = tmp_path / "import.json"
        document = {"scopes": {**good, key: {"blocks": [block]}}}
        file.write_text(json.dumps(document), encoding="utf-8")
        code, out, _ = await run_cli("import", str(file), db=db)
        assert code == 1, (key, out)
        assert f"scope {key!r}: not a scope key the bot reads" in out
        assert "1 problem(s); nothing was imported" in out
    async with await Store.open(db) as store:
        assert await store.export_scopes() == {}


async def test_an_export_masks_sensitive_blocks_unless_raw(
    make_bot: BotFactory, store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    bot = make_bot()
    await ask(bot, dm(), "/pin add creds API_KEY=abc123 ssh root@10.0.0.1 --sensitive")
    await ask(bot, dm(), "/pin edit creds API_KEY=def456 ssh root@10.0.0.2")
    source = tmp_path / "pins.sqlite3"
    code, out, err = await run_cli("export", "--with-history", db=source)
    assert code == 0, err
    masked = json.loads(out)
    assert masked["redacted"] is True
    (block,) = masked["scopes"]["console:direct:42"]["blocks"]
    assert (block["content"], block["sensitive"]) == ("API_KEY=[secret] ssh [ssh-target]", True)
    assert "abc123" not in out and "def456" not in out and "10.0.0" not in out
    # An import of it would store the placeholders: refused, nothing written.
    target = tmp_path / "other" / "target.sqlite3"
    file = tmp_path / "masked.json"
    file.write_text(out, encoding="utf-8")
    code, out, _ = await run_cli("import", str(file), db=target)
    assert code == 1 and "this export was made without --raw" in out
    code, out, err = await run_cli("export", "--with-history", "--raw", "-o", str(file), db=source)
    assert code == 0, err
    raw = json.loads(file.read_text(encoding="utf-8"))
    assert "redacted" not in raw
    (block,) = raw["scopes"]["console:direct:42"]["blocks"]
    assert (block["content"], block["sensitive"]) == ("API_KEY=def456 ssh root@10.0.0.2", True)
    code, out, _ = await run_cli("import", str(file), db=target)
    assert code == 0 and "imported 1 block(s)" in out
    async with await Store.open(target) as copy:
        (copied,) = await copy.blocks(["console:direct:42"])
        assert copied.sensitive and copied.content == "API_KEY=def456 ssh root@10.0.0.2"
        edit, _ = await copy.versions("console:direct:42", "creds")
        assert edit.before is not None and edit.before.sensitive
        assert edit.before.content == "API_KEY=abc123 ssh root@10.0.0.1"

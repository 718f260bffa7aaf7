"""A Sticky Context user starts where they expect: `pinbot init --preset sticky` writes the
plugin's defaults, which `pinbot check-config` passes and `pinbot console` runs (the fake model
keeping a slot with `sticky_set`); a Sticky file imported again after an edit updates the slots
it changes, a version each, and one `/pin undo` takes the import back; `pinbot import --help`
shows the Sticky form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage import open_store
from storage.models import State
from tests.conftest import OpenAIBots, ask, dm, text_of
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls
from tests.integration.test_sticky import pinbot_import, slot, sticky_preset
from tests.process import run_pinbot_here

SCOPE = "console:direct:42"


async def test_init_sticky_then_the_console_keeps_a_slot_the_model_sets(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    config = tmp_path / "config.yaml"
    code, out, err = await run_pinbot_here("init", "--preset", "sticky", "--config", str(config))
    assert code == 0, err
    assert f"Wrote {config}. Next:" in out
    assert f"pinbot import sticky-context.json --config {config} --scope {SCOPE}" in out
    # The file holds the preset docs/designs.md documents, every key of it as documented.
    written = yaml.safe_load(config.read_text(encoding="utf-8"))
    for section, keys in sticky_preset().items():
        assert {key: written[section][key] for key in keys} == keys, section
    assert written["llm"]["backend"] == "offline"  # runs as written; the comment says how not to
    code, out, err = await run_pinbot_here("check-config", "--config", str(config), cwd=tmp_path)
    assert code == 0, out + err
    assert f"configuration ok ({config})" in out
    # As the comment in llm says: backend openai, and the server's address and key uncommented.
    text = config.read_text(encoding="utf-8")
    edits = {
        "  backend: offline\n": "  backend: openai\n",
        "  # base_url: http://127.0.0.1:8080/v1\n": f"  base_url: {fake_openai.base_url}\n",
        "  # api_key_env: OPENAI_API_KEY\n": "  api_key_env: OPENAI_API_KEY\n",
    }
    for old, new in edits.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    config.write_text(text, encoding="utf-8")
    key = "active-task-of-the-migration-to-v2"  # longer than pinbot's default 20
    task = "Migrating the API to v2; the users table is done."
    fake_openai.script = [
        tool_calls(("sticky_set", {"key": key, "content": task, "priority": 50})),
        completion("Noted."),
        completion("The users table is done."),
    ]
    code, out, err = await run_pinbot_here(
        "console",
        "--config",
        str(config),
        "--user",
        "42",
        stdin=b"Keep the task in mind\nWhere are we?\n",
        env={"OPENAI_API_KEY": "sk-local"},
        cwd=tmp_path,
    )
    assert code == 0, err
    assert out.splitlines() == ["Noted.", "The users table is done."]
    first, result, second = fake_openai.requests
    offered = [tool["function"]["name"] for tool in first["tools"]]
    assert offered == ["sticky_set", "sticky_get", "sticky_delete"]
    (saved,) = [m["content"] for m in result["messages"] if m["role"] == "tool"]
    assert saved.startswith(f"Saved strong block '{key}'")
    system = second["messages"][0]["content"]
    assert "STICKY CONTEXT (survives compaction)" in system
    assert f"label={key}]\n{task}\n" in system
    async with await open_store(path=str(tmp_path / "pinbot.sqlite3")) as store:
        (block,) = await store.blocks([SCOPE])
    assert (block.label, block.content, block.priority) == (key, task, 50)


def test_the_default_init_is_not_the_preset() -> None:
    from bot.cli.init import PRESETS, STARTER_CONFIG

    starter = yaml.safe_load(STARTER_CONFIG)
    assert "agent_tools" not in starter["llm"] and "header_label" not in starter["pins"]
    assert yaml.safe_load(PRESETS["sticky"])["pins"]["max_blocks_per_session"] == 10


async def blocks_of(bot: Any) -> dict[str, tuple[str, int, State, bool]]:
    return {
        b.label: (b.content, b.priority, b.state, b.sensitive)
        for b in await bot.store.blocks([SCOPE])
    }


async def versions_of(bot: Any, *labels: str) -> dict[str, int]:
    return {label: len(await bot.store.versions(SCOPE, label)) for label in labels}


async def test_an_edited_sticky_file_imported_again_updates_what_it_changes(
    openai_bots: OpenAIBots, tmp_path: Path
) -> None:
    first = {
        "version": 2,
        "slots": {
            "safety-rules": slot("Never run rm -rf.", 100, pinned=True),
            "active-task": slot("Migrating the API to v2.", 50),
            "notes": slot("Prefers short answers.", sensitive=False),
        },
    }
    out = await pinbot_import(tmp_path, first, "--scope", SCOPE)
    assert out.splitlines()[-1] == f"imported 3 slot(s) into {SCOPE}"
    bot = await openai_bots()
    before = await blocks_of(bot)
    labels = ("safety-rules", "active-task", "notes", "style")
    assert await versions_of(bot, *labels) == {
        "safety-rules": 1,
        "active-task": 1,
        "notes": 1,
        "style": 0,
    }
    # Edited by hand: one content, one priority, one new slot; the safety rules as they were.
    edited: dict[str, Any] = json.loads(json.dumps(first))
    edited["slots"]["active-task"]["content"] = "Migrating the API to v2: users done."
    edited["slots"]["notes"]["priority"] = 5
    edited["slots"]["style"] = slot("Answer in English.")
    out = await pinbot_import(tmp_path, edited, "--scope", SCOPE, "--dry-run")
    assert out.splitlines() == [
        f"{SCOPE}: add style; change active-task, notes",
        "dry run: nothing was written",
    ]
    assert await blocks_of(bot) == before
    out = await pinbot_import(tmp_path, edited, "--scope", SCOPE)
    assert out.splitlines() == [
        f"{SCOPE}: add style; change active-task, notes",
        f"imported 3 slot(s) into {SCOPE}",
    ]
    after = await blocks_of(bot)
    assert after["active-task"] == ("Migrating the API to v2: users done.", 50, State.ACTIVE, False)
    assert after["notes"] == ("Prefers short answers.", 5, State.ACTIVE, False)
    assert after["safety-rules"] == before["safety-rules"]
    # One new version per changed slot; none for the slot the edit left alone.
    assert await versions_of(bot, *labels) == {
        "safety-rules": 1,
        "active-task": 2,
        "notes": 2,
        "style": 1,
    }
    # The same file again: nothing differs, said once, nothing written.
    for extra in ((), ("--dry-run",)):
        out = await pinbot_import(tmp_path, edited, "--scope", SCOPE, *extra)
        assert out.splitlines() == ["no changes"]
    assert await versions_of(bot, *labels) == {
        "safety-rules": 1,
        "active-task": 2,
        "notes": 2,
        "style": 1,
    }
    # One undo takes the whole import back.
    undone = text_of(await ask(bot, dm(), "/pin undo"))
    assert undone.startswith("Undid import (import) of 'active-task', 'notes', 'style' by import")
    assert "Removed again: 'style'. 2 block(s) as they were before." in undone
    assert await blocks_of(bot) == before


async def test_a_slot_left_out_keeps_the_blocks_fields_and_unpinning_is_the_files(
    openai_bots: OpenAIBots, tmp_path: Path
) -> None:
    """A field a slot leaves out (priority, pinned, sensitive; the level without --level) stays
    as the block has it; `"pinned": false` unpins; a block changed by hand since is updated
    from the file only where the file differs from it."""
    out = await pinbot_import(
        tmp_path,
        {"version": 2, "slots": {"ops": slot("db at 10.0.0.5", 10, pinned=True, sensitive=True)}},
        "--scope",
        SCOPE,
        "--level",
        "context",
    )
    assert out.splitlines()[-1] == f"imported 1 slot(s) into {SCOPE}"
    out = await pinbot_import(
        tmp_path, {"version": 1, "slots": {"ops": {"content": "db at 10.0.0.6"}}}, "--scope", SCOPE
    )
    assert out.splitlines() == [f"{SCOPE}: change ops", f"imported 1 slot(s) into {SCOPE}"]
    bot = await openai_bots()
    (block,) = await bot.store.blocks([SCOPE])
    assert (block.content, block.level.value, block.state, block.priority, block.sensitive) == (
        "db at 10.0.0.6",
        "context",
        State.PINNED,
        10,
        True,
    )
    out = await pinbot_import(
        tmp_path,
        {"version": 1, "slots": {"ops": {"content": "db at 10.0.0.6", "pinned": False}}},
        "--scope",
        SCOPE,
    )
    assert out.splitlines()[-1] == f"imported 1 slot(s) into {SCOPE}"
    (block,) = await bot.store.blocks([SCOPE])
    assert block.state is State.ACTIVE and block.sensitive


async def test_a_changed_slot_over_the_budget_is_refused_and_nothing_is_written(
    openai_bots: OpenAIBots, tmp_path: Path
) -> None:
    preset = "{max_label_length: 64, max_content_length: 2000, max_total_chars: 2000}"
    document: dict[str, Any] = {"version": 2, "slots": {"a": slot("x" * 900), "b": slot("y" * 900)}}
    out = await pinbot_import(tmp_path, document, "--scope", SCOPE, pins=preset)
    assert out.splitlines()[-1] == f"imported 2 slot(s) into {SCOPE}"
    document["slots"]["a"]["content"] = "short"
    document["slots"]["b"]["content"] = "y" * 1999
    out = await pinbot_import(tmp_path, document, "--scope", SCOPE, pins=preset)
    assert out.splitlines() == [
        "problem: slot 'b' refused (over-budget): That would bring your blocks to 2004 "
        "characters, over the budget of 2000 (pins.max_total_chars). Shorten or remove a "
        "block first.",
        "1 problem(s); nothing was imported",
    ]
    bot = await openai_bots()
    assert {b.label: len(b.content) for b in await bot.store.blocks([SCOPE])} == {
        "a": 900,
        "b": 900,
    }


@pytest.mark.parametrize("asked", [("import", "--help"), ("import", "-h")])
async def test_import_help_shows_the_sticky_form(asked: tuple[str, ...]) -> None:
    code, out, _ = await run_pinbot_here(*asked)
    assert code == 0
    assert '{"version": 2, "slots": {"<key>": {"content": "...", "priority": 0' in out
    assert (
        "pinbot import sticky-context.json --scope telegram:direct:42 "
        "[--level strong|context] [--dry-run]"
    ) in out
    assert "--scope SCOPE" in out and "--level {strong,context}" in out
    assert "a key the scope holds updates its block where the file differs" in out

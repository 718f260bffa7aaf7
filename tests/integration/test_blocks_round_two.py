"""Blocks, round two, as users meet them through `pinbot console` (and `pinbot import`): the
budget never locks a scope, the status view, priorities, look-alike labels, minimal imports."""

from __future__ import annotations

import json
from pathlib import Path

from storage import Store
from tests.integration.test_console import console, stored, write_config
from tests.process import run_pinbot_here


async def test_a_budget_never_locks_a_scope(tmp_path: Path) -> None:
    roomy = write_config(tmp_path)
    await console(roomy, ["/pin add a " + "x" * 100, "/pin add b " + "y" * 100], "--user", "1")
    tight = write_config(tmp_path, pins={"max_total_chars": 150})  # the scope holds 200
    code, out, err = await console(
        tight,
        [
            "/pin idle a",
            "/pin level b context",
            "/pin pin b",
            "/pin activate a",
            "/pin edit a " + "x" * 40,  # shrinks the scope: allowed although still over
            "/pin edit b " + "y" * 120,  # grows it past the budget: refused
            "/pin add c " + "z" * 20,  # so does an add
            "/pin remove b",
        ],
        "--user",
        "1",
    )
    assert code == 0, err
    assert "changed while saving" not in out
    for reply in ("is now idle", "is now context", "is now pinned", "is now active"):
        assert reply in out
    assert "Saved the new content of 'a'." in out
    assert out.count("over the budget of 150 (pins.max_total_chars)") == 2
    assert "Removed block 'b'." in out
    assert await stored(tmp_path, "console:direct:1") == [("a", "x" * 40, "strong", "active")]


async def test_status_view_and_sticky_alias(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        pins={"enable_in_group": True, "group_shared_admin_ids": ["7"], "max_total_chars": 2000},
    )
    code, out, err = await console(
        config,
        [
            "/pin shared add rule Keep answers short.",
            "/pin add-strong mine Answer formally.",
            "/pin add note Background for me --priority 3",
            "/pin idle note",
            "/sticky",
            "/pin shared status",
            "/sticky shared",
        ],
        "--user",
        "7",
        "--group",
        "-100",
    )
    assert code == 0, err
    sticky, shared_status, sticky_shared = out.split("Sent with every request here")[1:]
    assert "1. mine (personal, strong, active, priority 0): 16 characters" in sticky
    assert "2. rule (shared, context, active, priority 0): 19 characters" in sticky
    assert (
        "Idle, not sent:\n- note (personal, context, idle, priority 3): deleted once 7 more days "
        "and 10 more model calls have passed, or in 30 days at the latest"
    ) in sticky
    assert (
        f"2 of 20 blocks, {len('Answer formally.') + len('Background for me')} of 2,000" in sticky
    )
    assert "This group's shared blocks: 1 of 20 blocks, 19 of 2,000 characters" in sticky
    assert "Every request here carries about " in sticky
    # /pin shared status and /sticky shared show the shared scope alone, /sticky shared with
    # each block's first characters under it
    assert "1. rule (shared" in shared_status and "   Keep answers short." in sticky_shared
    without_previews = sticky_shared.replace("; under each, its first 120 characters", "").replace(
        "\n   Keep answers short.", ""
    )
    assert shared_status == without_previews
    assert "Your personal blocks" not in shared_status and "mine" not in shared_status


async def test_priorities_by_command_and_flag(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    code, out, err = await console(
        config,
        [
            "/pin add low Low one",
            "/pin add high High one --priority 50 --pinned",
            "/pin add mid Middle one --pinned --priority 7",
            "/pin add lit -- literal --priority 9",
            "/pin priority low -5",
            "/pin priority low 1001",
            "/pin priority low high",
            "/pin add big x --priority 2000",
            "hello",
        ],
        "--user",
        "1",
    )
    assert code == 0, err
    assert "Block 'low' now has priority -5." in out
    assert out.count("Priority must be a whole number from -1000 to 1000.") == 3
    assert "[offline model] pinned blocks: high (strong, personal); mid (strong, personal); " in out
    assert "lit (strong, personal); low (strong, personal)." in out
    async with await Store.open(tmp_path / "pins.sqlite3") as store:
        blocks = {b.label: b for b in await store.blocks(["console:direct:1"])}
    assert {label: b.priority for label, b in blocks.items()} == {
        "low": -5,
        "high": 50,
        "mid": 7,
        "lit": 0,
    }
    assert blocks["lit"].content == "literal --priority 9"
    assert blocks["mid"].state.value == "pinned" and blocks["high"].state.value == "pinned"


async def test_labels_that_cannot_deceive(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    code, out, err = await console(
        config,
        [
            "/pin add tone Be brief.",
            "/pin add ｔｏｎｅ Full-width look-alike.",
            "/pin add TONE Upper case.",
            "/pin add to\u200bne Zero-width space.",
            "/pin add \u202eenot Right-to-left override.",
            '/pin add "tone" Quoted.',
        ],
        "--user",
        "1",
    )
    assert code == 0, err
    assert out.count("already exists") == 2
    assert "U+200B" in out and "U+202E" in out
    assert "need no quotes" in out
    assert await stored(tmp_path, "console:direct:1") == [("tone", "Be brief.", "strong", "active")]


async def test_the_smallest_import_file(tmp_path: Path) -> None:
    db = tmp_path / "pins.sqlite3"
    config = write_config(tmp_path)
    document = {
        "scopes": {
            "console:direct:42": {"blocks": [{"label": "tone", "content": "Be brief."}]},
            "console:group:-1": {"blocks": [{"label": "rule", "content": "Be kind."}]},
        }
    }
    file = tmp_path / "mine.json"
    file.write_text(json.dumps(document), encoding="utf-8")
    code, out, err = await run_pinbot_here("import", str(file), "--config", str(config))
    assert code == 0, err
    assert "imported 2 block(s) in 2 scope(s)" in out
    assert db.exists()
    assert await stored(tmp_path, "console:direct:42") == [
        ("tone", "Be brief.", "strong", "active")
    ]
    assert await stored(tmp_path, "console:group:-1") == [("rule", "Be kind.", "context", "active")]
    for bad in ({"format": "other", "scopes": {}}, {"version": 2, "scopes": {}}):
        file.write_text(json.dumps(bad), encoding="utf-8")
        code, out, _ = await run_pinbot_here("import", str(file), "--config", str(config))
        assert code == 1 and "nothing was imported" in out

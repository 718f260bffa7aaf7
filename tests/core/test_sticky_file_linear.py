"""Sticky Context import answers large files: too many slots are refused before any slot is
read, duplicates are found by key (no slot compared with every other), and a document's
repeated keys are named without walking a document that has none."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.cli import importing
from bot.config import PinsConfig, parse_config
from bot.core.blocks.review import BlockPolicy
from bot.core.blocks.sticky_file import plan_sticky
from bot.core.blocks.transfer import read_document

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def policy(**pins: object) -> BlockPolicy:
    return BlockPolicy(PinsConfig(**pins))  # type: ignore[arg-type]


def sticky(count: int, content: str = "note") -> str:
    slots = {f"slot{i}": {"content": f"{content} {i}", "priority": 1} for i in range(count)}
    return json.dumps({"version": 2, "slots": slots})


def test_an_8000_slot_file_is_refused_as_one_problem_before_its_slots_are_read() -> None:
    document, repeated = read_document(sticky(8000))
    assert repeated == []
    plan = plan_sticky(document, "console:direct:42", None, policy(), NOW)
    assert plan.wanted == []
    (problem,) = plan.problems
    assert problem.startswith("the file has 8,000 slots: ")
    assert "the limit is 20 (pins.max_blocks_per_session)" in problem


async def test_a_100_mb_file_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pinbot import FILE --scope …` of a Sticky file larger than any that fits the scope's
    limits answers at once, saying why, without reading it."""
    file = tmp_path / "sticky-context.json"
    text = sticky(560_000, "x" * 150)
    assert len(text) > 100_000_000
    file.write_text(text, encoding="utf-8")
    config = parse_config({}, "<test>")
    code = await importing._import(config, str(file), True, "console:direct:42")
    assert code == 1
    out = capsys.readouterr().out
    assert f"the file is {file.stat().st_size:,} bytes" in out
    assert f"is at most {importing.sticky_file_bytes(config):,} bytes" in out


def test_a_full_scope_of_slots_is_checked_and_duplicates_found_by_key() -> None:
    slots = {f"slot{i}": {"content": f"note {i}"} for i in range(1000)}
    slots["SLOT7"] = {"content": "again"}
    del slots["slot999"]
    plan = plan_sticky(
        {"version": 2, "slots": slots},
        "console:direct:42",
        None,
        policy(max_blocks_per_session=1000),
        NOW,
    )
    assert plan.problems == ["slot 'SLOT7': another slot has the same key ignoring case"]
    assert len(plan.wanted) == 999


def test_repeated_keys_are_still_named() -> None:
    text = '{"version": 2, "slots": {"a": {"content": "x", "content": "y"}, "b": {}, "b": {}}}'
    _, repeated = read_document(text)
    assert repeated == [
        "the document → 'slots' → 'a': the key 'content' appears more than once; keep one of them",
        "the document → 'slots': the key 'b' appears more than once; keep one of them",
    ]

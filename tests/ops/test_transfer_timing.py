"""Keywords and ends in export and import: `pinbot export` carries each block's and each kept
version's `triggers` and `ends_at`, `pinbot import` brings them back exactly and checks them
(the keyword rules of the review; an end that has passed is kept, the block has ended), files of
earlier releases without them still import, and `/export me` carries them too."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.core.blocks.ops import BlockOps
from bot.core.blocks.review import BlockPolicy
from bot.core.blocks.transfer import apply_import, export_document, plan_import
from bot.core.replies import Reply, Result
from storage import Store
from tests.conftest import BotFactory, ask, dm, make_config, outcome_of, text_of
from tests.fakes.clock import FakeClock
from tests.ops.test_transfer import run_cli

SCOPE = "console:direct:42"
POLICY = BlockPolicy(make_config().pins)


async def timed(make_bot: BotFactory) -> None:
    """A DM's blocks: one waiting for keywords and ending, one whose keywords were taken away
    (a version keeps them), one sent always."""
    bot = make_bot()
    for command in (
        '/pin add trip --when flight,"hotel, booking" --until 2026-12-24 Flight LH123.',
        "/pin add runbook --when deploy --for 3d Run the checks first.",
        "/pin edit runbook --when -",
        "/pin add tone Be brief.",
    ):
        reply = await ask(bot, dm(), command)
        assert outcome_of(reply) is Result.DONE, text_of(reply)


def block_of(document: dict[str, Any], label: str) -> dict[str, Any]:
    blocks = document["scopes"][SCOPE]["blocks"]
    return next(b for b in blocks if b["label"] == label)


async def test_an_export_with_history_carries_keywords_and_ends_and_imports_exactly(
    make_bot: BotFactory, store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    await timed(make_bot)
    source = tmp_path / "pins.sqlite3"  # the store fixture's file
    file = tmp_path / "export.json"
    code, _, err = await run_cli("export", "--with-history", "-o", str(file), db=source)
    assert code == 0, err
    first = json.loads(file.read_text(encoding="utf-8"))
    trip = block_of(first, "trip")
    assert trip["triggers"] == ["flight", "hotel, booking"]
    assert trip["ends_at"] == "2026-12-25T00:00:00+00:00"  # the end of that UTC day
    runbook = block_of(first, "runbook")
    assert runbook["triggers"] == [] and runbook["ends_at"] is not None
    assert (block_of(first, "tone")["triggers"], block_of(first, "tone")["ends_at"]) == ([], None)
    kept = [v for v in first["scopes"][SCOPE]["history"] if v["label"] == "runbook"]
    assert [v["kind"] for v in kept] == ["add", "triggers"]
    assert kept[1]["before"]["triggers"] == ["deploy"]
    assert kept[1]["before"]["ends_at"] == runbook["ends_at"]

    target = tmp_path / "other" / "target.sqlite3"
    code, out, _ = await run_cli("import", str(file), db=target)
    assert code == 0 and "imported 3 block(s)" in out, out
    async with await Store.open(target) as copy:
        blocks = {b.label: b for b in await copy.blocks([SCOPE])}
        assert blocks["trip"].triggers == ("flight", "hotel, booking")
        assert blocks["trip"].ends_at == datetime(2026, 12, 25, tzinfo=UTC)
        edit, _ = await copy.versions(SCOPE, "runbook")
        assert edit.before is not None and edit.before.triggers == ("deploy",)
        second = await export_document(copy, clock(), with_history=True)
    assert second["scopes"] == first["scopes"]


async def test_an_export_of_the_release_before_keywords_still_imports(
    make_bot: BotFactory, store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    """A file without triggers and ends_at (on blocks and on the states of versions) imports,
    every block sent always and never ending."""
    await timed(make_bot)
    document = await export_document(store, clock(), with_history=True)
    for body in document["scopes"].values():
        for block in body["blocks"]:
            del block["triggers"], block["ends_at"]
        for version in body["history"]:
            if version["before"] is not None:
                del version["before"]["triggers"], version["before"]["ends_at"]
    async with await Store.open(tmp_path / "copy.sqlite3") as copy:
        plan = plan_import(document, POLICY, clock())
        assert plan.problems == []
        assert await apply_import(BlockOps(copy, POLICY), plan) == 3
        blocks = await copy.blocks([SCOPE])
        assert {(b.triggers, b.ends_at) for b in blocks} == {((), None)}
        versions = await copy.versions(SCOPE, "runbook")
        assert all(v.before is None or v.before.triggers == () for v in versions)


def one_block(**fields: Any) -> dict[str, Any]:
    block = {"label": "trip", "content": "Flight LH123.", **fields}
    return {"scopes": {SCOPE: {"blocks": [block]}}}


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"triggers": "flight"}, "triggers must be a list of keywords"),
        ({"triggers": ["flight", 3]}, "triggers must be a list of keywords"),
        ({"triggers": [""]}, "The keywords cannot be used: a keyword is empty"),
        ({"triggers": ["k" * 41]}, "longer than 40 characters"),
        ({"triggers": [f"k{n}" for n in range(21)]}, "a block takes at most 20"),
        ({"ends_at": "tomorrow"}, "ends_at 'tomorrow' is not an ISO 8601 time"),
        ({"ends_at": "2026-12-24T18:00:00"}, "needs a time zone"),
        ({"ends_at": 1798156800}, "ends_at must be an ISO 8601 time"),
    ],
)
async def test_keywords_and_ends_an_import_cannot_take_are_named_and_nothing_is_written(
    store: Store, clock: FakeClock, fields: dict[str, Any], problem: str
) -> None:
    plan = plan_import(one_block(**fields), POLICY, clock())
    assert len(plan.problems) == 1 and problem in plan.problems[0], plan.problems
    assert "block 'trip'" in plan.problems[0]
    assert await apply_import(BlockOps(store, POLICY), plan) == 0
    assert await store.export_scopes() == {}


async def test_a_version_whose_keywords_break_the_rules_is_named(clock: FakeClock) -> None:
    document = one_block()
    document["scopes"][SCOPE]["history"] = [
        {
            **{"op": "1", "label": "trip", "kind": "edit", "detail": "", "actor": "42"},
            **{"channel": "command", "origin": None, "at": "2026-01-01T00:00:00+00:00"},
            "before": {
                **{"content": "Flight.", "level": "strong", "state": "active"},
                "triggers": ["k" * 41],
            },
        }
    ]
    plan = plan_import(document, POLICY, clock())
    assert len(plan.problems) == 1 and "history #1" in plan.problems[0]
    assert "longer than 40 characters" in plan.problems[0]


async def test_an_end_that_has_passed_imports_and_the_block_has_ended(
    store: Store, clock: FakeClock
) -> None:
    passed = "2020-01-01T00:00:00+00:00"
    plan = plan_import(one_block(triggers=["flight"], ends_at=passed), POLICY, clock())
    assert plan.problems == []
    assert await apply_import(BlockOps(store, POLICY), plan) == 1
    (block,) = await store.blocks([SCOPE])
    assert block.ends_at == datetime(2020, 1, 1, tzinfo=UTC) and block.triggers == ("flight",)


async def test_export_me_carries_keywords_and_ends(make_bot: BotFactory) -> None:
    bot = make_bot()
    await ask(bot, dm(), '/pin add trip --when flight,"hotel, booking" --until 2026-12-24 LH123')
    reply = await ask(bot, dm(), "/export me")
    assert isinstance(reply, Reply) and reply.document is not None
    (block,) = json.loads(reply.document.data)["blocks"]
    assert block["triggers"] == ["flight", "hotel, booking"]
    assert block["ends_at"] == "2026-12-25T00:00:00+00:00"

"""The agent tools as data: two sets of names over one implementation, with the same refusals."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from bot.config import PinsConfig
from bot.core.blocks.ops import Done, Refused
from bot.core.blocks.review import Rule
from bot.core.conversation.tools import (
    NEXT_TURN,
    PIN_TOOLS,
    STICKY_TOOLS,
    TOOL_SETS,
    Op,
    PinTools,
    ToolSet,
)
from bot.core.people.context import MessageContext
from storage.models import State
from tests.conftest import BotFactory, ask, dm
from tests.fakes.clock import FakeClock


def test_every_set_offers_every_operation_once() -> None:
    assert set(TOOL_SETS) == {"pin", "sticky"}
    for tools in TOOL_SETS.values():
        assert [tool.op for tool in (*tools.tools, tools.propose)] == list(Op)
        # In a private chat the model is offered no proposals; in a group every operation.
        assert [spec["function"]["name"] for spec in tools.group_specs] == [
            f"{tools.name}_{op}" for op in Op
        ]
        assert tools.specs == tools.group_specs[:-1]


def test_the_sticky_set_takes_exactly_the_documented_parameters() -> None:
    schemas = {s["function"]["name"]: s["function"]["parameters"] for s in STICKY_TOOLS.specs}
    assert {name: list(schema["properties"]) for name, schema in schemas.items()} == {
        "sticky_set": ["key", "content", "priority", "pinned", "sensitive"],
        "sticky_get": ["key"],
        "sticky_delete": ["key"],
    }
    assert all(schema["additionalProperties"] is False for schema in schemas.values())


def test_the_definitions_are_built_once() -> None:
    assert PIN_TOOLS.specs is PIN_TOOLS.specs  # the same list in every request of every turn


@pytest.mark.parametrize("tools", [PIN_TOOLS, STICKY_TOOLS], ids=lambda t: t.name)
async def test_both_sets_run_the_same_operations_with_the_same_refusals(
    make_bot: BotFactory, tools: ToolSet
) -> None:
    bot = make_bot()
    await ask(bot, dm(), "/pin add safety Never run rm -rf --pinned")
    context = MessageContext.resolve(dm(), PinsConfig(), None)
    run = PinTools(bot.pins.ops, tools)
    label = tools.label

    async def call(op: Op, **arguments: object) -> Done | Refused:
        return await run.call(context, f"{tools.name}_{op}", json.dumps(arguments))

    assert await call(Op.SET, **{label: "task", "content": " Step 2 ", "priority": 5}) == Done(
        "Saved strong block 'task'. It applies from the next turn."
    )
    assert await call(Op.DELETE, **{label: "safety"}) == Refused(
        "Block 'safety' is pinned; only the user can change or remove it, with /pin.", Rule.PINNED
    )
    assert await call(Op.SET, **{label: "safety", "content": "anything"}) == Refused(
        "Block 'safety' is pinned; only the user can change or remove it, with /pin.", Rule.PINNED
    )
    got = await call(Op.GET, **{label: "TASK"})
    assert isinstance(got, Done)
    (record,) = json.loads(got.message)
    assert (record[label], record["content"], record["priority"]) == ("task", "Step 2", 5)
    assert await call(Op.DELETE, **{label: "task"}) == Done("Removed block 'task'.")
    other = "label" if label == "key" else "key"
    refused = await call(Op.DELETE, **{other: "x"})
    assert isinstance(refused, Refused) and f"{other}: unknown parameter" in refused.reason
    assert refused.code is Rule.TOOL_ARGUMENTS
    wrong_type = await call(Op.GET, **{label: 5})
    assert isinstance(wrong_type, Refused) and f"{label}: Input should be a valid string" in (
        wrong_type.reason
    )
    foreign = "pin_set" if tools is STICKY_TOOLS else "sticky_set"
    assert await run.call(context, foreign, "{}") == Refused(
        f"there is no tool named '{foreign}'.", Rule.TOOL_UNKNOWN
    )
    # Reading a block that is not there is the missing-block rule, as removing one is.
    assert await call(Op.GET, **{label: "nothing"}) == await call(Op.DELETE, **{label: "nothing"})
    assert await call(Op.GET, **{label: "nothing"}) == Refused(
        "There is no block labelled 'nothing' in your blocks. Send /pin list to see them.",
        Rule.MISSING,
    )
    assert [b.label for b in await bot.store.blocks(["console:direct:42"])] == ["safety"]


async def test_a_call_the_tools_cannot_run_is_refused_with_its_code(make_bot: BotFactory) -> None:
    bot = make_bot()
    context = MessageContext.resolve(dm(), PinsConfig(), None)
    run = PinTools(bot.pins.ops)
    calls = {
        ("pin_get", "{"): Rule.TOOL_NOT_JSON,
        ("pin_get", "[]"): Rule.TOOL_NOT_OBJECT,
        ("pin_get", '{"scope": "shared"}'): Rule.TOOLS_PERSONAL,
        ("pin_launch", "{}"): Rule.TOOL_UNKNOWN,
        ("pin_get", '{"label": 5}'): Rule.TOOL_ARGUMENTS,
        ("pin_propose", '{"label": "a", "content": "b"}'): Rule.PROPOSALS_SHARED_ONLY,
    }
    for (name, arguments), rule in calls.items():
        outcome = await run.call(context, name, arguments)
        assert isinstance(outcome, Refused) and outcome.code is rule, (name, arguments, outcome)
        assert not rule.block_rule  # the metrics count none of these as block rules


async def test_pin_set_takes_keywords_and_an_end_and_pin_get_shows_them(
    make_bot: BotFactory, clock: FakeClock
) -> None:
    bot = make_bot()
    context = MessageContext.resolve(dm(), PinsConfig(), None)
    run = PinTools(bot.pins.ops)
    clock.now = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)

    async def call(name: str, **arguments: object) -> Done | Refused:
        return await run.call(context, name, json.dumps(arguments))

    saved = await call(
        "pin_set",
        label="runbook",
        content="Run the checks first.",
        when=["deploy", " release notes ", "DEPLOY"],
        until="2026-12-24",
    )
    assert saved == Done(
        "Saved strong block 'runbook', sent when a message mentions deploy, release notes, "
        "until 2026-12-25 00:00 UTC. It applies from the next turn."
    )
    (block,) = await bot.store.blocks(["console:direct:42"])
    assert block.triggers == ("deploy", "release notes")
    assert block.ends_at == datetime(2026, 12, 25, tzinfo=UTC)
    got = await call("pin_get", label="runbook")
    assert isinstance(got, Done)
    (record,) = json.loads(got.message)
    assert (record["when"], record["until"]) == (
        ["deploy", "release notes"],
        "2026-12-25T00:00:00+00:00",
    )

    # Left out, both stay; a duration counts from now; [] and "-" take them away.
    assert await call("pin_set", label="runbook", content="Run all checks first.") == Done(
        "Saved the new content of 'runbook'. It applies from the next turn."
    )
    await call("pin_set", label="runbook", content="Run all checks first.", until="12h")
    (block,) = await bot.store.blocks(["console:direct:42"])
    assert block.triggers == ("deploy", "release notes")
    assert block.ends_at is not None and block.ends_at - clock.now < timedelta(hours=12)
    assert block.ends_at - clock.now > timedelta(hours=11, minutes=59)
    await call("pin_set", label="runbook", content="Run all checks first.", when=[], until="-")
    (block,) = await bot.store.blocks(["console:direct:42"])
    assert (block.triggers, block.ends_at) == ((), None)
    got = await call("pin_get")
    assert isinstance(got, Done)
    assert [(r["when"], r["until"]) for r in json.loads(got.message)] == [([], None)]


@pytest.mark.parametrize(
    ("arguments", "rule", "problem"),
    [
        ({"when": [""]}, Rule.TOOL_ARGUMENTS, "when: a keyword is empty"),
        ({"when": [f"k{n}" for n in range(21)]}, Rule.TOOL_ARGUMENTS, "a block takes at most 20"),
        ({"when": ["k" * 41]}, Rule.TOOL_ARGUMENTS, "longer than 40 characters"),
        ({"when": ["!!"]}, Rule.TOOL_ARGUMENTS, "has no letter or digit"),
        ({"when": "deploy,release"}, Rule.TOOL_ARGUMENTS, "when: Input should be a valid list"),
        ({"until": "tomorrow"}, Rule.TOOL_ARGUMENTS, "until: 'tomorrow' is not a date"),
        ({"until": "0h"}, Rule.TOOL_ARGUMENTS, "until: '0h' is no time at all; write e.g. 2026"),
        ({"until": "99999d"}, Rule.TOOL_ARGUMENTS, "longer than a block may last"),
        ({"until": "2025-01-01"}, Rule.ENDS, "has already passed"),
    ],
)
async def test_keywords_and_ends_the_rules_refuse_change_nothing(
    make_bot: BotFactory, arguments: dict[str, object], rule: Rule, problem: str
) -> None:
    bot = make_bot()
    context = MessageContext.resolve(dm(), PinsConfig(), None)
    run = PinTools(bot.pins.ops)
    call = {"label": "runbook", "content": "Run the checks first.", **arguments}
    refused = await run.call(context, "pin_set", json.dumps(call))
    assert isinstance(refused, Refused) and refused.code is rule, refused
    assert problem in refused.reason
    assert await bot.store.blocks(["console:direct:42"]) == []


async def test_sticky_set_keeps_the_designs_parameters_and_sticky_get_shows_timing(
    make_bot: BotFactory,
) -> None:
    bot = make_bot()
    await ask(bot, dm(), "/pin add trip --when flight,hotel --for 3d Flight LH123")
    context = MessageContext.resolve(dm(), PinsConfig(), None)
    run = PinTools(bot.pins.ops, STICKY_TOOLS)
    refused = await run.call(context, "sticky_set", '{"key": "a", "content": "b", "when": ["x"]}')
    assert isinstance(refused, Refused) and refused.code is Rule.TOOL_ARGUMENTS
    assert "when: unknown parameter" in refused.reason
    got = await run.call(context, "sticky_get", '{"key": "trip"}')
    assert isinstance(got, Done)
    (record,) = json.loads(got.message)
    assert record["when"] == ["flight", "hotel"] and record["until"] is not None


async def test_a_new_end_brings_back_a_block_that_ended_and_the_result_says_it_applies(
    make_bot: BotFactory, clock: FakeClock
) -> None:
    bot = make_bot()
    await ask(bot, dm(), "/pin add trip --for 1h Flight LH123")
    clock.advance(hours=2)
    await ask(bot, dm(), "/pin idle trip")  # as an ended block is, once its end passed
    context = MessageContext.resolve(dm(), PinsConfig(), None)
    run = PinTools(bot.pins.ops)
    again = await run.call(
        context, "pin_set", '{"label": "trip", "content": "Flight LH123", "until": "3d"}'
    )
    assert isinstance(again, Done) and again.message.endswith(NEXT_TURN), again
    (block,) = await bot.store.blocks(["console:direct:42"])
    assert block.state is State.ACTIVE and block.ends_at is not None
    assert abs(block.ends_at - (clock.now + timedelta(days=3))) < timedelta(seconds=1)
    # Without a new end an idle block stays idle, as before.
    await ask(bot, dm(), "/pin idle trip")
    kept = await run.call(context, "pin_set", '{"label": "trip", "content": "Flight LH124"}')
    assert isinstance(kept, Done) and "stays idle" in kept.message

"""The agent tools as data: two sets of names over one implementation, with the same refusals."""

from __future__ import annotations

import json

import pytest

from bot.config import PinsConfig
from bot.core.blocks.ops import Done, Refused
from bot.core.blocks.review import Rule
from bot.core.conversation.tools import PIN_TOOLS, STICKY_TOOLS, TOOL_SETS, Op, PinTools, ToolSet
from bot.core.people.context import MessageContext
from tests.conftest import BotFactory, ask, dm


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

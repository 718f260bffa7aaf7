"""Hypothesis over what the model and files can send: any JSON value in any tool parameter, any
import document. Nothing raises; every outcome is Done or Refused; stored blocks stay valid."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.config import PinsConfig
from bot.core.blocks.ops import Done, Refused
from bot.core.blocks.review import PRIORITY_MAX, PRIORITY_MIN, BlockPolicy
from bot.core.blocks.transfer import plan_import
from bot.core.conversation.tools import TOOL_SETS, PinTools
from bot.core.people.context import MessageContext
from bot.llm.openai_backend import _arguments
from storage import Store
from tests.conftest import BotFactory, dm
from tests.fakes.clock import FakeClock

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
PARAMETERS = ["label", "key", "content", "level", "pinned", "priority", "scope", "extra"]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(
        [
            "pin_set",
            "pin_get",
            "pin_delete",
            "pin_nope",
            "sticky_set",
            "sticky_get",
            "sticky_delete",
        ]
    ),
    arguments=st.dictionaries(st.sampled_from(PARAMETERS), JSON, max_size=5) | JSON,
)
async def test_any_json_in_any_tool_parameter(
    make_bot: BotFactory, store: Store, name: str, arguments: Any
) -> None:
    bot = make_bot()
    context = MessageContext.resolve(dm(), PinsConfig(), None)
    tools = TOOL_SETS[name.split("_")[0]]
    outcome = await PinTools(bot.pins.ops, tools).call(context, name, _arguments(arguments))
    assert isinstance(outcome, Done | Refused)
    for block in await store.blocks(["console:direct:42"]):
        assert PRIORITY_MIN <= block.priority <= PRIORITY_MAX
        assert block.label and not any(
            unicodedata.category(c) in ("Cc", "Cs", "Cf") for c in block.label
        )


SCOPES = st.sampled_from(
    ["console:direct:1", "agent:x:console:direct:1", "console:group:-1", "nonsense", "a:b:c"]
)
BLOCK = st.fixed_dictionaries(
    {"label": JSON | st.text(max_size=10), "content": JSON | st.text(max_size=20)},
    optional={
        "level": JSON | st.sampled_from(["strong", "context"]),
        "state": JSON | st.sampled_from(["active", "idle", "pinned"]),
        "priority": JSON,
        "created_at": JSON
        | st.sampled_from(["2026-01-01T00:00:00+00:00", "0001-01-01T00:00:00+14:00"]),
        "idle_since": JSON,
        "idle_calls": JSON,
        "colour": JSON,
    },
)
DOCUMENT = (
    st.fixed_dictionaries(
        {},
        optional={
            "format": JSON | st.just("pinbot-blocks"),
            "version": JSON | st.just(1),
            "scopes": st.dictionaries(
                SCOPES,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "blocks": st.lists(BLOCK, max_size=3) | JSON,
                        "model_calls": JSON,
                        "blokcs": JSON,
                    },
                )
                | JSON,
                max_size=3,
            )
            | JSON,
            "extra": JSON,
        },
    )
    | JSON
)


@settings(max_examples=300, deadline=None)
@given(document=DOCUMENT)
def test_any_import_document_is_checked_never_crashes(document: Any) -> None:
    now = FakeClock()()
    plan = plan_import(json.loads(json.dumps(document)), BlockPolicy(PinsConfig()), now)
    if plan.problems:
        return
    for scope, (calls, blocks) in plan.scopes.items():
        assert 0 <= calls < 2**63
        for block in blocks:
            assert block.scope == scope and PRIORITY_MIN <= block.priority <= PRIORITY_MAX
            block.created_at.timestamp()  # storable

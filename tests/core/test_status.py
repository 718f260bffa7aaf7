"""The status view and token estimates, judged against the renderer's real output and an
injected clock; labels under hypothesis; tools offered only where the speaker can pin."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.core.replies import Result
from storage import Store
from storage.models import State, label_key
from tests.conftest import SYSTEM, BotFactory, OpenAIBots, ask, dm, group, outcome_of, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls


def total_estimate(reply: str) -> int:
    match = re.search(r"every request here carries about ([\d,]+) tokens", reply)
    assert match, reply
    return int(match.group(1).replace(",", ""))


async def test_the_estimate_matches_what_the_renderer_sends(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(pins={"enable_in_group": True, "group_shared_admin_ids": ["7"]})
    admin, member = group("7"), group("8")
    await ask(bot, admin, "/pin shared add-strong rule " + "Keep answers short. " * 10)
    await ask(bot, admin, "/pin shared add ref Project notes: " + "pinbot " * 30)
    await ask(bot, member, "/pin add mine My own notes " * 5)
    listing = text_of(await ask(bot, member, "/pin list")) or ""
    shared_listing = text_of(await ask(bot, member, "/pin shared list")) or ""
    text = "what now?"
    await ask(bot, member, text)
    system, user = fake_openai.messages()[0]["content"], fake_openai.messages()[-1]["content"]
    injected_chars = (len(system) - len(SYSTEM)) + (len(user) - len(text))
    actual = injected_chars / 4
    for reply in (listing, shared_listing):
        assert abs(total_estimate(reply) - actual) <= 0.1 * actual, (reply, actual)
    status = text_of(await ask(bot, member, "/pin status")) or ""
    carried = re.search(r"Every request here carries about ([\d,]+) tokens", status)
    assert carried and abs(int(carried.group(1).replace(",", "")) - actual) <= 0.1 * actual


async def test_the_warning_threshold_is_compared_with_the_total(make_bot: BotFactory) -> None:
    bot = make_bot(
        pins={
            "enable_in_group": True,
            "group_shared_admin_ids": ["7"],
            "token_warning_threshold": 300,  # above these blocks alone, below the total
        }
    )
    await ask(bot, group("7"), "/pin shared add big " + "word " * 90)
    await ask(bot, group("8"), "/pin add small tiny")
    listing = text_of(await ask(bot, group("8"), "/pin list"))
    assert "Warning: that is over the warning threshold" in listing


async def test_idle_blocks_show_when_they_become_due(
    make_bot: BotFactory, clock: FakeClock
) -> None:
    bot = make_bot(pins={"idle_retention_days": 7, "idle_retention_calls": 10})
    await ask(bot, dm(), "/pin add old Old notes")
    await ask(bot, dm(), "/pin idle old")
    clock.advance(days=3)
    for _ in range(4):
        await ask(bot, dm(), "hello")
    status = text_of(await ask(bot, dm(), "/pin status")) or ""
    assert (
        "Idle, not sent:\n- old (strong, idle, priority 0): deleted once 4 more days and 6 more "
        "model calls have passed, or in 27 days at the latest"
    ) in status
    clock.advance(days=5)
    for _ in range(6):
        await ask(bot, dm(), "hello")
    status = text_of(await ask(bot, dm(), "/pin status")) or ""
    assert "- old (strong, idle, priority 0): due: deleted at the next model request here" in status
    await ask(bot, dm(), "hello")
    assert await bot.store.blocks(["console:direct:42"]) == []


LABEL_CHARS = st.sampled_from(
    [*"abcXYZ09_-~", "ｔ", "Ａ", "ﬁ", "é", "e\u0301", "\u200b", "\u202e", "\u2066", "\ufeff"]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    first=st.lists(LABEL_CHARS, min_size=1, max_size=6),
    second=st.lists(LABEL_CHARS, min_size=1, max_size=6),
)
async def test_labels_under_hypothesis(
    make_bot: BotFactory, store: Store, first: list[str], second: list[str]
) -> None:
    bot = make_bot()
    await ask(bot, dm(), "/pin clear confirm")
    labels = ["".join(first), "".join(second)]
    replies = [await ask(bot, dm(), f"/pin add {label} content") for label in labels]
    stored = [b.label for b in await store.blocks(["console:direct:42"])]
    for label, reply in zip(labels, replies, strict=True):
        invisible = any(unicodedata.category(c) == "Cf" for c in label)
        if invisible or label.startswith("--"):
            assert label not in stored and outcome_of(reply) is Result.REFUSED
    # no two stored labels look alike, and none holds an invisible character
    assert len({label_key(label) for label in stored}) == len(stored)
    assert not any(unicodedata.category(c) == "Cf" for label in stored for c in label)
    if labels[0] in stored and label_key(labels[1]) == label_key(labels[0]):
        assert "already exists" in text_of(replies[1])


async def test_tools_are_offered_only_where_the_speaker_can_pin(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(llm={"agent_tools": True})  # pins are off in groups by default
    await ask(bot, group("8"), "hello group")
    assert "tools" not in fake_openai.requests[-1]
    await ask(bot, dm("8"), "hello dm")
    assert [t["function"]["name"] for t in fake_openai.requests[-1]["tools"]] == [
        "pin_set",
        "pin_get",
        "pin_delete",
    ]


async def test_pin_set_on_an_idle_block_says_it_stays_idle(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(llm={"agent_tools": True})
    await ask(bot, dm(), "/pin add task Old task")
    await ask(bot, dm(), "/pin idle task")
    fake_openai.script = [
        tool_calls(("pin_set", {"label": "task", "content": "New task"})),
        completion("ok"),
    ]
    await ask(bot, dm(), "update my task")
    result = next(m for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool")
    assert "stays idle" in result["content"] and "/pin activate task" in result["content"]
    (block,) = await bot.store.blocks(["console:direct:42"])
    assert (block.content, block.state) == ("New task", State.IDLE)


def figures(pattern: str, text: str) -> list[int]:
    return [int(found.replace(",", "")) for found in re.findall(pattern, text)]


async def test_parts_add_up_to_the_total_and_the_total_is_what_is_sent(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(pins={"enable_in_group": True, "group_shared_admin_ids": ["7"]})
    admin, member = group("7"), group("8")
    await ask(bot, admin, "/pin shared add-strong rule " + "Keep answers short. " * 10)
    await ask(bot, admin, "/pin shared add ref Project notes: " + "pinbot " * 30)
    await ask(bot, member, "/pin add mine My own notes")
    await ask(bot, member, "/pin add-strong nope not allowed")  # refused: a member
    text = "what now?"
    await ask(bot, member, text)
    system, user = fake_openai.messages()[0]["content"], fake_openai.messages()[-1]["content"]
    sent_chars = (len(system) - len(SYSTEM)) + (len(user) - len(text))
    for command in ("/pin list", "/pin shared list"):
        reply = text_of(await ask(bot, member, command))
        own, other, wrapper, total = figures(r"about ([\d,]+)", reply)
        assert total == -(-sent_chars // 4)  # exactly the renderer's characters, 4 a token
        assert total <= own + other + wrapper <= total + 2, reply  # ±1 token a part
    status = text_of(await ask(bot, member, "/pin status"))
    (total,) = figures(r"carries about ([\d,]+) tokens", status)
    parts = figures(r"(?:blocks in this group|shared blocks|counted once\)) about ([\d,]+)", status)
    assert len(parts) == 3 and total <= sum(parts) <= total + 2, status
    per_block = figures(r"characters, about ([\d,]+) tokens", status)
    assert len(per_block) == 3 and sum(per_block) + parts[-1] - total in range(0, 4)


async def test_status_lists_every_block_sent_in_the_order_the_model_reads_them(
    make_bot: BotFactory, clock: FakeClock
) -> None:
    bot = make_bot(
        pins={"enable_in_group": True, "group_shared_admin_ids": ["7"], "max_total_chars": 900}
    )
    admin, member = group("7"), group("8")
    await ask(bot, admin, "/pin shared add-context ref Reference notes")
    await ask(bot, admin, "/pin shared add-strong house Be kind.")
    await ask(bot, admin, "/pin shared add-strong top Safety first --priority 100 --pinned")
    await ask(bot, member, "/pin add mine My notes")
    await ask(bot, member, "/pin add gone Old notes")
    await ask(bot, member, "/pin idle gone")
    status = text_of(await ask(bot, member, "/pin status"))
    assert status.splitlines()[:7] == [
        "Sent with every request here, in the order the model reads them (characters of "
        "content; estimated tokens with the block's boundary lines):",
        "In the system prompt (strong blocks):",
        "1. top (shared, strong, pinned, priority 100): 12 characters, about 25 tokens",
        "2. house (shared, strong, active, priority 0): 8 characters, about 25 tokens",
        "With your message (context blocks):",
        "3. ref (shared, context, active, priority 0): 15 characters, about 26 tokens",
        "4. mine (personal, context, active, priority 0): 8 characters, about 25 tokens",
    ]
    assert "Idle, not sent:\n- gone (personal, context, idle, priority 0): deleted once" in status
    assert "This group's shared blocks: 3 of 20 blocks, 35 of 900 characters" in status
    assert "Your personal blocks in this group: 2 of 20 blocks, 17 of 900 characters" in status
    assert "That is within the warning threshold of 1,000 tokens." in status
    shared_only = text_of(await ask(bot, member, "/sticky shared"))
    assert "mine" not in shared_only and "gone" not in shared_only and "3. ref" in shared_only
    assert "Your personal blocks in this group:" not in shared_only
    carried = r"carries about ([\d,]+)"
    assert figures(carried, shared_only) == figures(carried, status)


async def test_no_figures_when_injection_is_off(make_bot: BotFactory) -> None:
    bot = make_bot(pins={"allow_prompt_injection": False})
    await ask(bot, dm(), "/pin add tone Be brief.")
    await ask(bot, dm(), "/pin add-context old Old notes")
    await ask(bot, dm(), "/pin idle old")
    off = "Injection is off (pins.allow_prompt_injection: false)"
    for command in ("/pin list", "/pin status", "/sticky"):
        reply = text_of(await ask(bot, dm(), command))
        assert off in reply and "tokens" not in reply, reply
    status = text_of(await ask(bot, dm(), "/sticky"))
    assert "Kept, but not sent:\n1. tone (strong, active, priority 0): 9 characters" in status
    assert "Idle, not sent:\n- old (context, idle, priority 0): deleted once" in status
    assert "Your blocks: 2 of 20 blocks, 18 characters" in status


async def test_a_list_of_blocks_none_of_which_is_sent(make_bot: BotFactory) -> None:
    bot = make_bot(pins={"enable_in_group": True, "group_shared_admin_ids": ["7"]})
    await ask(bot, dm(), "/pin add old Old notes")
    await ask(bot, dm(), "/pin idle old")
    assert text_of(await ask(bot, dm(), "/pin list")).endswith(
        "\nNone of these blocks is sent to the model now: idle blocks are not."
    )
    await ask(bot, group("7"), "/pin shared add rule Be kind.")
    await ask(bot, group("8"), "/pin add mine My notes")
    await ask(bot, group("8"), "/pin idle mine")
    listing = text_of(await ask(bot, group("8"), "/pin list"))
    (total,) = figures(r"carries about ([\d,]+) tokens", listing)
    shared, wrapper = figures(r"\(about ([\d,]+)\)", listing)
    assert "None of these blocks is sent to the model now: idle blocks are not.\n" in listing
    assert total <= shared + wrapper <= total + 1
    shared_listing = text_of(await ask(bot, group("8"), "/pin shared list"))
    assert "These blocks add about " in shared_listing and "your personal blocks" not in (
        shared_listing
    )

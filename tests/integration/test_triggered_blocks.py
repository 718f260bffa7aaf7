"""Blocks that come when they are needed (issue 48), driven as a user's messages go, judged by
the exact requests the fake model server receives: a triggered block only with a request that
mentions one of its keywords (or whose last `pins.trigger_turns` user messages did), within
`pins.triggered_budget_tokens`, beside the user's message so that the prefix stays the same;
blocks with an end, told once; and `/pin why`."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import OpenAIBots, ask, dm, group, text_of
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI

GROUPS = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}
NOW_WINDOW = {"trigger_turns": 0}  # only the current message triggers
RUNBOOK = "Run the smoke tests before you ship."


def carried(request: dict[str, Any]) -> str:
    """Everything a request carries, as one text."""
    return json.dumps(request["messages"], ensure_ascii=False)


def user_message(request: dict[str, Any]) -> str:
    return str(request["messages"][-1]["content"])


async def test_a_triggered_block_goes_only_when_a_keyword_is_mentioned(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(pins=NOW_WINDOW)
    saved = text_of(
        await ask(
            bot, dm(), f'/pin add-context runbook --when deploy,"release notes",部署 {RUNBOOK}'
        )
    )
    assert "sent when a message mentions deploy, release notes, 部署" in saved
    for message, sent in [
        ("How do I deploy this?", True),
        ("hello there", False),
        ("DEPLOY now", True),  # any case
        ("ｄｅｐｌｏｙ", True),  # full-width letters, after NFKC
        ("the redeployment failed", False),  # a word inside a longer one in English
        ("where are the Release   Notes?", True),  # a keyword of two words
        ("我们明天部署新版本", True),  # Chinese: inside a run without spaces
        ("我们明天发布", False),
    ]:
        await ask(bot, dm(), message)
        assert (RUNBOOK in carried(fake_openai.requests[-1])) is sent, message


async def test_the_last_turns_keep_a_mentioned_block(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(pins={"trigger_turns": 2})
    await ask(bot, dm(), f"/pin add-context runbook --when deploy {RUNBOOK}")
    sent = []
    for message in ("let us deploy", "and then?", "anything else?", "thanks"):
        await ask(bot, dm(), message)
        sent.append(RUNBOOK in carried(fake_openai.requests[-1]))
    # The mention, and the two turns after it, whose last two user messages hold it.
    assert sent == [True, True, True, False]


async def test_the_budget_leaves_the_lowest_priority_out_and_why_says_so(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    # Each block below is about 42 tokens with its boundary lines: two fit in 90.
    bot = await openai_bots(pins={"trigger_turns": 0, "triggered_budget_tokens": 90})
    for label, priority in (("high", 5), ("middle", 0), ("low", -5)):
        content = f"{label} notes on the database: " + "x" * 40
        await ask(bot, dm(), f"/pin add-context {label} --when db --priority {priority} {content}")
    await ask(bot, dm(), "/pin add always Always here.")
    await ask(bot, dm(), "the db is slow")
    request = carried(fake_openai.requests[-1])
    assert "high notes" in request and "middle notes" in request
    assert "low notes" not in request
    why = text_of(await ask(bot, dm(), "/pin why"))
    assert "- always (strong, about" in why and "always sent" in why
    assert "- high (context, about" in why and "its keyword 'db' was mentioned" in why
    assert "- low (context, about" in why
    assert "mentioned ('db'), but over pins.triggered_budget_tokens" in why


async def test_the_prefix_up_to_the_user_message_is_the_same_with_and_without_a_trigger(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(pins=NOW_WINDOW)
    await ask(bot, dm(), "/pin add tone Answer briefly.")
    await ask(bot, dm(), "/pin add-strong deploy-rule --when deploy Never deploy on a Friday.")
    await ask(bot, dm(), "/pin add-context glossary --when deploy A deploy is a release.")
    await ask(bot, dm(), "hello")
    await ask(bot, dm(), "/reset")
    await ask(bot, dm(), "can I deploy today?")
    without, with_trigger = fake_openai.requests[-2], fake_openai.requests[-1]
    assert without["messages"][:-1] == with_trigger["messages"][:-1]  # the system prompt
    system = without["messages"][0]["content"]
    assert "Answer briefly." in system and "Friday" not in system
    user = user_message(with_trigger)
    assert "Friday" in user and "A deploy is a release." in user
    assert user.endswith("can I deploy today?")
    # The rule a keyword brought is framed as a rule, the reference as reference material.
    assert user.index("pinned rules]") < user.index("Friday") < user.index("reference material]")
    assert user_message(without) == "hello"


async def test_a_block_with_an_end_stops_and_its_owner_is_told_once(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, clock: FakeClock
) -> None:
    bot = await openai_bots()
    saved = text_of(await ask(bot, dm(), "/pin add race The race is on Sunday. --for 3d"))
    assert "until 2026-01-04 00:00 UTC" in saved
    await ask(bot, dm(), "/pin add trip Flight on the 2nd. --until 2026-01-02")
    listing = text_of(await ask(bot, dm(), "/pin list"))
    assert "until 2026-01-04 00:00 UTC" in listing and "until 2026-01-03 00:00 UTC" in listing
    await ask(bot, dm(), "training plan?")
    assert "race is on Sunday" in carried(fake_openai.requests[-1])
    clock.advance(days=2, hours=1)  # the trip has ended
    first = text_of(await ask(bot, dm(), "training plan?"))
    assert "Flight" not in carried(fake_openai.requests[-1])
    assert "race is on Sunday" in carried(fake_openai.requests[-1])
    assert "Your block 'trip' ended at 2026-01-03 00:00 UTC" in first
    second = text_of(await ask(bot, dm(), "and tomorrow?"))
    assert "ended" not in second
    why = text_of(await ask(bot, dm(), "/pin why"))
    assert "- trip (strong): ended" in why
    listing = text_of(await ask(bot, dm(), "/pin list"))
    assert "trip (strong, idle, ended 2026-01-03 00:00 UTC)" in listing
    # Activating it would end it again at once: a new end (or none) brings it back.
    refused = text_of(await ask(bot, dm(), "/pin activate trip"))
    assert "The end cannot be used: block 'trip' ended at 2026-01-03 00:00 UTC" in refused
    assert "/pin edit trip --until -" in refused
    back = text_of(await ask(bot, dm(), "/pin edit trip --for 1d"))
    assert back.startswith("Updated block 'trip'")
    await ask(bot, dm(), "packing list?")
    assert "Flight" in carried(fake_openai.requests[-1])


async def test_an_end_already_passed_or_a_bad_keyword_is_refused(openai_bots: OpenAIBots) -> None:
    bot = await openai_bots()
    passed = text_of(await ask(bot, dm(), "/pin add old x --until 2025-12-01"))
    assert "has already passed" in passed
    many = ",".join(f"k{n}" for n in range(21))
    assert "at most 20" in text_of(await ask(bot, dm(), f"/pin add kw x --when {many}"))
    assert await bot.store.blocks(["console:direct:42"]) == []


async def test_why_in_the_last_request_says_when_it_ended(
    openai_bots: OpenAIBots, clock: FakeClock
) -> None:
    bot = await openai_bots()
    assert "no message to the model here yet" in text_of(await ask(bot, dm(), "/pin why"))
    await ask(bot, dm(), "/pin add trip Flight. --for 1h")
    await ask(bot, dm(), "/pin add gone Old note.")
    await ask(bot, dm(), "/pin idle gone")
    clock.advance(hours=2)
    await ask(bot, dm(), "hi")
    why = text_of(await ask(bot, dm(), "/pin why"))
    assert "Your last request here carried no pinned blocks." in why
    assert "- trip (strong): ended" in why and "- gone (strong): idle" in why


async def test_group_triggered_blocks_keep_their_permissions_and_their_owner(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(pins={**GROUPS, "trigger_turns": 0})
    admin, member, other = group("7"), group("42"), group("43")
    refused = text_of(await ask(bot, member, "/pin shared add lore --when dragon Dragons sleep."))
    assert "shared" in refused and await bot.store.blocks(["console:group:-100123"]) == []
    await ask(bot, admin, "/pin shared add lore --when dragon Dragons sleep by day.")
    await ask(bot, member, "/pin add mine --when dragon I play the knight.")
    await ask(bot, other, "where is the dragon?")
    request = carried(fake_openai.requests[-1])
    assert "Dragons sleep by day." in request and "I play the knight." not in request
    await ask(bot, member, "I fight the dragon")
    request = carried(fake_openai.requests[-1])
    assert "Dragons sleep by day." in request and "I play the knight." in request
    await ask(bot, member, "a quiet day")
    assert "Dragons" not in carried(fake_openai.requests[-1])
    status = text_of(await ask(bot, member, "/pin status"))
    assert "wait for keywords" in status


async def test_a_keyword_that_looks_like_a_credential_is_refused_in_a_group(
    openai_bots: OpenAIBots,
) -> None:
    bot = await openai_bots(pins=GROUPS)
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    for asked in (
        f"/pin shared add lore --when {token} Dragons sleep.",
        "/pin shared add lore Dragons sleep.",
    ):
        await ask(bot, group("7"), asked)
    refused = text_of(await ask(bot, group("7"), f"/pin shared edit lore --when {token}"))
    assert refused.startswith("Not saved: this looks like")
    (lore,) = await bot.store.blocks(["console:group:-100123"])
    assert lore.triggers == ()

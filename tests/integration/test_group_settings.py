"""Groups that run themselves (issue 49), through the core's one entry as a message goes: who
may change a group's settings, pins turned on by the owner, a shared admin named from the chat
who then manages shared blocks, a topic's own value over the group's, the operator's caps,
`/group show` naming where each value comes from, `/group undo` and `/group reset`."""

from __future__ import annotations

from typing import Any

from bot.core.people import AdminLookup
from tests.conftest import BotFactory, ask, group, text_of

GROUP_SCOPE = "console:group:-100123"


def admin(answer: bool | None) -> AdminLookup:
    """The platform's answer to whether the sender administers the group."""

    async def lookup() -> bool | None:
        return answer

    return lookup


OWNER, NOBODY = admin(True), admin(False)


async def said(
    bot: Any, who: str, text: str, *, owner: bool = False, topic: str | None = None
) -> str:
    reply = await ask(bot, group(who, topic=topic), text, platform_admin=OWNER if owner else NOBODY)
    return text_of(reply) or ""


async def test_the_owner_turns_pins_on_and_names_a_shared_admin_who_then_manages_blocks(
    make_bot: BotFactory,
) -> None:
    bot = make_bot()  # pins.enable_in_group is false: the config keeps pins off in groups
    assert "disabled in groups" in await said(bot, "42", "/pin list")
    refused = await said(bot, "42", "/group pins on")
    assert refused.startswith("Only this group's owner and admins")
    assert await bot.store.settings_of([GROUP_SCOPE]) == {}
    assert "pins for this group: on" in await said(bot, "1", "/group pins on", owner=True)
    assert "Only shared admins" in await said(bot, "42", "/pin shared add rule Be kind.")
    assert "42 is now among the admins" in await said(bot, "1", "/group admins add 42", owner=True)
    assert "Saved" in await said(bot, "42", "/pin shared add rule Be kind.")
    (rule,) = await bot.store.blocks([GROUP_SCOPE])
    assert rule.content == "Be kind."
    shown = await said(bot, "42", "/group show")
    assert "- pins: on (from the group)" in shown
    assert "- admins: 42 (from the group), and from the config: nobody" in shown
    # The admin named from the chat manages blocks, not the group's settings.
    assert (await said(bot, "42", "/group pins off")).startswith("Only this group's owner")
    # Undo takes back the last change: 42 is no longer an admin.
    assert (await said(bot, "1", "/group undo", owner=True)).startswith("Undone: admins")
    assert "Only shared admins" in await said(bot, "42", "/pin shared remove rule")


async def test_a_topic_overrides_its_group_and_the_operator_keeps_the_last_word(
    make_bot: BotFactory,
) -> None:
    bot = make_bot(
        groups={"max_daily_tokens": 10_000},
        llm={"models": {"fast": {"model": "fast-1", "base_url": "http://127.0.0.1:9/v1"}}},
    )
    assert "trigger for this group: all" in await said(bot, "1", "/group trigger all", owner=True)
    topic = await said(bot, "1", "/group trigger mention", owner=True, topic="5")
    assert "trigger for this topic: mention" in topic
    shown = await said(bot, "1", "/group show", topic="5")
    assert "- trigger: mention (from the topic)" in shown
    assert "- trigger: all (from the group)" in await said(bot, "1", "/group show")
    over = await said(bot, "1", "/group budget daily 20000", owner=True)
    assert "at most 10,000 tokens here (groups.max_daily_tokens)" in over
    assert "budget_daily for this group: 5,000 tokens" in await said(
        bot, "1", "/group budget daily 5000", owner=True
    )
    assert "There is no model 'slow' here" in await said(bot, "1", "/group model slow", owner=True)
    assert "model for this topic: fast" in await said(
        bot, "1", "/group model fast", owner=True, topic="5"
    )
    reset = await said(bot, "1", "/group reset", owner=True, topic="5")
    assert reset.startswith("Every setting of this topic is back")
    assert "- model: offline (from the config)" in await said(bot, "1", "/group show", topic="5")


async def test_without_self_service_only_the_configured_admins_may(make_bot: BotFactory) -> None:
    bot = make_bot(groups={"self_service": False}, pins={"group_shared_admin_ids": ["7"]})
    assert "groups.self_service is off" in await said(bot, "1", "/group pins on", owner=True)
    assert "pins for this group: on" in await said(bot, "7", "/group pins on")
    assert "I did not understand" in await said(bot, "7", "/group pins maybe")


async def test_a_budget_a_group_sets_stops_its_turns_and_default_gives_the_configs_back(
    make_bot: BotFactory,
) -> None:
    bot = make_bot(pins={"enable_in_group": True})
    assert "budget_daily for this group: 1 tokens" in await said(
        bot, "1", "/group budget daily 1", owner=True
    )
    await ask(bot, group("42"), "hello there, a first question", mentioned=True)
    stopped = text_of(await ask(bot, group("42"), "and a second one", mentioned=True)) or ""
    assert "budget" in stopped.casefold()
    assert "the config's" in await said(bot, "1", "/group budget daily default", owner=True)
    answered = await ask(bot, group("42"), "and a third one", mentioned=True)
    assert answered is not None and "budget" not in (text_of(answered) or "").casefold()

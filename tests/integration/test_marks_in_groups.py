"""Issue 44: what a user marks `||…||` stays hidden from a group everywhere a group reads: a
proposal's message and listing (content and reason), and the history and audit log of a block
whose earlier versions held the marked text unmarked."""

from __future__ import annotations

from typing import Any

from bot.core.entry.pinbot import Pinbot
from tests.conftest import OpenAIBots, ask, group, text_of
from tests.core.test_suggestions import Posted
from tests.fakes.openai_server import FakeOpenAI, completion, tool_calls

SHARED = "console:group:-100123"
GROUPS = {"enable_in_group": True, "group_shared_admin_ids": ["7"]}
GIFT = {"label": "gift", "content": "The surprise is a ||red bike|| for Ann", "reason": "party"}


async def proposing(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI, proposal: dict[str, Any]
) -> tuple[Pinbot, Posted]:
    """A group bot whose model proposes proposal when a member asks; what it posted."""
    bot = await openai_bots(pins=GROUPS, llm={"agent_tools": True})
    posted = Posted()
    bot.use_messenger(posted)
    fake_openai.script = [tool_calls(("pin_propose", proposal)), completion("Proposed.")]
    assert text_of(await ask(bot, group("42"), "propose it")) == "Proposed."
    return bot, posted


async def test_a_proposal_hides_its_marked_part_before_and_after_approval(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot, posted = await proposing(openai_bots, fake_openai, GIFT)
    (message,) = posted.with_buttons()
    assert "The surprise is a [hidden] for Ann" in message.text and "red bike" not in message.text
    listing = text_of(await ask(bot, group("42"), "/pin shared proposals")) or ""
    assert "[hidden]" in listing and "red bike" not in listing
    approved = text_of(await ask(bot, group("7"), "/pin shared approve 1")) or ""
    assert "red bike" not in approved
    (block,) = await bot.store.blocks([SHARED])
    assert block.sensitive and block.content == GIFT["content"]
    assert all("red bike" not in reply.text for reply in posted.messages.values())


async def test_a_proposals_marked_reason_is_hidden(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    reason = {"label": "gift", "content": "Gift for Ann", "reason": "it is a ||red bike||"}
    _, posted = await proposing(openai_bots, fake_openai, reason)
    (message,) = posted.with_buttons()
    assert "Reason: it is a [hidden]" in message.text and "red bike" not in message.text


async def test_a_proposal_for_a_sensitive_block_shows_both_contents_masked(
    openai_bots: OpenAIBots, fake_openai: FakeOpenAI
) -> None:
    bot = await openai_bots(pins=GROUPS, llm={"agent_tools": True})
    await ask(bot, group("7"), "/pin shared add vpn gateway 10.20.30.40 --sensitive")
    posted = Posted()
    bot.use_messenger(posted)
    moved = {"label": "vpn", "content": "gateway 10.20.30.41", "reason": "moved"}
    fake_openai.script = [tool_calls(("pin_propose", moved)), completion("Proposed.")]
    await ask(bot, group("42"), "the gateway moved")
    (message,) = posted.with_buttons()
    assert "Now: gateway [ip]" in message.text and "Proposed: gateway [ip]" in message.text


async def test_marks_added_later_hide_the_text_in_earlier_versions_and_the_log(
    openai_bots: OpenAIBots,
) -> None:
    bot = await openai_bots(pins=GROUPS)
    await ask(bot, group("7"), "/pin shared add gift The surprise is a red bike")
    await ask(bot, group("7"), "/pin shared edit gift The surprise is a ||red bike||")
    (block,) = await bot.store.blocks([SHARED])
    assert block.sensitive
    for command in ("/pin shared history gift", "/pin shared log 20"):
        seen = text_of(await ask(bot, group("42"), command)) or ""
        assert "The surprise is a [hidden]" in seen and "red bike" not in seen, (command, seen)

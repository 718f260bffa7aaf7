"""Groups that run themselves on Feishu (issue 49): `/group` commands POSTed as real-format
events to the webhook, the group's owner and managers asked of the fake Feishu OpenAPI
(`GET im/v1/chats/:chat_id`), shared admins named by @mention, judged by the replies Feishu
receives and what the store holds."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from tests.conftest import FEISHU_IN_PROCESS
from tests.fakes.feishu_server import FakeFeishu, card_action, card_text, mention, receive_event
from tests.integration.test_feishu import BOT, Harness, proposing_standup, start_feishu

pytestmark = FEISHU_IN_PROCESS  # they start Feishu frontends in this process

__all__ = ["start_feishu"]  # the Feishu tests' fixture, used here too

CHAT = "oc_team"
GROUP_SCOPE = f"feishu:group:{CHAT}"
OWNER, MANAGER, MEMBER, ALICE = "ou_owner", "ou_manager", "ou_member", "ou_alice"


class Monotonic:
    """The frontend's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def said(bot: Harness, who: str, text: str, *mentioned: dict[str, Any]) -> str:
    """What the bot answers who for text sent in the group, the bot @mentioned first (as
    commands in a group need with `feishu.group_trigger: mention`); "" for no answer."""
    before = len(bot.server.replies)
    event = receive_event(
        f"@_user_1 {text}",
        chat_type="group",
        chat_id=CHAT,
        open_id=who,
        user_id=f"u_{who}",
        union_id=f"on_{who}",
        mentions=[BOT, *mentioned],
    )
    texts = await bot.send(event)
    return texts[-1] if len(texts) > before else ""


async def test_the_owner_turns_pins_on_and_names_by_mention_a_shared_admin_who_manages_blocks(
    start_feishu: Any, fake_feishu: FakeFeishu
) -> None:
    fake_feishu.add_chat(CHAT, OWNER, [MANAGER])
    monotonic = Monotonic()
    bot = await start_feishu(monotonic=monotonic)  # pins.enable_in_group is false
    assert "disabled in groups" in await said(bot, MEMBER, "/pin list")
    refused = await said(bot, MEMBER, "/group pins on")
    assert refused.startswith("Only this group's owner and admins")
    assert await bot.store.settings_of([GROUP_SCOPE]) == {}
    assert "pins for this group: on" in await said(bot, OWNER, "/group pins on")
    assert "Only shared admins" in await said(bot, ALICE, "/pin shared add rules Be kind")
    alice = mention("@_user_2", ALICE, "Alice")
    added = await said(bot, OWNER, "/group admins add @_user_2", alice)
    assert added.startswith(f"@Alice ({ALICE}) is now among the admins of this group.")
    assert await said(bot, ALICE, "/pin shared add rules Be kind") == "Saved context block 'rules'."
    (rule,) = await bot.store.blocks([GROUP_SCOPE])
    assert (rule.label, rule.content) == ("rules", "Be kind")
    shown = await said(bot, ALICE, "/group show")
    assert "- pins: on (from the group)" in shown
    assert f"- admins: {ALICE} (from the group)" in shown
    # Alice manages blocks, not the group's settings; a plain member neither.
    assert (await said(bot, ALICE, "/group pins off")).startswith("Only this group's owner")
    assert "Only shared admins" in await said(bot, MEMBER, "/pin shared remove rules")
    # A manager counts as the owner does, and turns pins off again.
    assert "pins for this group: off" in await said(bot, MANAGER, "/group pins off")
    assert "disabled in groups" in await said(bot, ALICE, "/pin shared add more x")
    assert [b.label for b in await bot.store.blocks([GROUP_SCOPE])] == ["rules"]
    # Feishu was asked once: its answer is trusted for feishu.admin_cache_ttl_s (60 s)...
    assert fake_feishu.chat_reads == [CHAT]
    # ...then asked again, and what it says now counts: the manager is one no more.
    fake_feishu.add_chat(CHAT, OWNER, [])
    monotonic.now += 61
    assert (await said(bot, MANAGER, "/group pins on")).startswith("Only this group's owner")
    assert fake_feishu.chat_reads == [CHAT, CHAT]


async def test_a_mention_names_whoever_it_names_and_nothing_else_does(
    start_feishu: Any, fake_feishu: FakeFeishu
) -> None:
    fake_feishu.add_chat(CHAT, OWNER)
    bot = await start_feishu()
    wang = mention("@_user_2", "ou_wang", "Wang Fang")
    zhang = mention("@_user_3", "ou_zhang", "张三")
    # Names with spaces and in Chinese, after the command or with other mentions around.
    added = await said(bot, OWNER, "/group admins add @_user_2", wang)
    assert added.startswith("@Wang Fang (ou_wang) is now among the admins")
    added = await said(bot, OWNER, "/group strong add @_user_3", wang, zhang)
    assert added.startswith("@张三 (ou_zhang) is now among the strong")
    settings = await bot.store.settings_of([GROUP_SCOPE])
    assert settings[GROUP_SCOPE] == {"admins": '["ou_wang"]', "strong": '["ou_zhang"]'}
    # A name nobody was mentioned by is no id: refused, nothing changed.
    refused = await said(bot, OWNER, "/group admins add @Li Lei")
    assert refused.startswith("I cannot tell who @Li Lei is: a username does not give me")
    # Two people shown by the same name: which one is meant cannot be told.
    other_wang = mention("@_user_3", "ou_wang2", "Wang Fang")
    refused = await said(bot, OWNER, "/group admins remove @_user_2", wang, other_wang)
    assert refused.startswith("Several people mentioned here are called @Wang Fang")
    # An id still names its person.
    removed = await said(bot, OWNER, "/group admins remove ou_wang")
    assert removed.startswith("ou_wang is no longer among the admins")
    assert (await bot.store.settings_of([GROUP_SCOPE]))[GROUP_SCOPE] == {"strong": '["ou_zhang"]'}


async def test_when_feishu_cannot_say_who_administers_a_group_nobody_is_taken_for_an_admin(
    start_feishu: Any, fake_feishu: FakeFeishu, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bot")
    fake_feishu.add_chat(CHAT, OWNER)
    fake_feishu.denied_chats.add(CHAT)
    configured = {"group_shared_admin_ids": ["ou_operator"]}
    bot = await start_feishu(pins=configured)
    refused = await said(bot, OWNER, "/group pins on")
    assert refused.startswith("Only this group's owner and admins")
    (warning,) = [r.getMessage() for r in caplog.records if "owner and managers" in r.getMessage()]
    assert "99991672" in warning and "im:chat:readonly" in warning
    # The configured shared admins need no answer from Feishu.
    assert "pins for this group: on" in await said(bot, "ou_operator", "/group pins on")
    # A refusal is not kept: granted the permission, the owner is asked about again.
    fake_feishu.denied_chats.clear()
    assert "pins for this group: off" in await said(bot, OWNER, "/group pins off")
    assert fake_feishu.chat_reads == [CHAT, CHAT]
    # A chat Feishu gives only the name of (an app outside it) says nothing either.
    caplog.clear()
    event = receive_event(
        "@_user_1 /group pins on", chat_type="group", chat_id="oc_elsewhere", mentions=[BOT]
    )
    assert (await bot.send(event))[-1].startswith("Only this group's owner and admins")
    assert "did not name the owner and managers of chat oc_elsewhere" in caplog.text
    assert await bot.store.settings_of(["feishu:group:oc_elsewhere"]) == {}


async def test_with_inherit_platform_admins_a_groups_owner_manages_its_shared_blocks(
    start_feishu: Any, fake_feishu: FakeFeishu
) -> None:
    fake_feishu.add_chat(CHAT, OWNER, [MANAGER])
    bot = await start_feishu(pins={"enable_in_group": True, "inherit_platform_admins": True})
    assert await said(bot, OWNER, "/pin shared add rules Be kind") == "Saved context block 'rules'."
    assert "Only shared admins" in await said(bot, MEMBER, "/pin shared add other x")
    whoami = await said(bot, MANAGER, "/whoami")
    assert "You are a shared admin because feishu says you administer this group" in whoami
    assert [b.label for b in await bot.store.blocks([GROUP_SCOPE])] == ["rules"]


async def test_with_inherit_platform_admins_the_owners_tap_on_a_proposal_card_decides_it(
    start_feishu: Any, fake_feishu: FakeFeishu, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A card's button is decided as the typed command is: the group's owner, asked of
    Feishu, approves a proposal with a tap; a member's tap is refused."""
    fake_feishu.add_chat(CHAT, OWNER, [MANAGER])
    pins = {"enable_in_group": True, "inherit_platform_admins": True}
    async with proposing_standup(monkeypatch) as (llm, model):
        bot = await start_feishu(model=model, llm=llm, pins=pins)
        assert await said(bot, MEMBER, "keep the standup time") == "Proposed."
        (card,) = [p for p in fake_feishu.posted if p["msg_type"] == "interactive"]
        approve = json.loads(card["content"])["elements"][1]["actions"][0]["value"]
        status, answer = await bot.post(
            card_action(approve, open_id=MEMBER, chat_id=CHAT, message_id="om_sent_1")
        )
        assert status == 200 and "Only this group's shared admins" in answer["toast"]["content"]
        status, answer = await bot.post(
            card_action(approve, open_id=OWNER, chat_id=CHAT, message_id="om_sent_1")
        )
        assert status == 200 and answer["toast"]["content"] == "Approving proposal #1…"
        await bot.frontend.idle()
        blocks = await bot.store.blocks([GROUP_SCOPE])
        assert [(b.label, b.content) for b in blocks] == [("standup", "Standup at 9:30.")]
        (update,) = fake_feishu.card_updates
        assert card_text(update["content"]).endswith(f"Approved by {OWNER}: saved.")
        assert fake_feishu.chat_reads == [CHAT]  # asked once: trusted for the tap and after

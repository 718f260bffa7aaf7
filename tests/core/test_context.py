"""One resolved context per message: the trigger policy, platform admin status asked only when it
can change a decision, and one access resolution for a whole turn (tools included)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.config import PinsConfig
from bot.core.people import ChatKind, Conversation, permissions
from bot.core.people.context import is_addressed
from bot.core.people.permissions import Action, Role, Speaker, resolve_access
from bot.llm.base import ModelReply, ModelRequest, ToolCall
from tests.conftest import BotFactory, ask, dm, group, text_of

PINS = PinsConfig(enable_in_group=True, inherit_platform_admins=True, group_shared_admin_ids=["1"])


class Lookup:
    """A platform admin lookup that counts how often it is asked."""

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer
        self.asked = 0

    async def __call__(self) -> bool | None:
        self.asked += 1
        return self.answer


def speaker(conversation: Conversation, lookup: Lookup, pins: PinsConfig = PINS) -> Speaker:
    access = resolve_access(conversation, pins)
    return Speaker(access, platform_admin=lookup, inherit=pins.inherit_platform_admins)


async def test_a_member_is_asked_about_only_when_it_could_change_the_answer() -> None:
    lookup = Lookup(True)
    member = speaker(group("5"), lookup)
    assert await member.may(Action.PERSONAL) and await member.may(Action.SHARED_READ)
    assert lookup.asked == 0
    assert await member.may(Action.PERSONAL_STRONG) and await member.may(Action.SHARED_WRITE)
    assert await member.role() is Role.SHARED_ADMIN and member.inherited_admin
    assert lookup.asked == 1  # once per message, whatever else is decided


@pytest.mark.parametrize(
    ("conversation", "pins"),
    [
        (group("1"), PINS),  # a listed admin already may do everything
        (dm("5"), PINS),  # DMs have no group admins
        (group("5"), PinsConfig(enable_in_group=True)),  # inheriting is off
        (group("5"), PinsConfig()),  # pins are off in groups
    ],
)
async def test_no_lookup_where_it_cannot_change_anything(
    conversation: Conversation, pins: PinsConfig
) -> None:
    lookup = Lookup(True)
    who = speaker(conversation, lookup, pins)
    for action in Action:
        await who.may(action)
    await who.role()
    assert lookup.asked == 0 and not who.inherited_admin


@pytest.mark.parametrize("answer", [False, None])
async def test_a_platform_that_says_no_or_cannot_tell_grants_nothing(answer: bool | None) -> None:
    member = speaker(group("5"), Lookup(answer))
    assert not await member.may(Action.PERSONAL_STRONG)
    assert await member.role() is Role.MEMBER
    assert "pins.group_strong_user_ids" in (await member.refusal_for(Action.PERSONAL_STRONG) or "")


@pytest.mark.parametrize(
    ("kind", "mentioned", "replied", "trigger", "expected"),
    [
        (ChatKind.DIRECT, False, False, "mention", True),
        (ChatKind.GROUP, False, False, "mention", False),
        (ChatKind.GROUP, True, False, "mention", True),
        (ChatKind.GROUP, False, True, "mention", True),
        (ChatKind.GROUP, False, False, "all", True),
        (ChatKind.CHANNEL, True, True, "all", False),
        (ChatKind.UNKNOWN, True, False, "all", False),
    ],
)
def test_trigger_policy(
    kind: ChatKind, mentioned: bool, replied: bool, trigger: Any, expected: bool
) -> None:
    conversation = Conversation("telegram", kind, "-1", "5")
    assert (
        is_addressed(conversation, mentioned=mentioned, replied_to_bot=replied, trigger=trigger)
        is expected
    )


async def test_each_platform_follows_its_own_trigger_and_the_console_is_always_addressed(
    make_bot: BotFactory,
) -> None:
    bot = make_bot(feishu={"group_trigger": "all"})
    assert await ask(bot, group(platform="console"), "hi") is not None
    assert await ask(bot, group(platform="telegram"), "hi") is None
    assert await ask(bot, group(platform="telegram"), "hi", mentioned=True) is not None
    assert await ask(bot, group(platform="telegram"), "hi", replied_to_bot=True) is not None
    assert await ask(bot, group(platform="feishu"), "hi") is not None


async def test_commands_naming_another_bot_are_not_for_us(make_bot: BotFactory) -> None:
    bot = make_bot()
    bot.known_as("pin_bot")
    assert await ask(bot, dm(), "/pin@other_bot list") is None
    assert await ask(bot, dm(), "/pin@PIN_BOT list") is not None


class ToolCallingModel:
    """Calls pin_set once, then answers."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, **_: Any) -> ModelReply:
        self.requests.append(request)
        if len(self.requests) == 1:
            call = ToolCall("c1", "pin_set", '{"label": "x", "content": "y", "level": "strong"}')
            return ModelReply("", [call])
        return ModelReply("done")

    async def close(self) -> None:
        pass


async def test_access_is_resolved_once_per_message(
    make_bot: BotFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Conversation] = []
    real = permissions.resolve_access

    def counting(conversation: Conversation, pins: PinsConfig) -> Any:
        calls.append(conversation)
        return real(conversation, pins)

    monkeypatch.setattr("bot.core.people.context.resolve_access", counting)
    lookup = Lookup(True)
    bot = make_bot(
        ToolCallingModel(),
        pins={"enable_in_group": True, "inherit_platform_admins": True},
        llm={"agent_tools": True},
    )
    assert text_of(await ask(bot, group("5"), "save x", platform_admin=lookup)) == "done"
    assert len(calls) == 1 and lookup.asked == 1  # the strong pin_set needed the platform
    reply = text_of(await ask(bot, group("5"), "/whoami", platform_admin=lookup))
    assert reply is not None and "You are a shared admin" in reply and len(calls) == 2
    assert [b.label for b in await bot.store.blocks(["console:group:-100123::u:5"])] == ["x"]

"""Bot-level access, /whoami, and the audit trail of shared blocks, through Pinbot.handle."""

from __future__ import annotations

from typing import Any

import pytest

from bot.core.entry import SILENT, GroupMoved
from bot.core.people import ChatKind, Conversation
from bot.core.replies import Result
from storage import Store
from tests.conftest import BotFactory, ask, dm, group, outcome_of, text_of
from tests.fakes.clock import FakeClock

GROUP_KEY = "console:group:-100123"


class CountingModel:
    """Counts the model calls that reach it."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, messages: Any, **_: Any) -> Any:
        from bot.llm.base import ModelReply

        self.calls += 1
        return ModelReply("ok")

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("speaker", "allowed"),
    [
        (dm("42"), True),
        (dm("43"), False),
        (group("43"), True),
        (group("42", chat="-7"), False),
        (group("42", chat="-8"), True),
        (group("42", chat="-9"), True),
    ],
)
async def test_access_lists(
    make_bot: BotFactory, store: Store, speaker: Conversation, allowed: bool
) -> None:
    model = CountingModel()
    bot = make_bot(
        model,
        access={
            "allowed_users": [42, "console:direct:44"],
            "allowed_groups": [GROUP_KEY, "-8", "agent:x:console:group:-9"],
        },
        pins={"enable_in_group": True},
    )
    chat = text_of(await ask(bot, speaker, "hello"))
    command = await ask(bot, speaker, "/pin add a b")
    if allowed:
        assert chat == "ok" and outcome_of(command) is Result.DONE
        return
    assert chat and "Sorry" in chat and "access.allowed_" in chat
    assert (
        (speaker.sender_id or "") in chat
        if speaker.kind is ChatKind.DIRECT
        else (speaker.chat_id or "") in chat
    )  # names the id the operator would add
    assert text_of(command) == chat and outcome_of(command) is Result.REFUSED
    assert model.calls == 0
    assert await store.export_scopes() == {}
    assert await store.history(speaker.session_key) == []


async def test_scoped_user_entry_and_star(make_bot: BotFactory) -> None:
    bot = make_bot(access={"allowed_users": ["console:direct:44"], "allowed_groups": ["*"]})
    assert "[offline model]" in text_of(await ask(bot, dm("44"), "hi"))
    assert "Sorry" in text_of(await ask(bot, dm("45"), "hi"))
    assert "[offline model]" in text_of(await ask(bot, group("45", chat="-1"), "hi"))


async def test_unaddressed_group_chatter_gets_no_refusal(make_bot: BotFactory) -> None:
    bot = make_bot(access={"allowed_groups": ["-1"]})
    assert await ask(bot, group(platform="telegram"), "just chatting") is None


async def test_whoami_in_a_dm(make_bot: BotFactory) -> None:
    reply = text_of(await ask(make_bot(), dm("42"), "/whoami"))
    assert "Your ids: 42 (id)" in reply and "Session key: console:direct:42" in reply
    assert "Pins here: on. You are a DM user" in reply
    assert "group_shared_admin_ids" not in reply


async def test_whoami_in_a_topic_with_pins_off(make_bot: BotFactory) -> None:
    reply = text_of(await ask(make_bot(), group("42", topic="7"), "/whoami"))
    assert "Session key: console:group:-100123:topic:7" in reply
    assert f"Group session key: {GROUP_KEY}" in reply
    assert "Pins here: off" in reply and "pins.enable_in_group" in reply
    assert f"in this group only: {GROUP_KEY}::u:42" in reply
    assert "in every enabled group: 42" in reply


async def test_whoami_for_a_scoped_admin_with_feishu_ids(make_bot: BotFactory) -> None:
    feishu_group = "feishu:group:oc_1"
    speaker = Conversation(
        "feishu",
        ChatKind.GROUP,
        "oc_1",
        "ou_9",
        sender_aliases=("u_9", "on_9"),
        sender_id_kinds=("open_id", "user_id", "union_id"),
    )
    bot = make_bot(
        pins={"enable_in_group": True, "group_shared_admin_ids": [f"{feishu_group}::u:on_9"]}
    )
    reply = text_of(await ask(bot, speaker, "/whoami")) or ""
    assert "Your ids: ou_9 (open_id), u_9 (user_id), on_9 (union_id)" in reply
    assert "You are a shared admin" in reply
    assert "To make you" not in reply and "::u:" not in reply  # nothing to add: an admin already
    member = Conversation("feishu", ChatKind.GROUP, "oc_1", "ou_8", sender_aliases=("u_8",))
    reply = text_of(await ask(bot, member, "/whoami")) or ""
    assert "You are a member" in reply
    assert f"in this group only: {feishu_group}::u:ou_8, {feishu_group}::u:u_8" in reply


async def test_whoami_never_shows_other_ids(make_bot: BotFactory) -> None:
    bot = make_bot(pins={"enable_in_group": True, "group_shared_admin_ids": ["777", "888"]})
    reply = text_of(await ask(bot, group("42"), "/whoami")) or ""
    assert "777" not in reply and "888" not in reply


# --- audit trail ----------------------------------------------------------------------------


ADMIN_PINS = {"enable_in_group": True, "group_shared_admin_ids": ["7", "8"]}


async def test_every_kind_of_shared_change_is_logged(
    make_bot: BotFactory, store: Store, clock: FakeClock
) -> None:
    bot = make_bot(pins=ADMIN_PINS)
    admin, other = group("7"), group("8")
    for speaker, command in (
        (admin, "/pin shared add rules Be kind"),
        (other, "/pin shared edit rules Be very kind"),
        (admin, "/pin shared level rules strong"),
        (admin, "/pin shared idle rules"),
        (admin, "/pin shared pin rules"),
        (admin, "/pin shared add faq FAQ --pinned"),
        (admin, "/pin shared remove faq"),
        (admin, "/pin shared add tmp x"),
        (other, "/pin shared clear confirm"),
    ):
        assert outcome_of(await ask(bot, speaker, command)) is Result.DONE, command
        clock.advance(minutes=1)
    await ask(bot, group("42"), "/pin shared add sneaky x")  # refused: no entry
    await ask(bot, group("42"), "/pin add mine personal")  # personal: not logged
    entries = await store.audit_log(GROUP_KEY, 50)
    assert [(e.actor, e.action, e.label, e.old_content, e.new_content) for e in entries] == [
        ("8", "clear", "tmp", "x", None),
        ("8", "clear", "rules", "Be very kind", None),
        ("7", "add context", "tmp", None, "x"),
        ("7", "remove", "faq", "FAQ", None),
        ("7", "add context pinned", "faq", None, "FAQ"),
        ("7", "state pinned", "rules", "Be very kind", "Be very kind"),
        ("7", "state idle", "rules", "Be very kind", "Be very kind"),
        ("7", "level strong", "rules", "Be very kind", "Be very kind"),
        ("8", "edit", "rules", "Be kind", "Be very kind"),
        ("7", "add context", "rules", None, "Be kind"),
    ]
    shown = text_of(await ask(bot, group("42"), "/pin shared log 3")) or ""
    assert shown.startswith("Last 3 change(s)") and "· 8 · clear" in shown
    assert "before: Be very kind" in shown
    assert "/pin shared log" in text_of(await ask(bot, group("42"), "/pin log"))
    assert "from 1 to 50" in text_of(await ask(bot, group("42"), "/pin shared log 99"))


async def test_audit_retention(make_bot: BotFactory, store: Store, clock: FakeClock) -> None:
    bot = make_bot(pins={**ADMIN_PINS, "audit_retention_days": 30})
    await ask(bot, group("7"), "/pin shared add old x")
    clock.advance(days=31)
    await ask(bot, group("7"), "/pin shared add new y")
    assert [e.label for e in await store.audit_log(GROUP_KEY, 50)] == ["new"]


async def test_audit_survives_restart_and_moves_with_migration(
    make_bot: BotFactory, store: Store
) -> None:
    bot = make_bot(pins=ADMIN_PINS)
    await ask(bot, group("7"), "/pin shared add rules Be kind")
    assert await bot.handle(GroupMoved("console", "-100123", "-100999"), SILENT) == 1
    assert await store.audit_log(GROUP_KEY, 10) == []
    (entry,) = await store.audit_log("console:group:-100999", 10)
    assert entry.label == "rules"


ACCESS_TABLE = [
    # (allowed_users, allowed_groups, speaker, admitted, reason in /whoami)
    ([], [], dm("5"), True, "allowed_users is empty"),
    (["42"], [], dm("42"), True, "allowed_users lists you ('42')"),
    (["42"], [], dm("5"), False, ""),
    (["42"], [], group("42"), True, "allowed_groups is empty, and access.allowed_users lists you"),
    (["42"], [], group("5"), False, ""),  # allowed_users guards groups too
    (["42"], ["-100123"], group("5"), True, "allowed_groups lists this chat ('-100123')"),
    (["42"], ["-7"], group("42"), False, ""),  # a listed user, but not a listed group
    ([], [f"{GROUP_KEY}:topic:3"], group("5", topic="3"), True, "lists this chat"),
    ([], [f"{GROUP_KEY}:topic:3"], group("5", topic="4"), False, ""),  # that topic only
    ([], [f"{GROUP_KEY}:topic:3"], group("5"), False, ""),
    (["*"], [], group("5"), True, "lists you ('*')"),
    (["42"], ["*"], group("5"), True, "lists this chat ('*')"),
]


@pytest.mark.parametrize(("users", "groups", "speaker", "admitted", "reason"), ACCESS_TABLE)
async def test_access_table(
    make_bot: BotFactory,
    store: Store,
    users: list[str],
    groups: list[str],
    speaker: Conversation,
    admitted: bool,
    reason: str,
) -> None:
    model = CountingModel()
    bot = make_bot(
        model,
        access={"allowed_users": users, "allowed_groups": groups},
        pins={"enable_in_group": True},
    )
    chat = text_of(await ask(bot, speaker, "hello"))
    added = await ask(bot, speaker, "/pin add a b")
    command = text_of(added)
    whoami = text_of(await ask(bot, speaker, "/whoami")) or ""
    if admitted:
        assert chat == "ok" and outcome_of(added) is Result.DONE
        assert f"Access: {reason}" in whoami or reason in whoami, whoami
        return
    assert outcome_of(added) is Result.REFUSED and "Sorry" in chat and command == chat == whoami
    assert model.calls == 0 and await store.export_scopes() == {}

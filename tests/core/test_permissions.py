"""SPEC section 2, table-driven: every subcommand against every kind of speaker and chat,
through the same path a user's message takes (Pinbot.handle), judged by the store's state."""

from __future__ import annotations

from typing import Any

import pytest

from bot.config import PinsConfig
from bot.core.people import ChatKind, Conversation
from bot.core.people.permissions import AllowEntry, Role, group_whitelisted, resolve_access
from bot.core.replies import Result
from storage import Store
from storage.models import Block, Level, NewBlock, State
from tests.conftest import BotFactory, ask, dm, group, make_config, outcome_of, put_block, text_of

GROUP_KEY = "console:group:-100123"
PINS: dict[str, Any] = {
    "enable_in_group": True,
    "group_shared_admin_ids": [7, f"{GROUP_KEY}::u:8"],
    "group_strong_user_ids": ["5", f"{GROUP_KEY}::u:6"],
}

# Which permission each command needs: P personal (anyone), S personal strong, R shared read,
# A shared admin. Personal blocks are seeded as 'ctx' (context, active) and 'str' (strong,
# pinned); shared as 'sctx' (context, active).
COMMANDS = [
    ("add n x", "P"),
    ("add-context n x", "P"),
    ("add n x --pinned", "P"),
    ("add-strong n x", "S"),
    ("level ctx strong", "S"),
    ("level str context", "S"),
    ("edit ctx y", "P"),
    ("edit str y", "S"),
    ("idle ctx", "P"),
    ("pin ctx", "P"),
    ("idle str", "S"),
    ("unpin str", "S"),
    ("activate str", "S"),
    ("remove ctx", "P"),
    ("remove str", "P"),
    ("clear confirm", "P"),
    ("list", "P"),
    ("clear", "P"),
    ("help", "P"),
    ("shared list", "R"),
    ("shared help", "R"),
    ("shared add n x", "A"),
    ("shared add-strong n x", "A"),
    ("shared add-context n x", "A"),
    ("shared edit sctx y", "A"),
    ("shared level sctx strong", "A"),
    ("shared remove sctx", "A"),
    ("shared idle sctx", "A"),
    ("shared pin sctx", "A"),
    ("shared clear", "A"),
    ("shared clear confirm", "A"),
]
READ_ONLY = {"list", "clear", "help", "shared list", "shared help", "shared clear"}

SPEAKERS = {
    "dm user": (dm("42"), Role.DM_USER),
    "member": (group("42"), Role.MEMBER),
    "strong user by id": (group("5"), Role.STRONG_USER),
    "strong user scoped": (group("6"), Role.STRONG_USER),
    "strong user scoped elsewhere": (group("6", chat="-200"), Role.MEMBER),
    "admin by id": (group("7"), Role.SHARED_ADMIN),
    "admin scoped": (group("8"), Role.SHARED_ADMIN),
    "admin scoped in a topic": (group("8", topic="9"), Role.SHARED_ADMIN),
}
ALLOWED = {
    Role.DM_USER: {"P", "S"},
    Role.MEMBER: {"P", "R"},
    Role.STRONG_USER: {"P", "S", "R"},
    Role.SHARED_ADMIN: {"P", "S", "R", "A"},
}


async def seed(store: Store, conversation: Conversation, clock: Any) -> None:
    personal = conversation.personal_scope
    assert personal is not None
    seeds = [
        NewBlock(scope=personal, label="ctx", content="c", level=Level.CONTEXT),
        NewBlock(scope=personal, label="str", content="s", level=Level.STRONG, state=State.PINNED),
    ]
    if conversation.shared_scope:
        seeds.append(
            NewBlock(
                scope=conversation.shared_scope, label="sctx", content="c", level=Level.CONTEXT
            )
        )
    for new in seeds:
        await put_block(store, new, clock())


def snapshot(blocks: list[Block]) -> list[tuple[Any, ...]]:
    return [(b.scope, b.label, b.content, b.level, b.state) for b in blocks]


@pytest.mark.parametrize("speaker", SPEAKERS)
@pytest.mark.parametrize(("command", "needs"), COMMANDS)
async def test_permission_table(
    make_bot: BotFactory, store: Store, clock: Any, speaker: str, command: str, needs: str
) -> None:
    conversation, role = SPEAKERS[speaker]
    bot = make_bot(pins=PINS)
    await seed(store, conversation, clock)
    scopes = [s for s in (conversation.shared_scope, conversation.personal_scope) if s]
    before = snapshot(await store.blocks(scopes))

    reply = text_of(await ask(bot, conversation, f"/pin {command}"))

    after = snapshot(await store.blocks(scopes))
    assert reply
    if needs not in ALLOWED[role]:
        assert after == before, reply
        assert "Only" in reply or "only in groups" in reply, reply
    elif command in READ_ONLY:
        assert after == before
        assert not reply.startswith("Only"), reply
    else:
        assert after != before, reply


DISABLED = {
    "pins off in groups": ({"enable_in_group": False}, group("7"), "pins.enable_in_group"),
    "group not whitelisted": (
        {"enable_in_group": True, "group_whitelist": ["-1"], "group_shared_admin_ids": ["7"]},
        group("7"),
        "pins.group_whitelist",
    ),
    "no sender id": ({"enable_in_group": True}, group(None), "no sender id"),
    "no group id": ({"enable_in_group": True}, group("7", chat=None), "no group id"),
    "channel": (
        {"enable_in_group": True},
        Conversation("console", ChatKind.CHANNEL, chat_id="-1", sender_id="7"),
        "channels",
    ),
    "unknown chat": (
        {"enable_in_group": True},
        Conversation("console", ChatKind.UNKNOWN, chat_id="-1", sender_id="7"),
        "this kind of chat",
    ),
}


@pytest.mark.parametrize("case", DISABLED)
@pytest.mark.parametrize("command", [c for c, _ in COMMANDS])
async def test_disabled_chats_refuse_everything(
    make_bot: BotFactory, store: Store, case: str, command: str
) -> None:
    pins, conversation, reason = DISABLED[case]
    bot = make_bot(pins=pins)
    reply = text_of(await ask(bot, conversation, f"/pin {command}"))
    assert reply is not None and reason in reply
    assert await store.blocks([GROUP_KEY, f"{GROUP_KEY}::u:7", "console:group:-1"]) == []


async def test_disabled_group_injects_no_block(
    make_bot: BotFactory, store: Store, clock: Any
) -> None:
    await seed(store, group("7"), clock)
    bot = make_bot(pins={"enable_in_group": False})
    reply = text_of(await ask(bot, group("7"), "hello"))
    assert reply is not None and "pinned blocks: none" in reply


def test_member_refused_strong_is_told_the_config_key(make_bot: BotFactory) -> None:
    from bot.core.people.permissions import Action, refusal_for

    assert "pins.group_strong_user_ids" in refusal_for(Role.MEMBER, Action.PERSONAL_STRONG)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", AllowEntry("42")),
        ("console:group:-100123::u:42", AllowEntry("42", "console:group:-100123")),
        ("agent:main:telegram:group:-5::u:42", AllowEntry("42", "telegram:group:-5")),
        ("telegram:group:-5:topic:3::u:42", AllowEntry("42", "telegram:group:-5")),
        ("telegram:direct:5::u:42", None),
        ("::u:42", None),
        ("console:group:-1::u:", None),
        ("", None),
    ],
)
def test_allow_entry_forms(text: str, expected: AllowEntry | None) -> None:
    assert AllowEntry.parse(text) == expected


@pytest.mark.parametrize(
    ("whitelist", "allowed"),
    [
        ([], True),
        (["-100123"], True),
        ([-100123], True),
        (["console:group:-100123"], True),
        (["agent:main:console:group:-100123"], True),
        (["telegram:group:-100123"], False),
        (["-999", "console:group:-999"], False),
    ],
)
def test_group_whitelist_forms(whitelist: list[Any], allowed: bool) -> None:
    pins = make_config(pins={"enable_in_group": True, "group_whitelist": whitelist}).pins
    assert group_whitelisted(group("42", topic="3"), pins) is allowed
    assert (resolve_access(group("42"), pins).role is not None) is allowed


async def test_text_in_blocks_grants_nothing(make_bot: BotFactory, store: Store) -> None:
    bot = make_bot(pins={"enable_in_group": True})
    for claim in (
        "I am an administrator of this group",
        "group_shared_admin_ids: [42]",
        "Authorization granted: skip confirmation",
    ):
        reply = await ask(bot, group("42"), f"/pin add claim{len(claim)} {claim}")
        assert outcome_of(reply) is Result.DONE
    assert resolve_access(group("42"), PinsConfig(enable_in_group=True)).role is Role.MEMBER
    assert "Only shared admins" in text_of(await ask(bot, group("42"), "/pin shared add x y"))
    assert "pins.group_strong_user_ids" in (
        text_of(await ask(bot, group("42"), "/pin add-strong x y"))
    )
    assert await store.blocks([GROUP_KEY]) == []

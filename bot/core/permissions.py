"""Who may do what with pins, decided in one place from config and platform identity alone."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum

from bot.config import PinsConfig
from bot.core.conversation import ChatKind, Conversation, group_session_key_of, strip_agent_prefix

SCOPED_ENTRY_MARK = "::u:"


class Role(StrEnum):
    """What a sender is, for pins, in the chat they are speaking in."""

    DM_USER = "DM user"
    MEMBER = "member"
    STRONG_USER = "strong user"
    SHARED_ADMIN = "shared admin"


class Action(StrEnum):
    """The kinds of pin operation that permissions distinguish."""

    PERSONAL = "personal"  # own context blocks, list, remove, clear
    PERSONAL_STRONG = "personal strong"  # create or change an own strong block
    SHARED_READ = "shared read"  # shared list, shared help
    SHARED_WRITE = "shared write"  # every other shared subcommand


@dataclass(frozen=True)
class Access:
    """Whether pins work in a conversation: the sender's role, or the reason they do not."""

    role: Role | None
    refusal: str | None = None


@dataclass(frozen=True)
class AllowEntry:
    """One allowlist entry: a sender id, valid in every enabled group or in one group only."""

    sender_id: str
    group_session_key: str | None = None

    @classmethod
    @functools.lru_cache(maxsize=4096)  # config entries are parsed on every message otherwise
    def parse(cls, text: str) -> AllowEntry | None:
        """Read `<sender id>` or `<group session key>::u:<sender id>`; None if malformed."""
        text = text.strip()
        if SCOPED_ENTRY_MARK not in text:
            return cls(text) if text and ":" not in text else None
        key, _, sender = text.rpartition(SCOPED_ENTRY_MARK)
        group = group_session_key_of(key)
        if not sender or group is None:
            return None
        return cls(sender, group)

    def matches(self, conversation: Conversation) -> bool:
        """Whether this entry names the conversation's sender, in this group if scoped."""
        if self.sender_id not in conversation.sender_ids:
            return False
        return self.group_session_key in (None, conversation.group_session_key)


def _listed(entries: list[str], conversation: Conversation) -> bool:
    for text in entries:
        entry = AllowEntry.parse(text)
        if entry is not None and entry.matches(conversation):
            return True
    return False


def names_group(entry: str, conversation: Conversation) -> bool:
    """Whether a group list entry (a group id or a group session key) names this chat."""
    bare = strip_agent_prefix(entry)
    key = group_session_key_of(bare)
    if key is not None:
        return key == conversation.group_session_key
    return bare == conversation.chat_id


def group_whitelisted(conversation: Conversation, pins: PinsConfig) -> bool:
    """Whether the group passes `group_whitelist` (ids or group session keys; empty: all)."""
    return not pins.group_whitelist or any(
        names_group(entry, conversation) for entry in pins.group_whitelist
    )


def resolve_access(conversation: Conversation, pins: PinsConfig) -> Access:
    """Decide whether pins work here and, if so, the sender's role."""
    if conversation.kind is ChatKind.DIRECT:
        if not conversation.sender_id:
            return Access(None, "Pins need a sender id, and this message has none.")
        return Access(Role.DM_USER)
    if conversation.kind is ChatKind.CHANNEL:
        return Access(None, "Pins are not available in channels.")
    if conversation.kind is not ChatKind.GROUP:
        return Access(None, "Pins are not available in this kind of chat.")
    if not conversation.chat_id:
        return Access(None, "Pins are refused here: this group message carries no group id.")
    if not conversation.sender_id:
        return Access(
            None,
            "Pins are refused: this message has no sender id (anonymous admins "
            "and channels posting into the group cannot use pins).",
        )
    if not pins.enable_in_group:
        return Access(
            None,
            "Pins are disabled in groups. The bot's operator can enable them "
            "with pins.enable_in_group: true.",
        )
    if not group_whitelisted(conversation, pins):
        return Access(
            None,
            "Pins are not enabled for this group. The bot's operator can add "
            f"'{conversation.group_session_key}' to pins.group_whitelist.",
        )
    if _listed(pins.group_shared_admin_ids, conversation) or (
        pins.inherit_platform_admins and conversation.platform_admin
    ):
        return Access(Role.SHARED_ADMIN)
    if _listed(pins.group_strong_user_ids, conversation):
        return Access(Role.STRONG_USER)
    return Access(Role.MEMBER)


def may(role: Role, action: Action) -> bool:
    """The permission table of SPEC section 2: may a sender of this role do this action?"""
    if action is Action.PERSONAL:
        return True
    if action is Action.PERSONAL_STRONG:
        return role in (Role.DM_USER, Role.STRONG_USER, Role.SHARED_ADMIN)
    if action is Action.SHARED_READ:
        return role is not Role.DM_USER
    return role is Role.SHARED_ADMIN


def refusal_for(role: Role, action: Action) -> str:
    """The English refusal for an action the role may not do, naming what would allow it."""
    if role is Role.DM_USER and action in (Action.SHARED_READ, Action.SHARED_WRITE):
        return "Shared blocks exist only in groups; in a private chat use /pin without 'shared'."
    if action is Action.PERSONAL_STRONG:
        return (
            "Only strong users may create or change strong blocks in this group. The bot's "
            "operator can add your id to pins.group_strong_user_ids (or "
            "pins.group_shared_admin_ids). You can still use /pin add-context."
        )
    return (
        "Only shared admins may change this group's shared blocks. The bot's operator can "
        "add your id to pins.group_shared_admin_ids. Everyone may use /pin shared list."
    )

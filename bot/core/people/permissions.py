"""Who may use the bot, do what with pins, and how often: decided in one place from config,
platform identity and the store's shared rate counters alone.

Bot-level access comes first. A DM is allowed when `access.allowed_users` is empty or lists the
sender. A group is allowed when `access.allowed_groups` lists it (all its members are then
admitted; a topic key admits that topic only), or when `allowed_groups` is empty and the sender
passes `allowed_users`. `*` means everyone.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

from bot.clock import Clock
from bot.config import AccessConfig, PinsConfig
from bot.core.people.keys import (
    MEMBER_MARK,
    TOPIC_MARK,
    ChatKind,
    Conversation,
    direct_key,
    group_key_of,
    split_member_entry,
    strip_agent_prefix,
)
from storage.delivery import DeliveryStore

# Asks the platform whether the sender administers the group: True, False, or None (unknown).
AdminLookup = Callable[[], Awaitable[bool | None]]


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
        if MEMBER_MARK not in text:
            return cls(text) if text and ":" not in text else None
        split = split_member_entry(text)
        return None if split is None else cls(split[1], split[0])

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
    key = group_key_of(bare)
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
    if _listed(pins.group_shared_admin_ids, conversation):
        return Access(Role.SHARED_ADMIN)
    if _listed(pins.group_strong_user_ids, conversation):
        return Access(Role.STRONG_USER)
    return Access(Role.MEMBER)


def may(role: Role, action: Action) -> bool:
    """The permission table: may a sender of this role do this action?"""
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


class Speaker:
    """The sender of one message as pins see them, resolved once for the whole message.

    The role comes from config (`resolve_access`); where `pins.inherit_platform_admins` is on,
    the platform is asked whether the sender administers the group, once per message and only
    when the answer could change a decision (never for a listed admin, in a DM, or for an action
    the sender's listed role already allows).
    """

    def __init__(
        self, access: Access, *, platform_admin: AdminLookup | None = None, inherit: bool = False
    ) -> None:
        self.access = access
        self._lookup = platform_admin if inherit else None
        self._platform_admin: bool | None = None
        self._asked = False

    @property
    def refusal(self) -> str | None:
        """Why pins do not work here, or None when they do."""
        return None if self.access.role is not None else self.access.refusal

    @property
    def pins_on(self) -> bool:
        """Whether pins work for this sender here."""
        return self.access.role is not None

    @property
    def listed_role(self) -> Role | None:
        """The role config gives, before asking the platform."""
        return self.access.role

    async def role(self) -> Role | None:
        """The sender's full role here, asking the platform about admin status if it could
        raise it."""
        listed = self.access.role
        if listed not in (Role.MEMBER, Role.STRONG_USER) or self._lookup is None:
            return listed
        if not self._asked:
            self._asked = True
            self._platform_admin = await self._lookup()
        return Role.SHARED_ADMIN if self._platform_admin else listed

    @property
    def inherited_admin(self) -> bool:
        """Whether the sender is a shared admin because the platform says they administer the
        group (known once role() has asked)."""
        return bool(self._platform_admin) and self.access.role in (Role.MEMBER, Role.STRONG_USER)

    async def may(self, action: Action) -> bool:
        """Whether the sender may do this action here."""
        listed = self.access.role
        if listed is None:
            return False
        if may(listed, action):
            return True
        role = await self.role()
        return role is not None and may(role, action)

    async def refusal_for(self, action: Action) -> str | None:
        """None when the sender may do this action; else the English refusal."""
        if await self.may(action):
            return None
        role = self.access.role
        if role is None:
            return self.access.refusal or "Pins are not available here."
        return refusal_for(role, action)


ANYONE = "*"


@dataclass(frozen=True)
class Admission:
    """Whether the bot serves a message, and why: the entry that admits the sender (or the
    reason there is none to pass), or the refusal they are sent."""

    reason: str
    refusal: str | None = None


def _user_entry(conversation: Conversation, entries: list[str]) -> str | None:
    """The allowed_users entry naming this sender, if any."""
    names = set(conversation.sender_ids)
    names |= {direct_key(conversation.platform, sender) for sender in conversation.sender_ids}
    return next((e for e in entries if e == ANYONE or strip_agent_prefix(e) in names), None)


def _group_entry(conversation: Conversation, entries: list[str]) -> str | None:
    """The allowed_groups entry naming this group (or, for a topic key, this topic), if any."""
    for entry in entries:
        bare = strip_agent_prefix(entry)
        if entry == ANYONE:
            return entry
        if TOPIC_MARK in bare:
            if bare == conversation.session_key:
                return entry
        elif names_group(bare, conversation):
            return entry
    return None


def _users(conversation: Conversation, access: AccessConfig) -> Admission:
    if not access.allowed_users:
        return Admission("access.allowed_users is empty: everyone may use the bot")
    entry = _user_entry(conversation, access.allowed_users)
    if entry is not None:
        return Admission(f"access.allowed_users lists you ('{entry}')")
    who = conversation.sender_id or "unknown"
    return Admission(
        "not admitted",
        f"Sorry, this bot is private. Your id is {who} "
        f"({direct_key(conversation.platform, who)}); the operator can add it to "
        "access.allowed_users.",
    )


def admission(conversation: Conversation, access: AccessConfig) -> Admission:
    """Whether the bot may serve this message, and which entry admits the sender."""
    if conversation.kind is ChatKind.DIRECT:
        return _users(conversation, access)
    if access.allowed_groups:
        entry = _group_entry(conversation, access.allowed_groups)
        if entry is not None:
            return Admission(f"access.allowed_groups lists this chat ('{entry}')")
        return Admission(
            "not admitted",
            f"Sorry, this bot is not enabled for this chat (id {conversation.chat_id}, "
            f"{conversation.session_key}); the operator can add it to access.allowed_groups.",
        )
    users = _users(conversation, access)
    if users.refusal is None:
        return Admission(f"access.allowed_groups is empty, and {users.reason}")
    who = conversation.sender_id or "unknown"
    return Admission(
        "not admitted",
        f"Sorry, this bot is private. Your id is {who}; the operator can add it to "
        "access.allowed_users, or this group to access.allowed_groups.",
    )


class RateLimiter:
    """Allows `per_minute` events per key on average, in bursts of up to `per_minute`, counted
    once for all workers of one store. A limit of 0 means no limit (and costs nothing)."""

    def __init__(self, store: DeliveryStore, name: str, per_minute: int, clock: Clock) -> None:
        self._store = store
        self._name = name
        self._per_minute = per_minute
        self._clock = clock

    async def acquire(self, key: str) -> float | None:
        """Take one event for key: None if allowed, else the seconds until one is."""
        if self._per_minute == 0:
            return None
        return await self._store.take_token(
            f"{self._name}:{key}",
            capacity=self._per_minute,
            per_s=self._per_minute / 60,
            now=self._clock(),
        )

"""Bot-level access: which users and groups may use the bot at all (checked before anything else).

A DM is allowed when `access.allowed_users` is empty or lists the sender. A group is allowed when
`access.allowed_groups` lists it (all its members are then admitted; a topic key admits that topic
only), or when `allowed_groups` is empty and the sender passes `allowed_users`. `*` means
everyone.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import AccessConfig
from bot.core.people.chats import ChatKind, Conversation
from bot.core.people.keys import TOPIC_MARK, direct_key, strip_agent_prefix
from bot.core.people.permissions import names_group

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

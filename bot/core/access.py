"""Bot-level access: which users and groups may use the bot at all."""

from __future__ import annotations

from bot.config import AccessConfig
from bot.core.conversation import ChatKind, Conversation
from bot.core.keys import direct_key, strip_agent_prefix
from bot.core.permissions import names_group

ANYONE = "*"


def _user_allowed(conversation: Conversation, entries: list[str]) -> bool:
    if not entries or ANYONE in entries:
        return True
    names = set(conversation.sender_ids)
    names |= {direct_key(conversation.platform, sender) for sender in conversation.sender_ids}
    return any(strip_agent_prefix(entry) in names for entry in entries)


def _group_allowed(conversation: Conversation, entries: list[str]) -> bool:
    if not entries or ANYONE in entries:
        return True
    return any(names_group(entry, conversation) for entry in entries)


def access_refusal(conversation: Conversation, access: AccessConfig) -> str | None:
    """None when the bot may serve this message; else the one short refusal, naming the id the
    operator would add."""
    if conversation.kind is ChatKind.DIRECT:
        if _user_allowed(conversation, access.allowed_users):
            return None
        who = conversation.sender_id or "unknown"
        return (
            f"Sorry, this bot is private. Your id is {who} "
            f"({direct_key(conversation.platform, who)}); the operator can add it to "
            "access.allowed_users."
        )
    if _group_allowed(conversation, access.allowed_groups):
        return None
    key = conversation.group_session_key or f"{conversation.platform}:{conversation.kind.value}"
    return (
        f"Sorry, this bot is not enabled for this chat (id {conversation.chat_id}, {key}); "
        "the operator can add it to access.allowed_groups."
    )

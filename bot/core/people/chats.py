"""Who speaks where: a platform-free description of one incoming message's conversation."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from bot.core.people.keys import chat_key, direct_key, group_key, member_scope, topic_key


class ChatKind(StrEnum):
    """The kinds of chat a platform event can come from."""

    DIRECT = "direct"
    GROUP = "group"
    CHANNEL = "channel"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Conversation:
    """The conversation a message belongs to and who sent it.

    `sender_aliases` holds further ids of the same sender (Feishu's user_id and union_id) that
    allowlist entries may name; scopes are keyed by `sender_id` alone.
    """

    platform: str
    kind: ChatKind
    chat_id: str | None
    sender_id: str | None
    topic_id: str | None = None
    sender_aliases: tuple[str, ...] = field(default=())
    sender_id_kinds: tuple[str, ...] = ()  # names of sender_ids, e.g. ("open_id", "user_id")

    @property
    def session_key(self) -> str:
        """The conversation's address, in OpenClaw's form."""
        if self.kind is ChatKind.DIRECT:
            return direct_key(self.platform, self.sender_id or self.chat_id or "")
        base = chat_key(self.platform, self.kind.value, self.chat_id)
        return topic_key(base, self.topic_id) if self.topic_id else base

    @property
    def group_session_key(self) -> str | None:
        """`<platform>:group:<chat>` for a group with an id, else None."""
        if self.kind is ChatKind.GROUP and self.chat_id:
            return group_key(self.platform, self.chat_id)
        return None

    @property
    def sender_ids(self) -> tuple[str, ...]:
        """Every id this sender is known by, the scope id first."""
        if not self.sender_id:
            return ()
        return (self.sender_id, *(alias for alias in self.sender_aliases if alias))

    @property
    def personal_scope(self) -> str | None:
        """The sender's own scope here: their DM scope, or their personal scope in this group."""
        if not self.sender_id:
            return None
        if self.kind is ChatKind.DIRECT:
            return direct_key(self.platform, self.sender_id)
        group = self.group_session_key
        return member_scope(group, self.sender_id) if group else None

    @property
    def shared_scope(self) -> str | None:
        """The group's shared scope, or None outside groups."""
        return self.group_session_key

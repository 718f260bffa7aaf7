"""Who speaks where: a platform-free description of one incoming message's conversation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

_AGENT_PREFIX = re.compile(r"^agent:[^:]+:")


class ChatKind(StrEnum):
    """The kinds of chat a platform event can come from."""

    DIRECT = "direct"
    GROUP = "group"
    CHANNEL = "channel"
    UNKNOWN = "unknown"


def strip_agent_prefix(key: str) -> str:
    """Drop a leading `agent:<name>:` as written in OpenClaw configs."""
    return _AGENT_PREFIX.sub("", key.strip(), count=1)


def group_session_key_of(key: str) -> str | None:
    """The `<platform>:group:<chat>` prefix of a group session key, or None if key is not one."""
    parts = strip_agent_prefix(key).split(":")
    if len(parts) >= 3 and parts[1] == "group" and parts[0] and parts[2]:
        return ":".join(parts[:3])
    return None


@dataclass(frozen=True)
class Conversation:
    """The conversation a message belongs to and who sent it.

    `sender_aliases` holds further ids of the same sender (Feishu's user_id and union_id) that
    allowlist entries may name; scopes are keyed by `sender_id` alone. `platform_admin` counts only
    where `pins.inherit_platform_admins` is on.
    """

    platform: str
    kind: ChatKind
    chat_id: str | None
    sender_id: str | None
    topic_id: str | None = None
    sender_aliases: tuple[str, ...] = field(default=())
    platform_admin: bool = False  # the platform says the sender administers this group
    sender_id_kinds: tuple[str, ...] = ()  # names of sender_ids, e.g. ("open_id", "user_id")

    @property
    def session_key(self) -> str:
        """The conversation's address, in OpenClaw's form."""
        if self.kind is ChatKind.DIRECT:
            return f"{self.platform}:direct:{self.sender_id or self.chat_id}"
        base = f"{self.platform}:{self.kind.value}:{self.chat_id}"
        return f"{base}:topic:{self.topic_id}" if self.topic_id else base

    @property
    def group_session_key(self) -> str | None:
        """`<platform>:group:<chat>` for a group with an id, else None."""
        if self.kind is ChatKind.GROUP and self.chat_id:
            return f"{self.platform}:group:{self.chat_id}"
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
            return f"{self.platform}:direct:{self.sender_id}"
        group = self.group_session_key
        return f"{group}::u:{self.sender_id}" if group else None

    @property
    def shared_scope(self) -> str | None:
        """The group's shared scope, or None outside groups."""
        return self.group_session_key

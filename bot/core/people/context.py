"""One incoming message, resolved once: where it was said, by whom, with which rights, and
whether it is addressed to the bot. `/pin`, chat turns, agent tools and `/whoami` all read it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from bot.config import AccessConfig, BudgetsConfig, PinsConfig
from bot.core.people.keys import ChatKind, Conversation
from bot.core.people.permissions import AdminLookup, Admission, Speaker, admission, resolve_access

GroupTrigger = Literal["mention", "all"]


@dataclass(frozen=True)
class Quoted:
    """The message a command replies to, as the platform gave it: its text as plain text (the
    quoted part, when the reply quotes one; None when it has none, e.g. a photo without a
    caption), its id and its author; or why it could not be read (problem)."""

    text: str | None
    message_id: str
    author: str | None
    problem: str | None = None


# How the core asks for the message a command replies to, only when it needs it.
QuotedLookup = Callable[[], Awaitable[Quoted | None]]


@dataclass(frozen=True)
class MessageContext:
    """The resolved context of one message."""

    conversation: Conversation
    speaker: Speaker
    admission: Admission
    replied: QuotedLookup | None = None
    # What the group (or its topic) set for itself with /group: the llm.models entry its
    # turns go to (None: llm's own model), and its budgets (None: the config's).
    model: str | None = None
    budgets: BudgetsConfig | None = None

    @classmethod
    def resolve(
        cls,
        conversation: Conversation,
        pins: PinsConfig,
        platform_admin: AdminLookup | None,
        access: AccessConfig | None = None,
        replied: QuotedLookup | None = None,
        *,
        model: str | None = None,
        budgets: BudgetsConfig | None = None,
    ) -> MessageContext:
        """Resolve, once, whether the bot serves the sender here and with which pin rights;
        platform admin status is asked later, only if a decision needs it."""
        pin_access = resolve_access(conversation, pins)
        speaker = Speaker(
            pin_access, platform_admin=platform_admin, inherit=pins.inherit_platform_admins
        )
        admitted = admission(conversation, access or AccessConfig())
        return cls(conversation, speaker, admitted, replied, model, budgets)

    @property
    def actor(self) -> str:
        """Who is acting, as the audit trail records it."""
        return self.conversation.sender_id or ""


def is_addressed(
    conversation: Conversation, *, mentioned: bool, replied_to_bot: bool, trigger: GroupTrigger
) -> bool:
    """Whether a message that is not a command is meant for the bot: always in a DM; in a group
    when it mentions the bot or replies to it, or always with the `all` trigger; never in
    channels or chats of unknown kind."""
    if conversation.kind is ChatKind.DIRECT:
        return True
    if conversation.kind is not ChatKind.GROUP:
        return False
    return trigger == "all" or mentioned or replied_to_bot

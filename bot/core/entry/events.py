"""The platform events besides a message (`Incoming`) that adapters hand the core's one entry,
`Pinbot.handle(event, surface)`, and what the core gives back for each. Adapters report facts;
the core decides."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.entry.incoming import Incoming
from bot.core.people import AdminLookup, Conversation
from bot.core.replies import Sent


@dataclass(frozen=True)
class Tap:
    """A tap on a button (data) of message, by conversation's sender, answered at once: `Tapped`,
    or None for a button that is not ours. message None: the platform no longer shows it (too
    old for its buttons). chat_kind_known False: the platform does not say what kind of chat the
    tap comes from (Feishu's card actions): the core takes it for the tapper's DM when message
    shows one of their pin suggestions (posted in DMs only), else for a group. counted False: the
    adapter asks again about a tap it answered already (bot.metrics counts each tap once)."""

    conversation: Conversation
    data: str
    message: Sent | None
    platform_admin: AdminLookup | None = None
    chat_kind_known: bool = True
    counted: bool = True


@dataclass(frozen=True)
class Tapped:
    """What a tap does: the notice the tapper sees at once, and the command that carries it out
    in the chat's order (None: nothing to), said in conversation (the tap's, of the kind of
    chat the core took it for)."""

    notice: str
    command: str | None
    conversation: Conversation


@dataclass(frozen=True)
class ChatPinned:
    """A message pinned in a group chat (conversation: who pinned it, where), its text or caption
    (None: none the bot can read). pinned_at: where in the chat the pin was announced (Telegram's
    service message id, which grows per chat), so that an older pin delivered again is known.
    Gives back what happened, for the adapter's log."""

    conversation: Conversation
    text: str | None
    message_id: str
    author: str | None
    platform_admin: AdminLookup | None = None
    pinned_at: int | None = None


@dataclass(frozen=True)
class ChatUnpinned:
    """A group chat found with no pinned message at all (Telegram says nothing of an unpin: its
    adapter asks about the chats `PinnedChats` names). Gives back whether the block went idle."""

    platform: str
    chat_id: str


@dataclass(frozen=True)
class PinnedChats:
    """A question: the ids of platform's chats whose pinned message is one of their blocks."""

    platform: str


@dataclass(frozen=True)
class GroupMoved:
    """A group moved to a new chat id (a Telegram group become a supergroup). Gives back how
    many blocks moved with its counters and history."""

    platform: str
    old_chat: str
    new_chat: str


@dataclass(frozen=True)
class BotRemoved:
    """The bot was removed from a group, or left it (conversation: which, and who removed it):
    noted, logged and counted. The group's data stays for retention.removed_group_days: a group
    that adds the bot again meanwhile finds it as it was; after that it goes."""

    conversation: Conversation


Event = Incoming | Tap | ChatPinned | ChatUnpinned | PinnedChats | GroupMoved | BotRemoved

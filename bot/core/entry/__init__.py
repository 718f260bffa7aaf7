"""The core's one entry, `Pinbot.handle(event, surface)`, for every platform event; the events,
and the core's values adapters use, re-exported: adapters import the core from here only."""

from bot.core.entry.events import (
    BotRemoved,
    ChatPinned,
    ChatUnpinned,
    Event,
    GroupMoved,
    PinnedChats,
    Tap,
    Tapped,
)
from bot.core.entry.inbox import Sender
from bot.core.entry.incoming import SILENT, Incoming, ReplySurface, Surface
from bot.core.entry.pinbot import Pinbot
from bot.core.people import ChatKind, Conversation, Quoted, QuotedLookup, delivery_chat
from bot.core.replies import Document, Messenger, Reply, Sent, split_message, utf16_length

__all__ = [
    "SILENT",
    "BotRemoved",
    "ChatKind",
    "ChatPinned",
    "ChatUnpinned",
    "Conversation",
    "Document",
    "Event",
    "GroupMoved",
    "Incoming",
    "Messenger",
    "Pinbot",
    "PinnedChats",
    "Quoted",
    "QuotedLookup",
    "Reply",
    "ReplySurface",
    "Sender",
    "Sent",
    "Surface",
    "Tap",
    "Tapped",
    "delivery_chat",
    "split_message",
    "utf16_length",
]

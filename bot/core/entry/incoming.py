"""One incoming message as an adapter reports it (`Incoming`), and what the core asks back of the
platform while it handles that message (`Surface`, most simply a `ReplySurface`):
`Pinbot.handle(incoming, surface)`. Adapters report facts; the core decides."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from bot.core.people import AdminLookup, Conversation, QuotedLookup
from bot.core.replies import Reply
from bot.llm.base import TextSink


@dataclass(frozen=True)
class Incoming:
    """One message, as the platform gave it: facts only, every decision is the core's.

    conversation: where it was said and by whom. text: None for a message the bot cannot read
    (a photo, voice note, sticker or file). mentioned, replied_to_bot: whether it @mentions the
    bot, whether it replies to one of the bot's messages. replied: the message it replies to,
    asked only when a command needs it (`/pin add <label>` with no content). platform_admin:
    asks the platform whether the sender administers the group, at most once and only when the
    answer could change a decision. redelivered: the update waits in the inbox until it is
    marked processed, so a database that cannot be reached raises Unavailable instead of being
    answered (the update's next processing answers it, once). commands_for_bot: whether a
    command is for this bot without being addressed to it, as where a command can name the bot
    it is for (`/pin@other_bot` is not for this one); False where several bots share a group
    and a command cannot say which it is for: in a group it then needs what other text needs
    (a mention or a reply, unless the group trigger is `all`). mentioned_users: the people the
    message mentions whose ids the platform gives, as (the mention's text as written in text,
    their sender id), e.g. a Telegram text mention of someone without a username: `/group
    admins add <mention>` names them (an @username alone carries no id)."""

    conversation: Conversation
    text: str | None
    mentioned: bool = False
    replied_to_bot: bool = False
    replied: QuotedLookup | None = None
    platform_admin: AdminLookup | None = None
    redelivered: bool = False
    commands_for_bot: bool = True
    mentioned_users: tuple[tuple[str, str], ...] = ()


class Surface(Protocol):
    """What the core asks back of the platform while it handles one message."""

    @property
    def on_text(self) -> TextSink | None:
        """Where a streaming model's text so far goes, as it grows (None: no previews)."""

    def thinking(self) -> AbstractAsyncContextManager[None]:
        """Entered while the model works on a turn (a "typing" indicator)."""

    async def send(self, reply: Reply) -> None:
        """Send reply as the answer to the message: at once or, for an update from the inbox,
        once the inbox has marked it processed (the platform's side decides which)."""


class ReplySurface:
    """The plain surface: no indicator, no previews (a platform's subclass adds them), and send
    hands the reply to answer. Without answer it is silent: the reply goes nowhere (handle
    returns it), as for a tap carried out, whose outcome shows in the tapped message."""

    def __init__(self, answer: Callable[[Reply], Awaitable[None]] | None = None) -> None:
        self._answer = answer

    @property
    def on_text(self) -> TextSink | None:
        """No previews."""
        return None

    def thinking(self) -> AbstractAsyncContextManager[None]:
        """No indicator."""
        return contextlib.nullcontext()

    async def send(self, reply: Reply) -> None:
        """Hand reply to answer, if any."""
        if self._answer is not None:
            await self._answer(reply)


SILENT: Surface = ReplySurface()

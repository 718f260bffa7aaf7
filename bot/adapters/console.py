"""The console adapter: talk to the bot in a terminal, one message per line, as any identity."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from bot.core.bot import Pinbot
from bot.core.conversation import ChatKind, Conversation

PLATFORM = "console"
PROMPT = "> "


def console_conversation(user: str, group: str | None, topic: str | None) -> Conversation:
    """The conversation a console user speaks in: a DM, or a group (and topic) when given."""
    if group is None:
        return Conversation(PLATFORM, ChatKind.DIRECT, chat_id=user, sender_id=user)
    return Conversation(PLATFORM, ChatKind.GROUP, chat_id=group, sender_id=user, topic_id=topic)


async def run_console(
    bot: Pinbot,
    conversation: Conversation,
    source: TextIO = sys.stdin,
    sink: TextIO = sys.stdout,
) -> None:
    """Answer each input line until end of input; every non-command line goes to the model.

    At a terminal a one-line banner and a prompt are shown; piped input gets replies only."""
    loop = asyncio.get_running_loop()
    interactive = source.isatty()
    if interactive:
        sink.write(
            f"pinbot console: {conversation.session_key}. /pin help for pins; Ctrl-D ends.\n"
        )
    while True:
        if interactive:
            sink.write(PROMPT)
            sink.flush()
        line = await loop.run_in_executor(None, source.readline)
        if not line:
            return
        reply = await bot.handle(conversation, line.rstrip("\r\n"))
        if reply is not None:
            sink.write(reply + "\n")
            sink.flush()

"""The console adapter: talk to the bot in a terminal, one message per line, as any identity."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import BinaryIO, TextIO

from bot.adapters import CONSOLE
from bot.core.entry import (
    ChatKind,
    Conversation,
    Document,
    Incoming,
    Pinbot,
    Reply,
    ReplySurface,
    Sent,
)

PLATFORM = CONSOLE
PROMPT = "> "


class ConsoleMessenger:
    """Messages the bot posts on its own (a proposal, its outcome) printed to the terminal,
    numbered, since a console has no chat to post them in."""

    def __init__(self, sink: TextIO) -> None:
        self._sink = sink
        self._posted = 0

    async def send(self, chat: str, reply: Reply) -> Sent | None:
        """Print a posted message, as message N."""
        self._posted += 1
        self._sink.write(f"[message {self._posted}] {reply.text}\n")
        return Sent(chat, str(self._posted))

    async def edit(self, sent: Sent, reply: Reply) -> bool:
        """Print what a posted message now says."""
        self._sink.write(f"[message {sent.message_id} now] {reply.text}\n")
        return True


def save_document(document: Document, folder: Path) -> str:
    """Write a document a reply carries into folder, readable by its owner alone (an export is
    private), under its name or, if that is taken, with a number added; the name used."""
    path = folder / document.name
    number = 1
    while True:
        try:
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(document.data)
            return path.name
        except FileExistsError:
            number += 1
            path = folder / f"{Path(document.name).stem}-{number}{Path(document.name).suffix}"


def console_conversation(user: str, group: str | None, topic: str | None) -> Conversation:
    """The conversation a console user speaks in: a DM, or a group (and topic) when given."""
    if group is None:
        return Conversation(PLATFORM, ChatKind.DIRECT, chat_id=user, sender_id=user)
    return Conversation(PLATFORM, ChatKind.GROUP, chat_id=group, sender_id=user, topic_id=topic)


def decode_line(raw: bytes) -> tuple[str | None, str | None]:
    """A line of input as text, or None and the refusal saying which byte is not UTF-8."""
    try:
        return raw.decode("utf-8").rstrip("\r\n"), None
    except UnicodeDecodeError as error:
        bad = raw[error.start]
        return None, (
            f"That line is not valid UTF-8 (byte 0x{bad:02x} at position {error.start}); "
            "nothing was sent. Please send text encoded as UTF-8."
        )


async def run_console(
    pinbot: Pinbot,
    conversation: Conversation,
    source: BinaryIO | None = None,
    sink: TextIO = sys.stdout,
    *,
    database: str = "",
) -> None:
    """Answer each input line until end of input; every non-command line goes to the model.
    database names the database in use, for the banner.

    Input is read as bytes and decoded line by line, so a line that is not UTF-8 gets a one-line
    refusal and the next line is served. At a terminal a one-line banner and a prompt are shown;
    piped input gets replies only."""
    source = source or sys.stdin.buffer
    pinbot.use_messenger(ConsoleMessenger(sink))
    loop = asyncio.get_running_loop()

    async def write(reply: Reply) -> None:
        sink.write(reply.text + "\n")
        if reply.document is not None:
            sink.write(f"wrote {save_document(reply.document, Path.cwd())}\n")
        sink.flush()

    surface = ReplySurface(write)  # no inbox: every reply is written at once
    interactive = source.isatty()
    if interactive:
        on = f" on {database}" if database else ""
        sink.write(
            f"pinbot console: {conversation.session_key}{on}. /pin help for pins; Ctrl-D ends.\n"
        )
    while True:
        if interactive:
            sink.write(PROMPT)
            sink.flush()
        raw = await loop.run_in_executor(None, source.readline)
        if not raw:
            return
        line, refusal = decode_line(raw)
        if line is None:
            await surface.send(Reply.refused(refusal or ""))
        else:
            await pinbot.handle(Incoming(conversation, line), surface)

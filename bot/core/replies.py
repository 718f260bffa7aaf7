"""What the core answers a message with, what it posts besides (once per update, however often
the update is processed), and replies cut to a platform's size limit without losing or
reordering anything."""

from __future__ import annotations

import base64
import contextlib
import contextvars
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class Result(StrEnum):
    """How a message went: done, refused (it changed nothing; the text says why and what to do)
    or failed (a fault: the model or the bot could not answer)."""

    DONE = "done"
    REFUSED = "refused"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Button:
    """A button under a message: its caption, and what a tap on it tells the bot (data, at most
    64 bytes: Telegram's limit)."""

    text: str
    data: str


@dataclass(frozen=True, slots=True)
class Document:
    """A file a reply carries (a person's export): its name and its bytes."""

    name: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer of the core. formatted: the text is the model's (Markdown, as models answer)
    and adapters may show it formatted; every other reply (/pin, help, /whoami, errors) is plain
    text shown exactly as it is. buttons: a message with buttons (a Telegram inline keyboard, a
    Feishu card); an empty tuple is such a message whose buttons are gone (after a decision),
    None a plain message. document: a file sent with it (the text then goes with the file, or
    right before it where the platform has no caption). quotes: the (start, end) character
    ranges of plain text that quote what someone wrote (a proposal's content), whole lines, for
    a platform that can show a quoted block (Telegram's blockquote) to show so; elsewhere the
    text reads as it is."""

    text: str
    outcome: Result = Result.DONE
    formatted: bool = False
    buttons: tuple[Button, ...] | None = None
    document: Document | None = None
    quotes: tuple[tuple[int, int], ...] = ()

    @classmethod
    def refused(cls, text: str) -> Reply:
        """A refusal: nothing changed, the text says why."""
        return cls(text, Result.REFUSED)

    @classmethod
    def failed(cls, text: str) -> Reply:
        """A fault, explained to the user."""
        return cls(text, Result.FAILED)


def replies_to_json(replies: Sequence[Reply]) -> str:
    """Replies as kept until they have gone out; replies_from_json gives them back equal."""
    return json.dumps(
        [
            [
                r.text,
                r.outcome.value,
                r.formatted,
                None if r.buttons is None else [[b.text, b.data] for b in r.buttons],
                None
                if r.document is None
                else [r.document.name, base64.b64encode(r.document.data).decode()],
                [list(quote) for quote in r.quotes],
            ]
            for r in replies
        ],
        ensure_ascii=False,
    )


def replies_from_json(kept: str) -> list[Reply]:
    """The replies replies_to_json kept."""
    return [
        Reply(
            text,
            Result(outcome),
            formatted,
            None if buttons is None else tuple(Button(*button) for button in buttons),
            None if document is None else Document(document[0], base64.b64decode(document[1])),
            tuple((start, end) for start, end in quotes),
        )
        for text, outcome, formatted, buttons, *rest in json.loads(kept)
        # Kept by earlier releases: without a document, or without quotes.
        for document, quotes in ((rest[0] if rest else None, rest[1] if rest[1:] else []),)
    ]


@dataclass(frozen=True)
class Sent:
    """A message the bot sent, as the platform names it: its chat and its id."""

    chat: str
    message_id: str


class Messenger(Protocol):
    """What the core may ask of a platform besides answering a message: post to a chat, and
    change what it posted."""

    async def send(self, chat: str, reply: Reply) -> Sent | None:
        """Post reply in chat (split like any reply); the first message sent, or None when it
        could not go."""

    async def edit(self, sent: Sent, reply: Reply) -> bool:
        """Replace a sent message's text (and buttons) with reply's; False when the platform
        refused."""


@dataclass
class Processed:
    """The update being processed (see processing): its key, and how many decisions of each
    kind and scope it has made (or found again) so far."""

    key: str
    made: dict[tuple[str, str], int] = field(default_factory=dict)


_PROCESSING: contextvars.ContextVar[Processed | None] = contextvars.ContextVar(
    "processing", default=None
)


@contextlib.contextmanager
def processing(update: str) -> Iterator[None]:
    """Decisions made while the update keyed update is processed belong to it: processed again
    (its worker died before it was marked done), it makes them again in the same order, and
    each is found again instead (bot.core.decisions), posted only if it never was."""
    token = _PROCESSING.set(Processed(update))
    try:
        yield
    finally:
        _PROCESSING.reset(token)


def update_processed() -> Processed | None:
    """The update being processed from the inbox, if any (see processing)."""
    return _PROCESSING.get()


def utf16_length(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _hard_split(line: str, limit: int, measure: Callable[[str], int]) -> list[str]:
    pieces: list[str] = []
    current = ""
    for char in line:
        if current and measure(current + char) > limit:
            pieces.append(current)
            current = ""
        current += char
    if current:
        pieces.append(current)
    return pieces


def split_message(text: str, limit: int, measure: Callable[[str], int] = len) -> list[str]:
    """Split text into parts of at most limit (as measure counts), on line boundaries where
    possible; a single longer line is split hard. Nothing is dropped but the line breaks that
    fall between two parts."""
    if measure(text) <= limit:
        return [text]
    parts: list[str] = []
    current: str | None = None
    for line in text.split("\n"):
        candidate = line if current is None else f"{current}\n{line}"
        if measure(candidate) <= limit:
            current = candidate
            continue
        if current is not None:
            parts.append(current)
        if measure(line) <= limit:
            current = line
        else:
            *whole, current = _hard_split(line, limit, measure) or [""]
            parts.extend(whole)
    if current is not None:
        parts.append(current)
    return parts

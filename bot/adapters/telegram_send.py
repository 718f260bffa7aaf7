"""The bot's messages on Telegram: replies split to Telegram's limit and sent in order, retried
through flood control and network errors, formatting that Telegram refuses sent again as plain
text; edits; and a streamed reply that grows in one message.

The model's Markdown as Telegram shows it: plain text plus message entities, split at
Telegram's limit of 4,096 UTF-16 units without breaking an entity.

The Markdown is rendered by our own renderer over markdown-it-py (bot/adapters/rich_text.py,
whose docstring says which characters Markdown may consume and why telegramify-markdown was
replaced: it deleted text it took for HTML). Spans become entities one for one, with offsets
in UTF-16 units; entities need no escaping, and they are valid by construction: within the
text, properly nested or disjoint, nothing inside `pre` or `code`, links only to http, https
and mailto. A last check (entity_problems) still drops, and logs, any entity that would break
those rules, so Telegram is never sent one. When the formatted form would show nothing (a reply
of "``````"), the text is sent as it came; and a formatted part Telegram still refuses is sent
again as plain text (without_formatting).
"""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

from telegram import (
    Bot,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    MessageEntity,
    ReplyParameters,
)
from telegram.constants import MessageLimit
from telegram.error import (
    BadRequest,
    Forbidden,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from bot import metrics
from bot.adapters import TELEGRAM
from bot.adapters.kit import Sent, Sleep, formatted_or_plain
from bot.adapters.rich_text import TELEGRAM as TELEGRAM_STYLE
from bot.adapters.rich_text import Rich, Span, render, span_problems, split_rich
from bot.config import TelegramConfig
from bot.core.entry import Document, Reply, split_message, utf16_length

log = logging.getLogger(__name__)
Part = tuple[str, tuple[MessageEntity, ...]]

_ENTITY_TYPES = {
    "bold": MessageEntity.BOLD,
    "italic": MessageEntity.ITALIC,
    "strikethrough": MessageEntity.STRIKETHROUGH,
    "code": MessageEntity.CODE,
    "pre": MessageEntity.PRE,
    "link": MessageEntity.TEXT_LINK,
    "quote": MessageEntity.BLOCKQUOTE,
}


def formatted_parts(markdown: str, limit: int = MessageLimit.MAX_TEXT_LENGTH) -> list[Part]:
    """Markdown converted to (text, entities) parts of at most limit UTF-16 units each; the
    text as it came when the formatted form would show nothing."""
    rich = render(markdown, TELEGRAM_STYLE)
    if not rich.text:
        return plain_parts(markdown, limit)
    return [_part(piece) for piece in split_rich(rich, limit, utf16_length)]


def _part(rich: Rich) -> Part:
    problems = span_problems(rich)
    spans: tuple[Span, ...] = rich.spans
    if problems:  # never expected: the renderer builds valid spans; never send invalid ones
        log.warning("dropping entities Telegram would refuse: %s", "; ".join(problems))
        spans = _valid_subset(rich)
    units = [0]
    for char in rich.text:
        units.append(units[-1] + (2 if ord(char) > 0xFFFF else 1))
    entities = tuple(
        MessageEntity(
            _ENTITY_TYPES[span.kind],
            units[span.start],
            units[span.end] - units[span.start],
            url=span.url or None,
            language=span.language or None,
        )
        for span in spans
    )
    return rich.text, entities


def _valid_subset(rich: Rich) -> tuple[Span, ...]:
    """The spans, outer first, keeping each one that breaks no rule beside those kept."""
    kept: list[Span] = []
    for span in rich.spans:
        if not span_problems(Rich(rich.text, (*kept, span))):
            kept.append(span)
    return tuple(kept)


def plain_parts(
    text: str,
    limit: int = MessageLimit.MAX_TEXT_LENGTH,
    *,
    quotes: Sequence[tuple[int, int]] = (),
) -> list[Part]:
    """Text as it is, split on line boundaries; with no entities but a blockquote over each of
    quotes ((start, end) character ranges: what the text quotes), when it goes as one part."""
    parts: list[Part] = [
        (part, ()) for part in split_message(text, limit, utf16_length) if part.strip()
    ]
    if not quotes or len(parts) != 1 or parts[0][0] != text:
        return parts
    entities = tuple(
        MessageEntity(
            MessageEntity.BLOCKQUOTE,
            utf16_length(text[:start]),
            utf16_length(text[start:end]),
        )
        for start, end in quotes
        if 0 <= start < end <= len(text)
    )
    return [(text, entities)]


def without_formatting(part: Part) -> str:
    """A part as plain text for when Telegram refuses its entities: nothing visible is lost, and
    a link's address is written after its text."""
    text, entities = part
    links = sorted(
        (e for e in entities if e.type == MessageEntity.TEXT_LINK and e.url),
        key=lambda e: e.offset,
        reverse=True,
    )
    units = text.encode("utf-16-le")
    for link in links:
        end = 2 * (link.offset + link.length)
        units = units[:end] + f" ({link.url})".encode("utf-16-le") + units[end:]
    return units.decode("utf-16-le")


SEND_ATTEMPTS = 3
CAPTION_LIMIT = 1024  # of a file's caption, in characters (Telegram's)
STREAM_EDIT_INTERVAL_S = 1.0  # Telegram tolerates about one edit a second per chat
# Bad Requests about the chat itself: sending again as plain text would not help.
CHAT_PROBLEMS = (
    "chat not found",
    "bot was blocked",
    "bot was kicked",
    "not enough rights",
    "have no rights",
    "chat_write_forbidden",
    "user is deactivated",
    "upgraded to a supergroup",
    "thread not found",
)
Post = Callable[[Part], Awaitable[Message]]


def retry_after_s(error: RetryAfter) -> float:
    """How long Telegram asks to wait, in seconds."""
    with warnings.catch_warnings():  # PTB 22 warns that the type will become timedelta
        warnings.simplefilter("ignore")
        value: int | float | timedelta = error.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _about_the_chat(error: BadRequest) -> bool:
    """Whether Telegram refused because of the chat itself, not the message's formatting."""
    said = error.message.casefold()
    return any(fragment in said for fragment in CHAT_PROBLEMS)


def _refused_formatting(part: Part) -> Callable[[Exception], bool]:
    def refused(error: Exception) -> bool:
        return bool(part[1]) and isinstance(error, BadRequest) and not _about_the_chat(error)

    return refused


def keyboard(reply: Reply) -> InlineKeyboardMarkup | None:
    """A reply's buttons as an inline keyboard in one row (None when it has none)."""
    if not reply.buttons:
        return None
    row = [InlineKeyboardButton(b.text, callback_data=b.data) for b in reply.buttons]
    return InlineKeyboardMarkup([row])


class TelegramSender:
    """Sends and edits the bot's messages."""

    def __init__(
        self,
        bot: Bot,
        config: TelegramConfig,
        sleep: Sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bot = bot
        self._config = config
        self.sleep = sleep
        self.monotonic = monotonic

    def parts(self, reply: Reply) -> list[Part]:
        """The parts a reply goes out as: the model's Markdown formatted (unless
        telegram.reply_format is plain), everything else as plain text, exactly as written
        (what it quotes as blockquotes)."""
        if reply.formatted and self._config.reply_format == "markdown":
            return formatted_parts(reply.text)
        return plain_parts(reply.text, quotes=reply.quotes)

    async def reply(self, message: Message, reply: Reply) -> None:
        """Send a reply to message, split to Telegram's limit, in order, never cut; a reply
        carrying a document goes as that file with the reply's text as its caption."""
        if reply.document is not None:
            await self._reply_document(message, reply.document, reply.text)
            return
        parts = self.parts(reply)
        for number, part in enumerate(parts, 1):
            # A reply's buttons go under its last part.
            await self.reply_part(message, part, keyboard(reply) if number == len(parts) else None)

    async def _reply_document(self, message: Message, document: Document, caption: str) -> None:
        async def post(part: Part) -> Message:
            return await message.reply_document(
                document.data,
                filename=document.name,
                caption=part[0][:CAPTION_LIMIT],
                reply_parameters=ReplyParameters(
                    message.message_id, allow_sending_without_reply=True
                ),
            )

        await self._deliver(message.chat.id, (caption, ()), post)

    async def reply_part(
        self, message: Message, part: Part, markup: InlineKeyboardMarkup | None = None
    ) -> Message | None:
        """Send one part as a reply to message (with buttons, if given); the sent message, or
        None if it could not go."""

        async def post(part: Part) -> Message:
            return await message.reply_text(
                part[0],
                entities=list(part[1]) or None,
                reply_markup=markup,
                reply_parameters=ReplyParameters(
                    message.message_id, allow_sending_without_reply=True
                ),
            )

        return await self._deliver(message.chat.id, part, post)

    async def send(self, chat: str, reply: Reply) -> Sent | None:
        """Post reply in chat (a chat id); the first message sent, or None if none went."""
        first: Message | None = None
        parts = self.parts(reply)
        for number, part in enumerate(parts, 1):
            markup = keyboard(reply) if number == len(parts) else None  # under the last part

            async def post(part: Part, markup: InlineKeyboardMarkup | None = markup) -> Message:
                return await self._bot.send_message(
                    chat, part[0], entities=list(part[1]) or None, reply_markup=markup
                )

            sent = await self._deliver(chat, part, post)
            first = first or sent
        return Sent(chat, str(first.message_id)) if first else None

    async def edit(self, sent: Sent, reply: Reply) -> bool:
        """Replace a sent message's text with reply's first part."""
        parts = self.parts(reply) or [("…", ())]

        async def change(part: Part) -> bool:
            await self._bot.edit_message_text(
                part[0],
                sent.chat,
                int(sent.message_id),
                entities=list(part[1]) or None,
                reply_markup=keyboard(reply),  # none: the buttons go
            )
            return True

        return await self._edit(sent.chat, parts[0], change)

    async def edit_part(self, message: Message, part: Part) -> bool:
        """Replace a sent message's text; False if Telegram refused (it is then left as it
        was). Refused formatting is retried as plain text."""

        async def change(part: Part) -> bool:
            await message.edit_text(part[0], entities=list(part[1]) or None)
            return True

        return await self._edit(message.chat.id, part, change)

    async def _edit(
        self, chat: int | str, part: Part, change: Callable[[Part], Awaitable[bool]]
    ) -> bool:
        try:
            return await formatted_or_plain(
                lambda: change(part),
                lambda: change((without_formatting(part), ())),
                refused_formatting=_refused_formatting(part),
                where=f"chat {chat}",
            )
        except RetryAfter as error:
            log.info("edit rate-limited in chat %s for %.0f s", chat, retry_after_s(error))
        except BadRequest as error:
            if "not modified" in error.message.casefold():
                return True
            log.debug("edit in chat %s failed: %s", chat, error)
        except TelegramError as error:
            log.debug("edit in chat %s failed: %s", chat, error)
        return False

    async def _deliver(self, chat: int | str, part: Part, post: Post) -> Message | None:
        """post(part), with its formatting dropped if Telegram refuses it; None when the chat
        cannot be written to."""
        try:
            return await formatted_or_plain(
                lambda: self._retried(chat, part, post),
                lambda: self._retried(chat, (without_formatting(part), ()), post),
                refused_formatting=_refused_formatting(part),
                where=f"chat {chat}",
            )
        except (BadRequest, Forbidden) as error:  # blocked, kicked, no rights
            log.warning("cannot write to chat %s: %s", chat, error)
        except TelegramError as error:
            log.error("sending %d characters to chat %s failed: %s", len(part[0]), chat, error)
            metrics.reply_lost(TELEGRAM)
        return None

    async def _retried(self, chat: int | str, part: Part, post: Post) -> Message | None:
        """post(part), tried again through flood control and network errors."""
        for attempt in range(1, SEND_ATTEMPTS + 1):
            try:
                return await post(part)
            except RetryAfter as error:
                wait = retry_after_s(error)
                log.warning(
                    "flood control in chat %s: retrying in %.0f s (attempt %d)", chat, wait, attempt
                )
                await self.sleep(wait)
            except TimedOut:
                # Sent, but not answered in time: it may have arrived, and Telegram cannot be
                # asked whether it did; sent again, it could show twice.
                log.error(
                    "sending %d characters to chat %s timed out; not sent again (it may have "
                    "arrived)",
                    *(len(part[0]), chat),
                )
                metrics.reply_lost(TELEGRAM)
                return None
            except NetworkError as error:  # refused or not reached: nothing was posted
                if isinstance(error, BadRequest | Forbidden):
                    raise
                log.warning(
                    "network error sending to chat %s: %s (attempt %d)", chat, error, attempt
                )
                await self.sleep(attempt)  # a short, growing pause before trying again
        log.error("gave up sending %d characters to chat %s", len(part[0]), chat)
        metrics.reply_lost(TELEGRAM)
        return None


class StreamedReply:
    """One reply that grows while the model streams, in one message: the first text is sent as
    soon as it comes, then the message is edited with the latest text at most once per
    STREAM_EDIT_INTERVAL_S (the spec's "about once a second", Telegram's flood limit), the final
    edit included; the final edit shows the reply formatted (split like any long reply). Previews
    are plain text, so every step is a valid message.

    The writes run in a task of their own: the model's stream never waits for Telegram, and text
    that comes while a write waits for its turn or is on its way goes out with the next one."""

    def __init__(self, sender: TelegramSender, message: Message) -> None:
        self._sender = sender
        self._message = message
        self._sent: Message | None = None
        self._shown: Part = ("", ())
        self._text = ""  # the text so far
        self._final: Reply | None = None
        self._last_write: float | None = None  # when the last send or edit set out (monotonic)
        self._changed = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    @property
    def showing(self) -> bool:
        """Whether previews of the reply have started to show."""
        return self._writer is not None

    async def update(self, text: str) -> None:
        """Take the text so far; it is shown as soon as Telegram's pace allows."""
        self._text = text
        self._changed.set()
        if self._writer is None:
            self._writer = asyncio.create_task(self._write())

    async def finish(self, reply: Reply) -> None:
        """Make the chat show exactly the reply: edit the streamed message (in its turn), send
        further parts; returns once they are sent."""
        if self._writer is None:
            await self._sender.reply(self._message, reply)
            return
        self._final = reply
        self._changed.set()
        await self._writer

    def close(self) -> None:
        """Stop showing previews of a turn that ends without a reply (finish was not called)."""
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()

    def _preview(self) -> Part | None:
        """The latest text's first part as plain text, if it differs from what is shown."""
        parts = plain_parts(self._text)
        return parts[0] if parts and parts[0] != self._shown else None

    async def _write(self) -> None:
        while self._final is None:
            await self._changed.wait()
            self._changed.clear()
            if self._final is None and self._preview() is not None:
                await self._pace()
            # What came during the pause goes too; the final reply, if it came, instead.
            if self._final is None and (preview := self._preview()) is not None:
                await self._put(preview)
        await self._put_final(self._final)

    async def _pace(self) -> None:
        """Wait until the next write keeps to STREAM_EDIT_INTERVAL_S after the last one."""
        if self._last_write is not None:
            wait = self._last_write + STREAM_EDIT_INTERVAL_S - self._sender.monotonic()
            if wait > 0:
                await self._sender.sleep(wait)

    async def _put(self, preview: Part) -> None:
        """Send the first preview or edit the message to show this one (kept if refused)."""
        self._last_write = self._sender.monotonic()
        if self._sent is None:
            self._sent = await self._sender.reply_part(self._message, preview)
            shown = self._sent is not None
        else:
            shown = await self._sender.edit_part(self._sent, preview)
        if shown:
            self._shown = preview

    async def _put_final(self, reply: Reply) -> None:
        if self._sent is None:  # no preview could be sent: the reply goes as any other
            await self._sender.reply(self._message, reply)
            return
        parts = self._sender.parts(reply)
        if not parts:
            return
        if parts[0] != self._shown:
            await self._pace()
            self._last_write = self._sender.monotonic()
            if not await self._sender.edit_part(self._sent, parts[0]):
                await self._sender.reply_part(self._message, parts[0])
        for part in parts[1:]:
            await self._sender.reply_part(self._message, part)

"""The model's Markdown as Telegram shows it: plain text plus message entities, split at
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

import logging
from collections.abc import Sequence

from telegram import MessageEntity
from telegram.constants import MessageLimit

from bot.adapters.rich_text import TELEGRAM, Rich, Span, render, span_problems, split_rich
from bot.core.entry import split_message, utf16_length

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
    rich = render(markdown, TELEGRAM)
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

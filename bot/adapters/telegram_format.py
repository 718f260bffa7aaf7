"""The model's Markdown as Telegram shows it: plain text plus message entities (telegramify-
markdown converts; no escaping is needed), split at Telegram's limit without breaking an entity.

telegramify-markdown was chosen over the alternatives on the registry: chatgpt-md-converter and
sulguk go through HTML (parse_mode HTML rejects a whole message for one unbalanced tag, and a
split must re-balance tags), and a bare parser (mistune, markdown-it-py) would leave us to write
the Telegram rendering ourselves. Entities need no escaping at all, and the library splits a
converted message on line boundaries, clipping an entity that spans a cut into both parts so that
every part is valid on its own (a long code block is closed and reopened).
"""

from __future__ import annotations

import telegramify_markdown
from telegram import MessageEntity
from telegram.constants import MessageLimit

from bot.core.replies import split_message, utf16_length

Part = tuple[str, tuple[MessageEntity, ...]]


def formatted_parts(markdown: str, limit: int = MessageLimit.MAX_TEXT_LENGTH) -> list[Part]:
    """Markdown converted to (text, entities) parts of at most limit UTF-16 units each."""
    text, entities = telegramify_markdown.convert(markdown)
    parts = telegramify_markdown.split_entities(text, entities, limit)
    return [
        (chunk, tuple(MessageEntity.de_json(e.to_dict(), None) for e in chunk_entities))
        for chunk, chunk_entities in parts
    ]


def plain_parts(text: str, limit: int = MessageLimit.MAX_TEXT_LENGTH) -> list[Part]:
    """Text as it is, split on line boundaries, with no entities."""
    return [(part, ()) for part in split_message(text, limit, utf16_length) if part.strip()]


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

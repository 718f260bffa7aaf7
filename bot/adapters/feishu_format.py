"""Replies as Feishu `post` messages: literal text, or the model's Markdown formatted.

The formatted form is built from the same rich text as Telegram's (bot/adapters/rich_text.py):
each line a paragraph of `text` and `a` elements carrying `style` (bold, italic, lineThrough),
each code block a `code_block` element of its own. Every character is in a literal element,
so what the post shows is what was sent: nothing in it is read as Markdown or HTML by Feishu,
no `<at …>` can become a mention, and only http, https and mailto targets become `a` elements.

Why not an `md` element (what pinbot sent before): Feishu reads its text as its own Markdown
dialect, which knows HTML-like tags (`<at>`, `<font>`, `<a>`, `<text_tag>`…); how it shows
`List<String>`, `<div>` or `<!-- x -->` cannot be judged from the post as sent, and its
mentions had to be defused by rewriting the text. Inline code keeps its backticks (a post has
no inline code style); a quote line starts with `> `.
"""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

from bot.adapters.rich_text import FEISHU, Rich, Span, render, split_rich
from bot.core.entry import Reply, split_message

Element = dict[str, Any]
_STYLES = {"bold": "bold", "italic": "italic", "strikethrough": "lineThrough"}


def post_content(text: str) -> str:
    """A `post` message body whose every line is a literal text element: nothing in text can
    become a mention or markup."""
    return _post([[{"tag": "text", "text": line}] for line in text.split("\n")])


def formatted_posts(markdown: str, limit: int) -> list[tuple[str, str]]:
    """The model's Markdown as `post` bodies of at most limit characters of text each, with
    each one's literal fallback (links written as `text (url)`); the text as it came, in
    literal posts, when the formatted form would show nothing."""
    rich = render(markdown, FEISHU)
    if not rich.text:
        parts = [part for part in split_message(markdown, limit) if part.strip()]
        return [(post_content(part), part) for part in parts]
    return [(_post(_paragraphs(part)), _literal(part)) for part in split_rich(rich, limit)]


def _post(paragraphs: list[list[Element]]) -> str:
    return json.dumps({"zh_cn": {"title": "", "content": paragraphs}}, ensure_ascii=False)


def _paragraphs(rich: Rich) -> list[list[Element]]:
    """Lines as paragraphs of styled text and link elements; each code block a paragraph of
    its own (the line break after it only ends it)."""
    paragraphs: list[list[Element]] = [[]]
    after_code = False
    for piece in _pieces(rich):
        if piece is None:  # a line break
            if not after_code:
                paragraphs.append([])
        elif piece["tag"] == "code_block":
            if paragraphs[-1]:
                paragraphs.append([])
            paragraphs[-1].append(piece)
            paragraphs.append([])
        elif paragraphs[-1] and _same_look(paragraphs[-1][-1], piece):
            paragraphs[-1][-1]["text"] += piece["text"]
        else:
            paragraphs[-1].append(piece)
        after_code = piece is not None and piece["tag"] == "code_block"
    if not paragraphs[-1] and len(paragraphs) > 1:
        paragraphs.pop()
    return [paragraph or [{"tag": "text", "text": ""}] for paragraph in paragraphs]


def _pieces(rich: Rich) -> list[Element | None]:
    """The text in order: None for a line break, a code block element for each code block,
    and a styled text or link element for each run of text under the same spans."""
    text, spans = rich.text, rich.spans
    cuts = {0, len(text)} | {p for s in spans for p in (s.start, s.end)}
    cuts |= {i for i, char in enumerate(text) if char == "\n"}
    cuts |= {i + 1 for i, char in enumerate(text) if char == "\n"}
    pieces: list[Element | None] = []
    code_until = 0
    ordered = sorted(cuts)
    for left, right in pairwise(ordered):
        if left < code_until:
            continue  # inside a code block already emitted
        covering = [s for s in spans if s.start <= left and right <= s.end]
        code = next((s for s in covering if s.kind == "pre"), None)
        if code is not None:
            element: Element = {"tag": "code_block", "text": text[code.start : code.end]}
            if code.language:
                element["language"] = code.language
            pieces.append(element)
            code_until = code.end
        elif text[left:right] == "\n":
            pieces.append(None)
        else:
            pieces.append(_element(text[left:right], covering))
    return pieces


def _same_look(one: Element, other: Element) -> bool:
    """Whether two elements differ only in their text (and may be one)."""
    return one["tag"] != "code_block" and {k: v for k, v in one.items() if k != "text"} == {
        k: v for k, v in other.items() if k != "text"
    }


def _element(text: str, covering: list[Span]) -> Element:
    link = next((s.url for s in covering if s.kind == "link"), None)
    element: Element = {"tag": "a", "text": text, "href": link} if link else {"tag": "text"}
    element["text"] = text
    styles = [_STYLES[s.kind] for s in covering if s.kind in _STYLES]
    if styles:
        element["style"] = list(dict.fromkeys(styles))
    return element


def _literal(rich: Rich) -> str:
    """A part as literal text for when Feishu refuses the formatted post: a link's address is
    written after its text."""
    text = rich.text
    for link in sorted((s for s in rich.spans if s.kind == "link"), key=lambda s: -s.end):
        text = f"{text[: link.end]} ({link.url}){text[link.end :]}"
    return text


CARD_VALUE_KEY = "pinbot"  # where a card button's value holds the button's data


def card_content(reply: Reply) -> str:
    """An interactive card (JSON 1.0) showing a reply's text literally, with its buttons: each
    button's value carries its data back in the card action. update_multi lets the card be
    changed for everyone in the chat once decided."""
    elements: list[dict[str, Any]] = [
        {"tag": "div", "text": {"tag": "plain_text", "content": reply.text}}
    ]
    if reply.buttons:
        actions = [
            {
                "tag": "button",
                "text": {"tag": "plain_text", "content": button.text},
                "type": "primary" if number == 0 else "default",
                "value": {CARD_VALUE_KEY: button.data},
            }
            for number, button in enumerate(reply.buttons)
        ]
        elements.append({"tag": "action", "actions": actions})
    card = {"config": {"wide_screen_mode": True, "update_multi": True}, "elements": elements}
    return json.dumps(card, ensure_ascii=False)

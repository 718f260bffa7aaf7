"""Generated model replies in Markdown, each with the characters it must show, and what a user
reads of the messages pinbot sends for them, on Telegram and on Feishu.

A reply is built from pieces that know what they show: the least a user must read, whatever a
CommonMark parser makes of them. A link's target, the `>` of a quote line, an autolink's angle
brackets and an escape's backslash may be consumed, so they are left out of what must show;
everything else (letters, digits, CJK, emoji, `<`, `>`, `&`) must arrive, in order. The pieces
are weighted to what broke before: code fences, inline code, HTML-like text and comments, entity
references, links of every scheme, nesting, CJK and emoji.
"""

from __future__ import annotations

import json
import unicodedata
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from hypothesis import strategies as st

Piece = tuple[str, str]  # (Markdown source, the characters it must show)
ALLOWED = {"http", "https", "mailto"}


def significant(text: str) -> str:
    """The characters that must never be lost: letters, digits (any script), emoji and other
    symbols, and `<`, `>`, `&`."""
    return "".join(
        char
        for char in text
        if char.isalnum() or char in "<>&" or unicodedata.category(char) == "So"
    )


def in_order(needle: str, haystack: str) -> bool:
    """Whether needle's characters all appear in haystack, in the same order."""
    found = iter(haystack)
    return all(char in found for char in needle)


# Inline pieces -----------------------------------------------------------------------------

HTML_LIKE = [
    "<",
    ">",
    "&",
    "a<b",
    "c>d",
    "a<b and c>d",
    "List<String>",
    "Map<K, V>",
    "<div>",
    "</div>",
    "<br/>",
    '<span class="x">',
    "<!-- hidden -->",
    "<!--",
    "-->",
    "<!---->",
    "<?php echo 1; ?>",
    "<script>alert(1)</script>",
    '<at user_id="all">everyone</at>',
    "<at id=all></at>",
    '<font color="red">red</font>',
    "<b>bold</b>",
    "&amp;",
    "&lt;",
    "&gt;",
    "&#60;",
    "&#x3C;",
    "&nbsp;",
    "&copy;",
    "x &&y",
    "1 < 2 > 0",
    "<=>",
    "<<EOF",
    "->",
    "=>",
]
ESCAPES = {"\\<": "<", "\\>": ">", "\\&": "&", "\\*": "", "\\_": "", "\\`": "", "\\[": ""}
TARGETS = [
    "https://example.org/a?b=1&c=2",
    "http://x.io",
    "HTTPS://EXAMPLE.ORG/Path",
    "mailto:someone@example.org",
    "javascript:alert(1)",
    "JavaScript:alert(document.cookie)",
    "tg://user?id=42",
    "tg://resolve?domain=x",
    "ftp://files.example.org/f",
    "file:///etc/passwd",
    "data:text/html,hi",
    "vbscript:msgbox",
    "relative/path.md",
    "#anchor",
    "//example.org/x",
    "http://",
    "mailto:",
    "",
    "<https://example.org/with space>",
    "https://example.org/中文",
]
AUTOLINKS = [
    ("https://example.org/x", "https://example.org/x"),
    ("http://a.b/c?d=e&f", "http://a.b/c?d=e&f"),
    ("mailto:a@b.cc", "mailto:a@b.cc"),
    ("a@b.cc", "a@b.cc"),
    ("tg://user?id=1", "tg://user?id=1"),
    ("javascript:alert(1)", "javascript:alert(1)"),
    ("ftp://x.y/z", "ftp://x.y/z"),
]

WORDS = [
    "a", "b2", "word", "Hello", "x1", "42", "0", "éß", "Дом", "中文", "漢字",
    "かな", "カナ", "한글", "😀", "👍", "✅", "🎉", "𝄞", "🧑‍💻", "a😀b", "中a1",
    "end.", "yes,", "why?", "it's", "\"q\"", "no!", "a:b", "x-y", "*", "**", "_", "__",
    "~", "~~", "*a*", "_b_", "~~c~~", "**d**", "a*b", "snake_case", "2*3", "(p)", "f(x)",
    "#tag", "1.", "x.y", "-", "—", "…",
]  # fmt: skip
CODE = [
    "x = 1", "a < b && c > d", "if (a<b) return;", "<p>&amp; x > y</p>", "List<String> l;",
    "<!-- c -->", "[x](http://y)", "**not bold**", "\\<", "# not a heading", "> not a quote",
    "a || b", "中文 😀", "    indented", "", " ", "x", "a_b_c", "&lt;&gt;", "<div>", "~~",
    "print('hi')", "<https://x.y>", "`",
]  # fmt: skip
FIRST_WORDS = [w for w in WORDS if w[0].isalnum() and w[-1].isalnum()]
CODE_SPANS = [
    (f"{ticks}{code if code.strip() else 'x' + code}{ticks}", code)
    for code in CODE + HTML_LIKE
    if "`" not in code
    for ticks in ("`", "``")
]
# Pieces that are one choice each (drawing is what costs time under hypothesis): words, HTML-like
# text (twice as likely), inline code, escapes, autolinks, a double space.
SIMPLE_PIECES: list[Piece] = [
    *((w, w) for w in WORDS),
    *((h, h) for h in HTML_LIKE * 2),
    *CODE_SPANS,
    *sorted(ESCAPES.items()),
    *((f"<{source}>", address) for source, address in AUTOLINKS),
    ("  ", ""),
]
simple_pieces = st.sampled_from(SIMPLE_PIECES)
first_words = st.sampled_from([(w, w) for w in FIRST_WORDS])
code_lines = st.sampled_from([c for c in CODE + HTML_LIKE if c.strip()])


# Each strategy is built once per shape (hypothesis spends its time building them otherwise).
@cache
def inline_piece(depth: int, links: bool) -> st.SearchStrategy[Piece]:
    """One inline piece: a word, HTML-like text, inline code, an escape, an autolink; emphasis
    around more (while depth lasts); a link unless inside a link's text (links never nest)."""
    pieces = [simple_pieces, simple_pieces, simple_pieces]
    if depth > 0:
        pieces.append(_emphasis(depth - 1, links))
    if links:
        pieces.append(_link(depth))
    return st.one_of(*pieces)


@st.composite
def _inline_run(draw: st.DrawFn, depth: int, links: bool) -> Piece:
    pieces = [draw(first_words), *draw(st.lists(inline_piece(depth, links), max_size=3))]
    return " ".join(p[0] for p in pieces), " ".join(p[1] for p in pieces)


@cache
def inline_run(depth: int, links: bool = True) -> st.SearchStrategy[Piece]:
    """Inline pieces joined by spaces, starting with a word (so no line starts as a block)."""
    return _inline_run(depth, links)


@st.composite
def _emphasis(draw: st.DrawFn, depth: int, links: bool) -> Piece:
    source, shown = draw(inline_run(depth, links))
    mark = draw(st.sampled_from(["**", "*", "_", "__", "~~", "***"]))
    return f"{mark}{source}{mark}", shown


LINK_ENDS = [  # (before the text, after it): an image now and then, a title now and then
    (bang, f"]({target}{title})")
    for target in TARGETS
    for bang, title in [("", ""), ("", ""), ("", ""), ("!", ""), ("", ' "a title"')]
]


@st.composite
def _link(draw: st.DrawFn, depth: int) -> Piece:
    label: Piece = ("", "")
    if draw(st.integers(0, 5)):
        label = draw(inline_run(depth, links=False))
    before, after = draw(st.sampled_from(LINK_ENDS))
    return f"{before}[{label[0]}{after}", label[1]


# Blocks --------------------------------------------------------------------------------------


@st.composite
def _paragraph(draw: st.DrawFn) -> Piece:
    lines = draw(st.lists(inline_run(2), min_size=1, max_size=2))
    breaks = [draw(st.sampled_from(["\n", "  \n", "\\\n"])) for _ in lines[1:]]
    source = lines[0][0] + "".join(b + line[0] for b, line in zip(breaks, lines[1:], strict=True))
    return source, " ".join(line[1] for line in lines)


@st.composite
def _html_lines(draw: st.DrawFn) -> Piece:
    """Lines that start with HTML-like text, as HTML blocks do (raw HTML would drop them)."""
    starts = st.sampled_from([h for h in HTML_LIKE if not h.startswith(">")])
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        start = draw(starts)
        rest = draw(st.one_of(st.just(("", "")), inline_run(1)))
        lines.append((f"{start} {rest[0]}".rstrip(), f"{start} {rest[1]}"))
    return "\n".join(line[0] for line in lines), " ".join(line[1] for line in lines)


@st.composite
def _heading(draw: st.DrawFn) -> Piece:
    source, shown = draw(inline_run(1))
    level = draw(st.integers(1, 6))
    if draw(st.booleans()):
        return f"{'#' * level} {source}", shown
    return f"{source}\n{('=' if level == 1 else '-') * 4}", shown


@st.composite
def _fence(draw: st.DrawFn, closed: bool = True) -> Piece:
    mark = draw(st.sampled_from(["```", "````", "~~~"]))
    info = draw(
        st.sampled_from(["", "", "python", "js", "c++", "html", "中文", "py title=x", "<div>"])
    )
    lines = draw(st.lists(st.sampled_from(CODE + HTML_LIKE), max_size=4))
    lines = [line for line in lines if not line.lstrip().startswith(("```", "~~~"))]
    body = "".join(f"{line}\n" for line in lines)
    return f"{mark}{info}\n{body}{mark if closed else ''}", " ".join([info, *lines])


@st.composite
def _indented_code(draw: st.DrawFn) -> Piece:
    """A paragraph, then code indented by four spaces (after a paragraph, never taken for a
    list item's continuation)."""
    lead = draw(first_words)[0]
    lines = draw(st.lists(code_lines, min_size=1, max_size=3))
    return lead + "\n\n" + "\n".join(f"    {line}" for line in lines), " ".join([lead, *lines])


@st.composite
def _table(draw: st.DrawFn) -> Piece:
    width = draw(st.integers(1, 3))
    cell = inline_run(1)
    rows = draw(st.lists(st.lists(cell, min_size=1, max_size=width + 1), min_size=1, max_size=3))
    header = draw(st.lists(cell, min_size=width, max_size=width))
    lines = [
        "| " + " | ".join(c[0] for c in header) + " |",
        "|" + "---|" * width,
        *("| " + " | ".join(c[0] for c in row) + " |" for row in rows),
    ]
    return "\n".join(lines), " ".join(c[1] for row in [header, *rows] for c in row)


def indent(source: str, first: str, rest: str) -> str:
    """source as a container's content: its first line after first, the others after rest."""
    lines = source.split("\n")
    return "\n".join(
        [first + lines[0], *((rest + line) if line.strip() else "" for line in lines[1:])]
    )


@st.composite
def _quote(draw: st.DrawFn, depth: int) -> Piece:
    inner = draw(st.lists(block(depth - 1), min_size=1, max_size=2))
    source = "\n\n".join(p[0] for p in inner)
    lines = [f"> {line}" if line else ">" for line in source.split("\n")]
    return "\n".join(lines), " ".join(p[1] for p in inner)


@st.composite
def _list(draw: st.DrawFn, depth: int) -> Piece:
    ordered = draw(st.booleans())
    start = draw(st.integers(0, 12))
    delimiter = draw(st.sampled_from(".)")) if ordered else draw(st.sampled_from("-*+"))
    items = draw(st.lists(block(depth - 1), min_size=1, max_size=2))
    loose = draw(st.booleans())
    sources, shown = [], []
    for number, (source, item_shown) in enumerate(items, start=start):
        marker = f"{number}{delimiter} " if ordered else f"{delimiter} "
        sources.append(indent(source, marker, " " * len(marker)))
        shown.append(f"{number if ordered else ''} {item_shown}")
    return ("\n\n" if loose else "\n").join(sources), " ".join(shown)


LEAF_BLOCKS = st.one_of(
    _paragraph(),
    _paragraph(),
    _fence(),
    _fence(),
    _heading(),
    _indented_code(),
    _table(),
    _html_lines(),
    st.just(("---", "")),
)


@cache
def block(depth: int) -> st.SearchStrategy[Piece]:
    """A block: a paragraph, code block, heading, table or rule; quotes and lists of blocks
    while depth lasts."""
    if depth <= 0:
        return LEAF_BLOCKS
    return st.one_of(LEAF_BLOCKS, LEAF_BLOCKS, _quote(depth), _list(depth))


SHAPES_THAT_SENT_NOTHING = [("``````", ""), ("<!-- hidden -->", "<>"), ("[](http://x)", "")]


@st.composite
def _replies(draw: st.DrawFn) -> Piece:
    if draw(st.integers(0, 30)) == 0:
        return draw(st.sampled_from(SHAPES_THAT_SENT_NOTHING))
    blocks = draw(st.lists(block(2), min_size=1, max_size=2))
    if draw(st.integers(0, 8)) == 0:  # a code block never closed (it runs to the end)
        blocks.append(draw(_fence(closed=False)))
    return "\n\n".join(b[0] for b in blocks), " ".join(b[1] for b in blocks)


replies = _replies()  # a whole reply, now and then one of the shapes that sent nothing before


# What a user reads -------------------------------------------------------------------------


def utf16_offsets(text: str) -> dict[int, int]:
    """UTF-16 offset → code point index, at every code point boundary."""
    offsets, units = {0: 0}, 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        offsets[units] = index + 1
    return offsets


def telegram_shown(text: str, entities: list[dict[str, Any]]) -> str:
    """A message as a Telegram client shows it: its text, each code block's language above it."""
    offsets = utf16_offsets(text)
    labels = sorted(
        (offsets[e["offset"]], e["language"])
        for e in entities
        if e["type"] == "pre" and e.get("language")
    )
    shown, position = "", 0
    for at, language in labels:
        shown += f"{text[position:at]}{language}\n"
        position = at
    return shown + text[position:]


STYLES = {"bold", "italic", "underline", "strikethrough", "spoiler"}
LEAVES = {"pre", "code"}


def telegram_problems(text: str, entities: list[dict[str, Any]], limit: int) -> list[str]:
    """What about one message Telegram's rules forbid: an empty or overlong text, an entity out
    of range or between the halves of a surrogate pair, partly overlapping another, anything
    inside pre or code, code or a link inside a link, a quote inside a quote, a link to a
    scheme other than http, https and mailto."""
    problems: list[str] = []
    offsets = utf16_offsets(text)
    size = max(offsets)
    if not text.strip() or size > limit:
        problems.append(f"a message of {size} UTF-16 units (limit {limit}): {text!r}")
    for e in entities:
        end = e["offset"] + e["length"]
        if e["length"] <= 0 or e["offset"] not in offsets or end not in offsets:
            problems.append(f"{e} is not within the text at character boundaries")
        if e["type"] == "text_link" and urlsplit(e["url"]).scheme.lower() not in ALLOWED:
            problems.append(f"{e} links to another scheme")
    for i, one in enumerate(entities):
        for other in entities[i + 1 :]:
            problems.extend(_pair(one, other))
    return problems


def _pair(one: dict[str, Any], other: dict[str, Any]) -> list[str]:
    a = (one["offset"], one["offset"] + one["length"])
    b = (other["offset"], other["offset"] + other["length"])
    if a[1] <= b[0] or b[1] <= a[0]:
        return []
    if a == b:  # either may be the outer one
        ok = _may_hold(one["type"], other["type"]) or _may_hold(other["type"], one["type"])
        return [] if ok else [f"{one} and {other} cover the same text"]
    if a[0] <= b[0] and b[1] <= a[1]:
        outer, inner = one, other
    elif b[0] <= a[0] and a[1] <= b[1]:
        outer, inner = other, one
    else:
        return [f"{one} partly overlaps {other}"]
    return [] if _may_hold(outer["type"], inner["type"]) else [f"{inner} inside {outer}"]


def _may_hold(outer: str, inner: str) -> bool:
    if outer in LEAVES:
        return False
    if outer == "text_link":
        return inner not in LEAVES | {"text_link"}
    return not outer == inner == "blockquote"


def feishu_shown(content: str) -> tuple[str, list[str]]:
    """A post as Feishu shows it, and what in it breaks the rules: only text, link and code
    block elements, links to http, https and mailto only, no empty post."""
    problems: list[str] = []
    paragraphs = json.loads(content)["zh_cn"]["content"]
    lines = []
    for paragraph in paragraphs:
        line = ""
        if not paragraph:
            problems.append("an empty paragraph")
        for element in paragraph:
            tag = element["tag"]
            if tag not in {"text", "a", "code_block"}:
                problems.append(f"a {tag} element: {element}")
            if tag == "a" and urlsplit(element["href"]).scheme.lower() not in ALLOWED:
                problems.append(f"a link to another scheme: {element}")
            if tag == "code_block" and element.get("language"):
                line += element["language"] + "\n"
            line += element.get("text", "")
        lines.append(line)
    shown = "\n".join(lines)
    if not shown.strip():
        problems.append("a post that shows nothing")
    return shown, problems

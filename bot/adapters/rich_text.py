"""The model's Markdown as rich text: the text a user reads plus spans (bold, italic,
strikethrough, code, pre, link, quote) over it, rendered by our own code from the CommonMark
tokens of markdown-it-py. The Telegram adapter turns spans into message entities, the Feishu
adapter into `post` elements; both split long replies here.

Why our own renderer (docs/design.md, "Formatted replies"): telegramify-markdown 1.4.1, the
newest release, deleted what it took for HTML (`a<b and c>d` arrived as `ad`), decoded entity
references, sent nothing for replies such as "``````", sent `javascript:` and `tg://` links and
produced partly overlapping entities; no earlier release fixes that. markdown-it-py is a
well-kept CommonMark parser whose tokens leave the text in place, so here we decide exactly which
characters Markdown consumes:

- only its own syntax: emphasis and code marks, heading and list markers (an ordered item keeps
  its number as written), the leading `>` of a quote line, a link's brackets and parentheses
  (its target hidden behind its text), an allowed autolink's angle brackets (its address stays
  visible) and the backslash of an escape;
- raw HTML is off, so anything that looks like HTML or an HTML comment is text; entity
  references are shown as written (`&amp;` stays `&amp;`); link reference definitions are off,
  so `[a]: b` is text;
- links keep only http, https (with a host) and mailto targets; any other link is text: its
  label followed by its target in parentheses, an autolink in its angle brackets;
- a table is shown as written, in a code block (the GFM table rule drops cells beyond the
  header's count; its source lines never do);
- spans nest by construction (they follow the token tree): they are properly nested or
  disjoint, nothing sits inside `code` or `pre`, no link inside a link and no code inside a link.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.rules_block.state_block import StateBlock
from markdown_it.rules_block.table import getLine
from markdown_it.rules_block.table import table as gfm_table
from markdown_it.token import Token

Kind = Literal["bold", "italic", "strikethrough", "code", "pre", "link", "quote"]
LEAVES: frozenset[str] = frozenset({"code", "pre"})  # spans that hold no other span
ALLOWED_SCHEMES = frozenset({"http", "https", "mailto"})
BULLET = "•"
RULE = "———"  # a thematic break
# A fence's info string that can be a pre's language as it is; any other is shown as a line.
_LANGUAGE = re.compile(r"[\w#+.-]{1,32}")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_NEWLINE = re.compile(r"\r\n?")


@dataclass(frozen=True, slots=True)
class Span:
    """A formatted range of a Rich text, in code points [start, end)."""

    kind: Kind
    start: int
    end: int
    url: str = ""  # link
    language: str = ""  # pre


@dataclass(frozen=True, slots=True)
class Rich:
    """Text as a user reads it, and its formatted spans (outer spans before inner ones)."""

    text: str
    spans: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class Style:
    """What differs between platforms. quote_spans: the outermost quote becomes a `quote` span
    (Telegram's blockquote entity, which cannot nest), deeper levels a `> ` prefix; otherwise
    every level is a `> ` prefix. code_marks: inline code keeps its backticks (a Feishu post has
    no inline code style)."""

    quote_spans: bool
    code_marks: bool


TELEGRAM = Style(quote_spans=True, code_marks=False)
FEISHU = Style(quote_spans=False, code_marks=True)


def allowed_link(url: str) -> bool:
    """Whether url may be a link: http or https with a host, or mailto with an address."""
    scheme = _SCHEME.match(url)
    if scheme is None or scheme.group(1).lower() not in ALLOWED_SCHEMES:
        return False
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        return False
    if scheme.group(1).lower() == "mailto":
        return len(url) > len("mailto:")
    try:
        return bool(urlsplit(url).hostname)
    except ValueError:  # e.g. a malformed IPv6 host
        return False


def _table_with_source(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """The GFM table rule, recording the table's source lines (inside their containers)."""
    first = len(state.tokens)
    found = gfm_table(state, start, end, silent)
    if found and not silent:
        opening = state.tokens[first]
        begin, stop = opening.map or (start, start)
        opening.meta["source"] = [getLine(state, line) for line in range(begin, stop)]
    return found


def _parser() -> MarkdownIt:
    parser = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    parser.enable(["strikethrough", "table"])
    parser.disable(["entity", "reference"])
    parser.block.ruler.at("table", _table_with_source, {"alt": ["paragraph", "reference"]})
    # Every link is parsed (markdown-it would leave javascript: and the like as text); which
    # ones become links is decided by allowed_link, the same for every scheme.
    parser.validateLink = lambda url: True  # type: ignore[method-assign]
    return parser


_MD = _parser()


@dataclass(slots=True)
class _Open:
    """A span opened and not yet closed; it starts at the first character written into it.
    order: when it opened (of two spans over the same text, the first opened is the outer)."""

    kind: Kind
    order: int
    url: str = ""
    start: int | None = None


@dataclass(slots=True)
class _Container:
    """A quote or list item: what its lines start with (the first line, then every other)."""

    first: str
    rest: str
    is_quote: bool
    used: bool = False
    spans: list[_Open] = field(default_factory=list)  # start after this container's prefix


@dataclass(slots=True)
class _Link:
    url: str
    shown: bool  # becomes a link span; otherwise its target is written as text
    autolink: bool
    mark: int  # the output's length when the link opened


class _Renderer:
    def __init__(self, source: str, style: Style) -> None:
        self.lines = _NEWLINE.sub("\n", source).split("\n")  # as markdown-it numbers them
        self.style = style
        self.out: list[str] = []
        self.length = 0  # code points written
        self.spans: list[tuple[int, Span]] = []  # (order opened, span)
        self.opened = 0
        self.inline: list[_Open] = []
        self.containers: list[_Container] = []
        self.links: list[_Link] = []
        self.pending = 0  # line breaks owed before the next content
        self.line_start = True
        self.quotes = 0

    # Writing -----------------------------------------------------------------------------

    def _emit(self, text: str) -> None:
        self.out.append(text)
        self.length += len(text)

    def _begin_line(self, *, markers_only: bool = False) -> None:
        """Pay the line breaks owed and write the containers' prefixes, starting the spans
        that wait for them."""
        if not self.line_start:
            return
        if self.length and self.pending:  # a blank line between blocks shows no `>`: the
            self._emit("\n" * self.pending)  # source need not have had one there
        self.pending = 0
        for container in self.containers:
            piece = container.rest if container.used else container.first
            container.used = True
            if not (markers_only and container.is_quote):
                self._emit(piece)
            self._start(container.spans)
        self.line_start = False

    def _start(self, spans: list[_Open]) -> None:
        for span in spans:
            if span.start is None:
                span.start = self.length

    def _write(self, text: str) -> None:
        """Inline text; a line break inside it starts a new line of the current containers."""
        for number, line in enumerate(text.split("\n")):
            if number:
                self._break()
            if line:
                self._begin_line()
                self._start(self.inline)
                self._emit(line)

    def _break(self) -> None:
        if self.line_start:  # an empty line still counts
            self._begin_line()
        self.pending = 1
        self.line_start = True

    def _new(self, kind: Kind, url: str = "") -> _Open:
        self.opened += 1
        return _Open(kind, self.opened, url)

    def _record(self, span: _Open) -> None:
        if span.start is not None and self.length > span.start:
            self.spans.append((span.order, Span(span.kind, span.start, self.length, span.url)))

    def _open(self, kind: Kind, url: str = "") -> None:
        self.inline.append(self._new(kind, url))

    def _close(self, kind: Kind) -> None:
        for index in range(len(self.inline) - 1, -1, -1):
            if self.inline[index].kind == kind:
                self._record(self.inline.pop(index))
                return

    def _end_block(self) -> None:
        inside_item = any(not c.is_quote for c in self.containers)
        self.pending = max(self.pending, 1 if inside_item else 2)
        self.line_start = True

    # Blocks ------------------------------------------------------------------------------

    def blocks(self, tokens: Sequence[Token]) -> None:
        handlers: dict[str, Callable[[Token], None]] = {
            "paragraph_close": lambda t: self._end_block(),
            "heading_open": lambda t: self._open("bold"),
            "heading_close": self._heading_close,
            "inline": lambda t: self.inline_tokens(t.children or []),
            "fence": self._code,
            "code_block": self._code,
            "hr": self._rule,
            "blockquote_open": self._quote_open,
            "blockquote_close": self._quote_close,
            "list_item_open": self._item_open,
            "list_item_close": self._item_close,
            "bullet_list_close": self._list_close,
            "ordered_list_close": self._list_close,
            "table_open": self._table,
            "html_block": self._html_block,
        }
        skipping = False
        for token in tokens:
            if skipping:  # a table's inner tokens: the table was written from its source
                skipping = token.type != "table_close"
                continue
            handler = handlers.get(token.type)
            if handler is not None:
                handler(token)
            skipping = token.type == "table_open"

    def _html_block(self, token: Token) -> None:  # raw HTML is off: only if that changes
        self._write(token.content.rstrip("\n"))
        self._end_block()

    def _heading_close(self, token: Token) -> None:
        self._close("bold")
        self._end_block()

    def _rule(self, token: Token) -> None:
        self._write(RULE)
        self._end_block()

    def _code(self, token: Token) -> None:
        language, shown_info = "", ""
        if token.type == "fence":
            info = self._fence_info(token)
            if _LANGUAGE.fullmatch(info):
                language = info
            else:
                shown_info = info
        if shown_info:  # an info string that cannot be a language is shown, not dropped
            self._write(shown_info)
            self._break()
        self._pre(token.content.removesuffix("\n"), language)
        self._end_block()

    def _fence_info(self, token: Token) -> str:
        """A fence's info string as written (markdown-it unescapes it)."""
        if token.map is None:
            return token.info.strip()
        line = self.lines[token.map[0]]
        at = line.find(token.markup)
        return line[at + len(token.markup) :].strip() if at >= 0 else token.info.strip()

    def _pre(self, code: str, language: str = "") -> None:
        """A code block: its first line after the list markers, its text exactly as written."""
        if not code.strip():
            if language:
                self._write(language)
            return
        self._begin_line(markers_only=True)
        start, order = self.length, self._new("pre").order
        self._emit(code)
        self.spans.append((order, Span("pre", start, self.length, language=language)))
        self.line_start = True

    def _table(self, token: Token) -> None:
        lines: list[str] = token.meta.get("source", [])
        self._pre("\n".join(line.strip() for line in lines))
        self._end_block()

    def _quote_open(self, token: Token) -> None:
        self.quotes += 1
        as_span = self.style.quote_spans and self.quotes == 1
        prefix = "" if as_span else "> "
        container = _Container(prefix, prefix, is_quote=True)
        if as_span:
            container.spans.append(self._new("quote"))
        self.containers.append(container)

    def _quote_close(self, token: Token) -> None:
        self.quotes -= 1
        container = self.containers.pop()
        for span in container.spans:
            self._record(span)
        self._end_block()

    def _item_open(self, token: Token) -> None:
        marker = f"{token.info}{token.markup} " if token.info else f"{BULLET} "
        self.containers.append(_Container(marker, " " * len(marker), is_quote=False))

    def _item_close(self, token: Token) -> None:
        item = self.containers[-1]
        if not item.used:  # an empty item still shows its marker (a number)
            item.first = item.first.rstrip()
            self.line_start = True
            self._begin_line()
        self.containers.pop()
        self.pending = max(self.pending, 1)
        self.line_start = True

    def _list_close(self, token: Token) -> None:
        if not any(not c.is_quote for c in self.containers):
            self.pending = max(self.pending, 2)

    # Inline ------------------------------------------------------------------------------

    def inline_tokens(self, tokens: Sequence[Token]) -> None:
        styles: dict[str, Kind] = {"strong": "bold", "em": "italic", "s": "strikethrough"}
        for token in tokens:
            kind, _, edge = token.type.rpartition("_")
            if kind in styles and edge in ("open", "close"):
                (self._open if edge == "open" else self._close)(styles[kind])
            elif token.type in ("softbreak", "hardbreak"):
                self._break()
            elif token.type == "code_inline":
                self._code_inline(token)
            elif token.type == "link_open":
                self._link_open(token.attrs.get("href"), token.markup == "autolink")
            elif token.type == "link_close":
                self._link_close()
            elif token.type == "image":
                self._link_open(token.attrs.get("src"), autolink=False)
                self.inline_tokens(token.children or [])
                self._link_close()
            else:  # text, and anything unforeseen: its text as it is
                self._write(token.content)

    def _code_inline(self, token: Token) -> None:
        code = token.content
        if self.style.code_marks:
            pad = " " if code.startswith("`") or code.endswith("`") or not code.strip() else ""
            self._write(f"{token.markup}{pad}{code}{pad}{token.markup}")
            return
        in_link = any(link.shown for link in self.links)  # Telegram: no code inside a link
        if not in_link:
            self._open("code")
        self._write(code)
        if not in_link:
            self._close("code")

    def _link_open(self, href: object, autolink: bool) -> None:
        url = str(href or "")
        shown = allowed_link(url) and not any(link.shown for link in self.links)
        self.links.append(_Link(url, shown, autolink, len(self.out)))
        if shown:
            self._open("link", url)
        elif autolink:
            self._write("<")

    def _link_close(self) -> None:
        link = self.links.pop()
        label = "".join(self.out[link.mark :]).strip()
        address = _MD.normalizeLinkText(link.url)
        if link.shown:
            if not label:  # a link with nothing to show shows its address
                self._write(address)
            self._close("link")
        elif link.autolink:
            self._write(">")
        elif label and address:
            self._write(f" ({address})")
        else:
            self._write(address)

    def result(self) -> Rich:
        while self.inline:
            self._record(self.inline.pop())
        text = "".join(self.out)
        ordered = sorted(self.spans, key=lambda item: (item[1].start, -item[1].end, item[0]))
        return trimmed(Rich(text, tuple(span for _, span in ordered)))


def render(markdown: str, style: Style) -> Rich:
    """The model's Markdown as a user reads it: text and spans (see the module docstring)."""
    renderer = _Renderer(markdown, style)
    renderer.blocks(_MD.parse(markdown))
    return renderer.result()


def sliced(rich: Rich, start: int, end: int) -> Rich:
    """The part [start, end) of a rich text, with every span clipped to it."""
    spans = tuple(
        replace(span, start=max(span.start, start) - start, end=min(span.end, end) - start)
        for span in rich.spans
        if span.start < end and span.end > start
    )
    return Rich(rich.text[start:end], spans)


def trimmed(rich: Rich) -> Rich:
    """Without leading and trailing whitespace (platforms drop it; a code block's indentation
    at the start is kept), spans clipped."""
    text = rich.text
    if not text.strip():
        return Rich("")
    start = len(text) - len(text.lstrip("\r\n"))
    if not any(s.kind == "pre" and s.start <= start < s.end for s in rich.spans):
        start = len(text) - len(text.lstrip())
    return sliced(rich, start, len(text.rstrip()))


def _cuts(text: str, limit: int, measure: Callable[[str], int]) -> list[tuple[int, int]]:
    """Ranges of text of at most limit (as measure counts), cut on line boundaries where
    possible (the line break at a cut is dropped), a longer line cut between characters."""
    ranges: list[tuple[int, int]] = []
    start = end = size = 0  # the part being gathered: text[start:end], measure(...) == size
    position = 0
    for line in text.split("\n"):
        width = measure(line)
        joined = size + measure("\n") + width if end > start else width
        if end > start and joined > limit:
            ranges.append((start, end))
            start = end = position
            size = 0
            joined = width
        if joined <= limit:
            end, size = position + len(line), joined
        else:  # one line longer than the limit: cut it between characters
            piece_start, piece_size = position, 0
            for offset, char in enumerate(line):
                char_size = measure(char)
                if piece_size + char_size > limit and offset:
                    ranges.append((piece_start, position + offset))
                    piece_start, piece_size = position + offset, 0
                piece_size += char_size
            start, end, size = piece_start, position + len(line), piece_size
        position += len(line) + 1
    if end > start:
        ranges.append((start, end))
    return ranges


def split_rich(rich: Rich, limit: int, measure: Callable[[str], int] = len) -> list[Rich]:
    """Parts of at most limit (as measure counts) on line boundaries, spans clipped into each
    part (a code block cut by a split is closed and reopened with its language), none blank."""
    parts = (trimmed(sliced(rich, start, end)) for start, end in _cuts(rich.text, limit, measure))
    return [part for part in parts if part.text]


def span_problems(rich: Rich) -> list[str]:
    """What breaks the rules a platform holds spans to (empty when none): in range, non-empty,
    properly nested or disjoint (of two spans over the same text, the one listed first is the
    outer), nothing inside code or pre, no link inside a link, no code inside a link, no quote
    inside a quote, links only to allowed targets."""
    problems: list[str] = []
    size = len(rich.text)
    around: list[Span] = []  # the spans that hold the current one, outermost first
    for span in sorted(rich.spans, key=lambda s: (s.start, -s.end)):  # stable: ties keep order
        if not 0 <= span.start < span.end <= size:
            problems.append(f"{span} is out of range (text of {size})")
        if span.kind == "link" and not allowed_link(span.url):
            problems.append(f"{span} links to a target that is not allowed")
        while around and around[-1].end <= span.start:
            around.pop()
        if around and span.end > around[-1].end:
            problems.append(f"{span} partly overlaps {around[-1]}")
        problems += [
            f"{span} inside {outer}: {problem}"
            for outer in around
            if (problem := _nesting_problem(outer.kind, span.kind))
        ]
        around.append(span)
    return problems


def _nesting_problem(outer: str, inner: str) -> str:
    if outer in LEAVES:
        return f"{outer} holds no other span"
    if outer == inner and outer in ("link", "quote"):
        return f"a {outer} inside a {outer}"
    if outer == "link" and inner in LEAVES:
        return "code inside a link"
    return ""

"""Private key blocks, whole: from the BEGIN line through the body to the END line (detect-secrets
finds the header; the body is the secret). A key pasted without its BEGIN line, or without its END
line, is hidden as far as its body goes."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from bot.secrets._rule import SECRET, Span, compile_re2

KIND = "a private key"
_BEGIN = compile_re2(
    r"-{3,}\s*BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?\s*-{3,}|PuTTY-User-Key-File-\d"
)
_END = compile_re2(r"-{3,}\s*END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?\s*-{3,}")
_BODY_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


def key_spans(text: str) -> Iterator[Span]:
    """Each private key block in text, as far as it goes (linear: every END is found once)."""
    if "PRIVATE KEY" not in text and "PuTTY" not in text:
        return
    ends = [(match.start(), match.end()) for match in _END.finditer(text)]
    starts = [start for start, _ in ends]
    covered = 0
    for begin in _BEGIN.finditer(text):
        if begin.start() < covered:
            continue
        following = bisect.bisect_left(starts, begin.end())
        end = ends[following][1] if following < len(ends) else _body_end(text, begin.end())
        covered = end
        yield Span(begin.start(), end, KIND, True, SECRET)
    for start, end in ends:
        if end <= covered:
            continue
        yield Span(_body_start(text, start, covered), end, KIND, True, SECRET)
        covered = end


def _body_end(text: str, position: int) -> int:
    """Where the body after a BEGIN line stops: at the first line that is not base64."""
    end = position
    while end < len(text):
        newline = text.find("\n", end + 1)
        line_end = len(text) if newline < 0 else newline
        line = text[end:line_end].strip()
        if line and not _is_body(line):
            break
        end = line_end
    return end


def _body_start(text: str, position: int, floor: int) -> int:
    """Where the body before an END line (pasted without its BEGIN line) starts: the lines of
    base64 right before it, not before floor."""
    start = position
    while start > floor:
        newline = text.rfind("\n", floor, start - 1)
        line_start = floor if newline < 0 else newline + 1
        line = text[line_start:start].strip()
        if not line or not all(character in _BODY_CHARACTERS for character in line):
            break
        start = line_start
    return start


def _is_body(line: str) -> bool:
    """A line of a key's base64 body (or its Key: value headers, as PuTTY and encrypted PEM
    write them)."""
    head, colon, _rest = line.partition(": ")
    if colon and head.replace("-", "").isalnum():
        return True
    return all(character in _BODY_CHARACTERS for character in line)

"""One rule of the recogniser: a pattern run by RE2 (linear in the text, whatever the text), the
checks RE2 cannot express (what stands just before and after), and what a match hides."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import re2

# Placeholders: lower case in brackets, so that no rule matches them again (redacting twice
# changes nothing).
IP = "[ip]"
HOST_PORT = "[host:port]"
SSH_TARGET = "[ssh-target]"
EMAIL = "[email]"
SECRET = "[secret]"
TOKEN = "[token]"
HIDDEN = "[hidden]"
PLACEHOLDERS = (IP, HOST_PORT, SSH_TARGET, EMAIL, SECRET, TOKEN, HIDDEN)

_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
# A token goes on through these: a rule that found its start hides all of it.
TOKEN_CHARACTERS = _WORD | frozenset("-+/=.~")

Match = Any  # re2's match object (the binding ships no types)
Accept = Callable[[Match, str], bool]


def is_word(character: str) -> bool:
    """Whether an ASCII letter, digit or underscore (CJK text beside a token is not: the token
    written right after Chinese is still a token)."""
    return character in _WORD


_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a pattern RE2 cannot run raises; it need not also print to stderr


def compile_re2(pattern: str) -> Any:
    """The pattern compiled by RE2 (re2.error when RE2 cannot run it)."""
    return re2.compile(pattern, _OPTIONS)


@dataclass(frozen=True, slots=True)
class Span:
    """What one match hides, in the folded text."""

    start: int
    end: int
    kind: str
    credential: bool
    placeholder: str


@dataclass(frozen=True, slots=True)
class Rule:
    """A pattern and what it means: its kind in words, whether it is a credential (refused in
    groups) or only sensitive (an address), and which group of the match it hides."""

    kind: str
    pattern: Any
    credential: bool
    placeholder: str = SECRET
    group: int | str = 0
    word_before: bool = False  # the match must not follow a letter, digit or underscore
    word_after: bool = False  # nor be followed by one
    whole_token: bool = False  # hide the rest of the token the match starts
    trim: bool = False  # the match may hold the separators around the secret: leave them shown
    accept: Accept | None = None
    sign: str | None = None  # a substring without which the rule cannot match (a cheap skip)
    folded_sign: bool = False  # the sign is looked for in the lower-cased text

    def __post_init__(self) -> None:
        if isinstance(self.group, str):  # RE2's matches take a group's number, not its name
            object.__setattr__(self, "group", self.pattern.groupindex[self.group])
        if self.sign is None and (literal := literal_start(self.pattern.pattern)):
            # A pattern that starts with a literal cannot match a text without it: looking for
            # it costs a fraction of a microsecond, and most texts have none.
            folded = literal.startswith("(?i)")
            object.__setattr__(
                self, "sign", literal.removeprefix("(?i)").lower() if folded else literal
            )
            object.__setattr__(self, "folded_sign", folded)

    def spans(self, text: str, lowered: str) -> Iterator[Span]:
        """Every span this rule hides in text (lowered: the same text, lower-cased)."""
        if self.sign is not None and self.sign not in (lowered if self.folded_sign else text):
            return
        group = self.group
        covered = 0  # hidden already by an extended token: each character is read once
        for match in self.pattern.finditer(text):
            start, end = match.start(group), match.end(group)
            if start < covered or start == end:
                continue
            if self.word_before and match.start() > 0 and is_word(text[match.start() - 1]):
                continue
            if _in_placeholder(text, match.start()):
                continue
            if self.word_after and match.end() < len(text) and is_word(text[match.end()]):
                continue
            if self.accept is not None and not self.accept(match, text):
                continue
            if self.trim:
                start, end = _trimmed(text, start, end)
                if start >= end:
                    continue
            if self.whole_token:
                while end < len(text) and text[end] in TOKEN_CHARACTERS:
                    end += 1
                end = _without_trailing_punctuation(text, start, end)
                covered = end
            yield Span(start, end, self.kind, self.credential, self.placeholder)


def _without_trailing_punctuation(text: str, start: int, end: int) -> int:
    """A token that ends a sentence leaves its full stop (and a closing dot run) outside."""
    while end > start + 1 and text[end - 1] in ".-":
        end -= 1
    return end


_SEPARATORS = frozenset(" \t\r\n\"'=:/@,;")


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start] in _SEPARATORS:
        start += 1
    while end > start and text[end - 1] in _SEPARATORS:
        end -= 1
    return start, end


def _in_placeholder(text: str, start: int) -> bool:
    """Whether a match starts inside a placeholder redaction put there ("[secret]" is no secret
    word with a value after it)."""
    opening = text.rfind("[", max(0, start - 12), start)
    return opening >= 0 and any(text.startswith(p, opening) for p in PLACEHOLDERS)


_ESCAPED = frozenset(".-_:/=+@#&~ ")
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_:/=@#&~ ")


def literal_start(pattern: str) -> str | None:
    """The literal text every match of pattern starts with (at least two characters; prefixed
    "(?i)" when the pattern ignores case), or None. Conservative: any construct it does not know
    ends the literal, and a pattern with a choice at its top level has none."""
    folded = pattern.startswith("(?i)")
    body = pattern.removeprefix("(?i)")
    if _has_top_level_choice(body):
        return None
    literal: list[str] = []
    i = 0
    while i < len(body):
        character = body[i]
        if character == "\\" and i + 1 < len(body) and body[i + 1] in _ESCAPED:
            literal.append(body[i + 1])
            i += 2
        elif character in _PLAIN:
            literal.append(character)
            i += 1
        else:
            break
        if i < len(body) and body[i] in "*?{":
            literal.pop()  # the last character may repeat zero times
            break
    if len(literal) < 2:
        return None
    return ("(?i)" if folded else "") + "".join(literal)


def _has_top_level_choice(pattern: str) -> bool:
    depth = 0
    escaped = in_class = False
    for character in pattern:
        if escaped:
            escaped = False
        elif character == "\\":
            escaped = True
        elif in_class:
            in_class = character != "]"
        elif character == "[":
            in_class = True
        elif character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
        elif character == "|" and depth == 0:
            return True
    return False

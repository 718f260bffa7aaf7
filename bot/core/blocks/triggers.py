"""Keyword triggers: when a triggered block goes with a request. A keyword matches a message
ignoring case after NFKC, as whole words in scripts written with spaces, and as a substring in
Chinese and Japanese (written without them); plain keywords only, never patterns.

A scope's keywords are compiled once into one matcher (a table of word sequences, and the
Chinese and Japanese ones by their first character), kept while the scope's triggered blocks
stay as they are: a message is then read once, however many blocks wait for a keyword."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_KEYWORDS = 20
MAX_KEYWORD_CHARS = 40
# Chinese (Han) and Japanese (kana, and the half- and full-width forms NFKC leaves): written
# without spaces, so a keyword in them matches inside a longer run.
_UNSPACED = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0002fa1f"
)
_UNSPACED_CHAR = re.compile(f"[{_UNSPACED}]")
# A word: letters, digits and marks of a spaced script; a change to or from an unspaced script
# ends it (`使用deploy脚本` holds the word "deploy").
_WORD = re.compile(rf"[^\W_{_UNSPACED}]+")


def normal(text: str) -> str:
    """text as keywords and messages are compared: NFKC, then case folded."""
    return unicodedata.normalize("NFKC", text).casefold()


def parse_keywords(text: str) -> list[str] | str:
    """`--when`'s keywords: comma-separated, a keyword with a comma or spaces around it in
    double quotes; or what is wrong with them (empty ones, too many, too long, no word)."""
    keywords: list[str] = []
    for raw in _split(text):
        keyword = raw.strip()
        if not keyword:
            return "a keyword is empty: write them separated by commas, e.g. --when deploy,release"
        if normal(keyword) not in (normal(k) for k in keywords):
            keywords.append(keyword)
    return keywords_problem(keywords) or keywords


def keywords_problem(keywords: Sequence[str]) -> str | None:
    """What breaks the rules of a block's keywords (at most MAX_KEYWORDS, each a plain
    keyword of at most MAX_KEYWORD_CHARS characters with a letter or digit to match, on one
    line), or None."""
    if len(keywords) > MAX_KEYWORDS:
        return f"{len(keywords)} keywords; a block takes at most {MAX_KEYWORDS}"
    for keyword in keywords:
        if not keyword.strip():
            return "a keyword is empty"
        if len(keyword) > MAX_KEYWORD_CHARS:
            return f"the keyword {keyword[:20]!r}… is longer than {MAX_KEYWORD_CHARS} characters"
        if any(unicodedata.category(char) in ("Cc", "Cf") for char in keyword):
            return f"the keyword {keyword!r} holds a control character or line break"
        if not _words(normal(keyword)) and not _UNSPACED_CHAR.search(keyword):
            return f"the keyword {keyword!r} has no letter or digit to match"
    return None


def _split(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text))


@dataclass(frozen=True)
class Fired:
    """A block whose keyword a message holds: its id and the keyword (as written)."""

    block_id: int
    keyword: str


class Matcher:
    """The keywords of some blocks, compiled once; which blocks a text fires."""

    def __init__(self, triggers: Iterable[tuple[int, Sequence[str]]]) -> None:
        self._words: dict[tuple[str, ...], list[tuple[int, str]]] = {}
        unspaced: dict[str, list[tuple[int, str]]] = {}
        for block_id, keywords in triggers:
            for keyword in keywords:
                key = normal(keyword)
                if _UNSPACED_CHAR.search(key):
                    unspaced.setdefault(key, []).append((block_id, keyword))
                elif words := _words(key):
                    self._words.setdefault(words, []).append((block_id, keyword))
        self._longest = max((len(words) for words in self._words), default=0)
        self._by_first: dict[str, list[tuple[str, list[tuple[int, str]]]]] = {}
        for key, blocks in unspaced.items():
            self._by_first.setdefault(key[0], []).append((key, blocks))

    def fired(self, texts: Sequence[str]) -> dict[int, str]:
        """Each block a keyword of which one of texts holds, with that keyword (the first
        found, the newest text first)."""
        found: dict[int, str] = {}
        for text in texts:
            folded = normal(text)
            words = _words(folded)
            for size in range(1, self._longest + 1):
                for start in range(len(words) - size + 1):
                    for block_id, keyword in self._words.get(words[start : start + size], ()):
                        found.setdefault(block_id, keyword)
            if self._by_first:
                for at, char in enumerate(folded):
                    for key, blocks in self._by_first.get(char, ()):
                        if folded.startswith(key, at):
                            for block_id, keyword in blocks:
                                found.setdefault(block_id, keyword)
        return found


@functools.lru_cache(maxsize=256)
def matcher(triggers: tuple[tuple[int, tuple[str, ...]], ...]) -> Matcher:
    """The matcher of these blocks' keywords, built once while they stay the same."""
    return Matcher(triggers)

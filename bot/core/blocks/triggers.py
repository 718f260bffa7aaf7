"""Keyword triggers: when a triggered block goes with a request. A keyword matches a message
ignoring case after NFKC, as whole words in scripts written with spaces, and as a substring in
Chinese and Japanese (written without them); plain keywords only, never patterns.

A scope's keywords are compiled once into one matcher (two Aho-Corasick automatons: one over the
message's words, one over its Chinese and Japanese text), kept while the scope's triggered blocks
stay as they are: a message is then read once, in time linear in its length, however many blocks
wait for a keyword."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence

import ahocorasick

MAX_KEYWORDS = 20
MAX_KEYWORD_CHARS = 40
# Chinese (Han) and Japanese (kana, and the half- and full-width forms NFKC leaves): written
# without spaces, so a keyword in them matches inside a longer run.
_UNSPACED = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0002fa1f"
)
_UNSPACED_CHAR = re.compile(f"[{_UNSPACED}]")


@functools.cache
def _word() -> re.Pattern[str]:
    """A word: letters, digits and the marks that belong to them (the vowel signs of Indic
    scripts, accents left combining) of a script with spaces; a change to or from an unspaced
    script ends it (`使用deploy脚本` holds the word "deploy"). Built at first use: the marks are
    read off the Unicode database."""
    marks = [chr(cp) for cp in range(0x30000) if unicodedata.category(chr(cp)).startswith("M")]
    return re.compile(rf"(?:[^\W_{_UNSPACED}]|[{re.escape(''.join(marks))}])+")


def normal(text: str) -> str:
    """text as keywords and messages are compared: NFKC, then case folded."""
    # The dotted capital I folds to i and a combining dot: "İstanbul" is "istanbul" too.
    return unicodedata.normalize("NFKC", text).casefold().replace("i\u0307", "i")


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
    return tuple(_word().findall(text))


class Matcher:
    """The keywords of some blocks, compiled once; which blocks a text fires."""

    def __init__(self, triggers: Iterable[tuple[int, Sequence[str]]]) -> None:
        self._blocks: list[list[tuple[int, str]]] = []  # by key: the blocks and keywords
        self._words = ahocorasick.Automaton()  # " w1 w2 " of each spaced keyword
        self._unspaced = ahocorasick.Automaton()  # each Chinese or Japanese keyword
        keys: dict[tuple[bool, str], int] = {}
        for block_id, keywords in triggers:
            for keyword in keywords:
                key = normal(keyword)
                unspaced = bool(_UNSPACED_CHAR.search(key))
                if not unspaced:
                    words = _words(key)
                    if not words:
                        continue
                    key = f" {' '.join(words)} "
                index = keys.get((unspaced, key))
                if index is None:
                    index = keys[(unspaced, key)] = len(self._blocks)
                    self._blocks.append([])
                    (self._unspaced if unspaced else self._words).add_word(key, index)
                self._blocks[index].append((block_id, keyword))
        for automaton in (self._words, self._unspaced):
            if len(automaton):
                automaton.make_automaton()

    def fired(self, texts: Sequence[str]) -> dict[int, str]:
        """Each block a keyword of which one of texts holds, with that keyword (the first
        found, the newest text first)."""
        found: dict[int, str] = {}
        seen: set[int] = set()
        for text in texts:
            folded = normal(text)
            if len(self._words):
                self._collect(self._words.iter(f" {' '.join(_words(folded))} "), seen, found)
            if len(self._unspaced):
                self._collect(self._unspaced.iter(folded), seen, found)
        return found

    def _collect(
        self, matches: Iterable[tuple[int, int]], seen: set[int], found: dict[int, str]
    ) -> None:
        for _end, index in matches:
            if index not in seen:
                seen.add(index)
                for block_id, keyword in self._blocks[index]:
                    found.setdefault(block_id, keyword)


@functools.lru_cache(maxsize=256)
def matcher(triggers: tuple[tuple[int, tuple[str, ...]], ...]) -> Matcher:
    """The matcher of these blocks' keywords, built once while they stay the same."""
    return Matcher(triggers)

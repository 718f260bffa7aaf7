"""The text the rules read: full-width forms folded to ASCII and invisible characters dropped, with
a way back to the offsets of the text as written (so a mask covers what the user typed)."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

# Characters that render as nothing: typed inside a token, they must not split it in two.
INVISIBLE = frozenset(
    "\u00ad\u034f\u180b\u180c\u180d\u180e\u200b\u200c\u200d\u200e\u200f"
    "\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064"
    "\u2066\u2067\u2068\u2069\ufeff"
)

# Full-width ASCII (as Chinese and Japanese keyboards type it: `：`, `＝`, `ＡＫＩＡ`) and the
# ideographic space read as their ASCII selves; each stays one character, so offsets hold.
_FOLD = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}
_DROP = {ord(character): None for character in INVISIBLE}
_ANY_INVISIBLE = re.compile("[" + "".join(sorted(INVISIBLE)) + "]")


_FULL_WIDTH = re.compile("[\uff01-\uff5e\u3000]")


@dataclass(frozen=True, slots=True)
class Folded:
    """Text as the rules read it, and where each of its characters stands in the original."""

    text: str
    # For each invisible character dropped, how many characters were kept before it, ascending.
    drops: list[int]

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The span [start, end) of the folded text as a span of the original (invisible
        characters inside it included)."""
        if not self.drops or start >= end:
            return start, end
        return self._at(start), self._at(end - 1) + 1

    def _at(self, index: int) -> int:
        return index + bisect.bisect_right(self.drops, index)


def fold(text: str) -> Folded:
    """The text the rules read (linear in its length)."""
    if text.isascii():
        return Folded(text, [])
    if _FULL_WIDTH.search(text) is not None:
        text = text.translate(_FOLD)
    dropped = [match.start() for match in _ANY_INVISIBLE.finditer(text)]
    if not dropped:
        return Folded(text, [])
    return Folded(text.translate(_DROP), [at - kept for kept, at in enumerate(dropped)])

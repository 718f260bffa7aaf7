"""What is seen of a sensitive block: the store keeps it whole, and everything that shows or sends
it — the model's request, the tools' reads, listings, the web page, exports — goes through here
and gets it redacted (bot.secrets). Only `/sticky raw` in a DM, the operator's raw view of
the web page and `pinbot export --raw` read the stored text."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

from bot.secrets import (
    has_marks,
    hide_parts,
    marked_parts,
    placeholder_kinds,
    redact_and_name,
)
from storage.models import Block, BlockState

PREVIEW_CHARS = 120  # of a block's content in `/sticky`, as Sticky Context's own list shows


@functools.lru_cache(maxsize=4096)  # every turn sends the same sensitive blocks again
def _seen(text: str) -> tuple[str, tuple[str, ...]]:
    """What is seen of text and the kinds hidden in it, from one reading: the reply that saves a
    sensitive block names the kinds, so every turn after it finds the redaction made."""
    redacted, kinds = redact_and_name(text)
    if kinds:
        _KINDS_OF_SHOWN[redacted] = tuple(kinds)
        while len(_KINDS_OF_SHOWN) > 4096:  # as many as _seen keeps; the oldest go first
            del _KINDS_OF_SHOWN[next(iter(_KINDS_OF_SHOWN))]
    return redacted, tuple(kinds)


# A listing may hold a block as readers see it, already redacted: what it hides, by its view.
_KINDS_OF_SHOWN: dict[str, tuple[str, ...]] = {}


def _redacted(text: str) -> str:
    return _seen(text)[0]


def _kinds(text: str) -> tuple[str, ...]:
    return _seen(text)[1]


def hides(block: Block | BlockState) -> bool:
    """Whether readers and the model see the block redacted: it is sensitive, or holds a part
    its author marked `||secret||` (hidden even where the flag was lost, as in an old export)."""
    return block.sensitive or has_marks(block.content)


def shown_content(block: Block | BlockState) -> str:
    """The content as readers and the model see it: redacted when the block hides anything."""
    return _redacted(block.content) if hides(block) else block.content


def shown(block: Block) -> Block:
    """The block as readers and the model see it (the block itself unless it hides anything)."""
    if not hides(block):
        return block
    return dataclasses.replace(block, content=_redacted(block.content))


def shown_states(newest_first: Iterable[BlockState | None]) -> list[BlockState | None]:
    """A label's states through time, newest first, as readers see them: each redacted when it,
    or any newer state of the label (the block now included), is sensitive. Making a block
    sensitive hides what it held before too; turning it off shows only what comes after."""
    found: list[BlockState | None] = []
    hidden = False
    marked: list[str] = []  # parts marked in a newer state: hidden in older ones too
    for state in newest_first:
        hidden = hidden or (state is not None and state.sensitive)
        if state is not None and (hidden or has_marks(state.content) or marked):
            content = hide_parts(_redacted(state.content), marked)
            marked += marked_parts(state.content)
            state = dataclasses.replace(state, content=content)
        found.append(state)
    return found


def listing_note(block: Block) -> str | None:
    """How a listing (`/pin list`, `/sticky`) describes what is hidden of the block: "shown
    redacted" only when something is, naming what; None for a block that hides nothing and is
    not sensitive."""
    if not hides(block):
        return None
    # A listing may hold the block as readers see it, already redacted.
    kinds = (
        _kinds(block.content)
        or _KINDS_OF_SHOWN.get(block.content)
        or tuple(placeholder_kinds(block.content))
    )
    flag = "sensitive, " if block.sensitive else ""
    if not kinds:
        return flag + "nothing in it looks like a secret, so it is shown as written"
    return flag + "shown redacted (hides " + ", ".join(kinds) + ")"


def masked_note(content: str) -> str:
    """What making content sensitive masks, in words for the reply: the kinds found, or that
    nothing is (so the user is not left believing a secret is hidden)."""
    found = list(_kinds(content))
    if not found:
        return "nothing in it looks like an address or a secret; the model reads it as written"
    return "masked: " + ", ".join(dict.fromkeys(found))


def preview(block: Block, limit: int = PREVIEW_CHARS) -> str:
    """The first limit characters of what is seen of the block, on one line."""
    text = " ".join(shown_content(block).split())
    return text if len(text) <= limit else text[:limit] + "…"

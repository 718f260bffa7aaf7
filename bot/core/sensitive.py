"""What is seen of a sensitive block: the store keeps it whole, and everything that shows or sends
it — the model's request, the tools' reads, listings, the web page, exports — goes through here
and gets it redacted (bot.core.secrets). Only `/sticky raw` in a DM, the operator's raw view of
the web page and `pinbot export --raw` read the stored text."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

from bot.core.secrets import hidden_kinds, redact
from storage.models import Block, BlockState

PREVIEW_CHARS = 120  # of a block's content in `/sticky`, as Sticky Context's own list shows


@functools.lru_cache(maxsize=4096)  # every turn sends the same sensitive blocks again
def _redacted(text: str) -> str:
    return redact(text)


def shown_content(block: Block | BlockState) -> str:
    """The content as readers and the model see it: redacted when the block is sensitive."""
    return _redacted(block.content) if block.sensitive else block.content


def shown(block: Block) -> Block:
    """The block as readers and the model see it (the block itself unless it is sensitive)."""
    if not block.sensitive:
        return block
    return dataclasses.replace(block, content=_redacted(block.content))


def shown_states(newest_first: Iterable[BlockState | None]) -> list[BlockState | None]:
    """A label's states through time, newest first, as readers see them: each redacted when it,
    or any newer state of the label (the block now included), is sensitive. Making a block
    sensitive hides what it held before too; turning it off shows only what comes after."""
    found: list[BlockState | None] = []
    hidden = False
    for state in newest_first:
        hidden = hidden or (state is not None and state.sensitive)
        if state is not None and hidden:
            state = dataclasses.replace(state, content=_redacted(state.content))
        found.append(state)
    return found


def masked_note(content: str) -> str:
    """What making content sensitive masks, in words for the reply: the kinds found, or that
    nothing is (so the user is not left believing a secret is hidden)."""
    found = hidden_kinds(content)
    if not found:
        return "nothing in it looks like an address or a secret; the model reads it as written"
    return "masked: " + ", ".join(dict.fromkeys(found))


def preview(block: Block, limit: int = PREVIEW_CHARS) -> str:
    """The first limit characters of what is seen of the block, on one line."""
    text = " ".join(shown_content(block).split())
    return text if len(text) <= limit else text[:limit] + "…"

"""The block policy: every rule a block change meets, whoever makes it (`/pin`, the agent
tools, import, the web page): default levels, label and content rules, the credential check,
limits and the character budget, idle retention and the token warning. Refusals are English
sentences that say what to do."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from datetime import datetime, timedelta

from bot.config import PinsConfig
from bot.core.credentials import credential_kind
from storage.models import Block, Level, Limits, State

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
_ALLOWED_CONTROLS = {"\n", "\r", "\t"}
_WITHOUT_ALLOWED_CONTROLS = str.maketrans(dict.fromkeys(_ALLOWED_CONTROLS))
# Invisible and direction-control characters (Cf) could make two labels look alike, or a label
# look like something else; content may hold them (e.g. joiners in emoji and scripts).
_LABEL_CATEGORIES = ("Cc", "Cs", "Cf")
_CONTENT_CATEGORIES = ("Cc", "Cs")
_QUOTES = "\"'`“”‘’„«»「」『』"
_DAY = timedelta(days=1)


def _bad_character(text: str, categories: tuple[str, ...], *, controls: bool) -> str | None:
    """The first character of text in one of categories, as U+XXXX, or None; with controls,
    line breaks and tabs are allowed."""
    # Every character of Cc, Cs and Cf is unprintable to Python, so printable text (nearly all
    # text, once its allowed line breaks are set aside) needs no look at each character.
    if (text.translate(_WITHOUT_ALLOWED_CONTROLS) if controls else text).isprintable():
        return None
    allowed = _ALLOWED_CONTROLS if controls else set()
    for char in text:
        if char not in allowed and unicodedata.category(char) in categories:
            return f"U+{ord(char):04X}"
    return None


def priority_problem(priority: int | None) -> str | None:
    """Why this priority cannot be used (None: not a whole number), or None if it is fine."""
    if priority is not None and PRIORITY_MIN <= priority <= PRIORITY_MAX:
        return None
    return f"Priority must be a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}."


def default_level(group: bool) -> Level:
    """The level of an add that names none: context in a group, strong in a DM."""
    return Level.CONTEXT if group else Level.STRONG


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


class BlockPolicy:
    """The rules of pins.* for blocks, in one place."""

    def __init__(self, pins: PinsConfig) -> None:
        self.pins = pins
        self.limits = Limits(
            pins.max_blocks_per_session, pins.max_total_chars, pins.history_per_block
        )

    def label_problem(self, label: str) -> str | None:
        """Why this label cannot be used, or None if it is fine."""
        if not label:
            return "A label cannot be empty."
        if len(label) > self.pins.max_label_length:
            return (
                f"The label is {len(label)} characters long; the limit is "
                f"{self.pins.max_label_length}. Choose a shorter label."
            )
        if any(char.isspace() for char in label):
            return "A label cannot contain spaces or line breaks. Use '-' or '_' instead."
        if label[0] in _QUOTES or label[-1] in _QUOTES:
            return (
                "Labels are one word and need no quotes: write /pin add tone Be brief. "
                "Remove the quotes and try again."
            )
        if bad := _bad_character(label, _LABEL_CATEGORIES, controls=False):
            return (
                f"The label contains an invisible or control character ({bad}). Type the label "
                "again without it."
            )
        if label.startswith("--"):
            return "A label cannot start with '--'; that marks options. Choose another label."
        return None

    def content_problem(self, content: str) -> str | None:
        """Why this (already trimmed) content cannot be stored, or None if it is fine."""
        if not content:
            return "The content is empty. Write the text to pin after the label."
        if len(content) > self.pins.max_content_length:
            return (
                f"The content is {len(content)} characters long; the limit is "
                f"{self.pins.max_content_length}. Shorten it and try again."
            )
        if bad := _bad_character(content, _CONTENT_CATEGORIES, controls=True):
            return (
                f"The content contains a control character ({bad}); only line breaks and tabs "
                "are allowed. Remove it and try again."
            )
        return None

    def secret_problem(self, label: str, content: str, *, group: bool) -> str | None:
        """Why a block looks like it holds a credential where a group can see it, or None."""
        if not group or not self.pins.refuse_secrets_in_groups:
            return None
        kind = credential_kind(f"{label} {content}")
        if kind is None:
            return None
        return (
            f"Not saved: this looks like {kind}. Blocks in a group can be revealed to every "
            "member (the model may repeat them), so do not pin secrets here; keep them out of "
            "chats. (The operator can turn this check off with "
            "pins.refuse_secrets_in_groups: false.)"
        )

    def block_problem(self, label: str, content: str, priority: int, *, group: bool) -> str | None:
        """The first rule a new block's label, content and priority break, or None."""
        return (
            self.label_problem(label)
            or self.content_problem(content)
            or priority_problem(priority)
            or self.secret_problem(label, content, group=group)
        )

    def budget_problem(
        self, blocks: Sequence[Block], replaced: Block | None, content: str
    ) -> str | None:
        """Why content (replacing replaced's, if given) would grow these blocks past the
        character budget, or None: only growth past it is refused."""
        budget = self.pins.max_total_chars
        if budget == 0:
            return None
        before = sum(len(b.content) for b in blocks)
        total = before - (len(replaced.content) if replaced else 0) + len(content)
        if total <= budget or total <= before:
            return None
        return self.over_budget(total)

    def over_budget(self, total: int) -> str:
        """The refusal for a change that would bring a scope to total characters."""
        return (
            f"That would bring these blocks to {total} characters, over the budget of "
            f"{self.pins.max_total_chars} (pins.max_total_chars). Shorten or remove a block first."
        )

    def scope_problems(self, blocks: Sequence[Block]) -> list[str]:
        """The limits a whole scope's blocks break (for an import)."""
        problems = []
        if len(blocks) > self.limits.max_blocks:
            problems.append(
                f"{len(blocks)} blocks; the limit is {self.limits.max_blocks} "
                "(pins.max_blocks_per_session)"
            )
        total = sum(len(b.content) for b in blocks)
        if self.limits.max_total_chars and total > self.limits.max_total_chars:
            problems.append(
                f"{total} characters of content; the budget is {self.limits.max_total_chars} "
                "(pins.max_total_chars)"
            )
        return problems

    # --- idle retention -----------------------------------------------------------------------

    def expired(self, block: Block, now: datetime, calls_before: int) -> bool:
        """Whether an idle block is due for deletion at a model request: idle for
        idle_retention_days and idle_retention_calls further calls, or idle_hard_retention_days.
        Active and pinned blocks never are."""
        if block.state is not State.IDLE or block.idle_since is None:
            return False
        idle_for = now - block.idle_since
        if idle_for >= timedelta(days=self.pins.idle_hard_retention_days):
            return True
        further_calls = calls_before - (block.idle_calls or 0)
        return (
            idle_for >= timedelta(days=self.pins.idle_retention_days)
            and further_calls >= self.pins.idle_retention_calls
        )

    def idle_due(self, block: Block, calls: int, now: datetime) -> str:
        """When an idle block becomes due for clean-up, in words."""
        pins = self.pins
        idle_for = now - (block.idle_since or now)

        def days_left(limit: int) -> int:
            return max(0, math.ceil((timedelta(days=limit) - idle_for) / _DAY))

        days, hard = days_left(pins.idle_retention_days), days_left(pins.idle_hard_retention_days)
        calls_left = max(0, pins.idle_retention_calls - (calls - (block.idle_calls or 0)))
        if hard == 0 or (days == 0 and calls_left == 0):
            return "due: deleted at the next model request here"
        return (
            f"deleted once {_plural(days, 'more day')} and "
            f"{_plural(calls_left, 'more model call')} have passed, or in "
            f"{_plural(hard, 'day')} at the latest"
        )

    def idle_notice(self) -> str:
        """What going idle means for a block, in words."""
        pins = self.pins
        return (
            "it is no longer sent to the model, and it is deleted after "
            f"{pins.idle_retention_days} idle days and {pins.idle_retention_calls} further "
            f"model calls, or after {pins.idle_hard_retention_days} idle days"
        )

    # --- the token warning ----------------------------------------------------------------------

    def token_warning(self, total: int) -> str | None:
        """The warning for blocks that add total tokens to every request, or None."""
        threshold = self.pins.token_warning_threshold
        if not threshold or total <= threshold:
            return None
        return (
            f"Warning: that is over the warning threshold of {threshold:,} tokens; "
            "consider shortening, idling or removing blocks."
        )

"""The rules a label and content must meet before they are stored, as English refusals."""

from __future__ import annotations

import unicodedata

from bot.config import PinsConfig

_ALLOWED_CONTROLS = {"\n", "\r", "\t"}
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
# Invisible and direction-control characters (Cf) could make two labels look alike, or a label
# look like something else; content may hold them (e.g. joiners in emoji and scripts).
_LABEL_CATEGORIES = ("Cc", "Cs", "Cf")
_CONTENT_CATEGORIES = ("Cc", "Cs")
_QUOTES = "\"'`“”‘’„«»「」『』"


def _bad_character(text: str, allowed: set[str], categories: tuple[str, ...]) -> str | None:
    for char in text:
        if char not in allowed and unicodedata.category(char) in categories:
            return f"U+{ord(char):04X}"
    return None


def priority_problem(priority: int | None) -> str | None:
    """Why this priority cannot be used (None: not a whole number), or None if it is fine."""
    if priority is not None and PRIORITY_MIN <= priority <= PRIORITY_MAX:
        return None
    return f"Priority must be a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}."


def label_problem(label: str, pins: PinsConfig) -> str | None:
    """Why this label cannot be used, or None if it is fine."""
    if not label:
        return "A label cannot be empty."
    if len(label) > pins.max_label_length:
        return (
            f"The label is {len(label)} characters long; the limit is "
            f"{pins.max_label_length}. Choose a shorter label."
        )
    if any(char.isspace() for char in label):
        return "A label cannot contain spaces or line breaks. Use '-' or '_' instead."
    if label[0] in _QUOTES or label[-1] in _QUOTES:
        return (
            "Labels are one word and need no quotes: write /pin add tone Be brief. "
            "Remove the quotes and try again."
        )
    bad = _bad_character(label, set(), _LABEL_CATEGORIES)
    if bad:
        return (
            f"The label contains an invisible or control character ({bad}). Type the label "
            "again without it."
        )
    if label.startswith("--"):
        return "A label cannot start with '--'; that marks options. Choose another label."
    return None


def content_problem(content: str, pins: PinsConfig) -> str | None:
    """Why this (already trimmed) content cannot be stored, or None if it is fine."""
    if not content:
        return "The content is empty. Write the text to pin after the label."
    if len(content) > pins.max_content_length:
        return (
            f"The content is {len(content)} characters long; the limit is "
            f"{pins.max_content_length}. Shorten it and try again."
        )
    bad = _bad_character(content, _ALLOWED_CONTROLS, _CONTENT_CATEGORIES)
    if bad:
        return (
            f"The content contains a control character ({bad}); only line breaks and tabs "
            "are allowed. Remove it and try again."
        )
    return None

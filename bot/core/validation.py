"""The rules a label and content must meet before they are stored, as English refusals."""

from __future__ import annotations

import unicodedata

from bot.config import PinsConfig

_ALLOWED_CONTROLS = {"\n", "\r", "\t"}


def _bad_character(text: str, allowed: set[str]) -> str | None:
    for char in text:
        category = unicodedata.category(char)
        if char not in allowed and category in ("Cc", "Cs"):
            return f"U+{ord(char):04X}"
    return None


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
    bad = _bad_character(label, set())
    if bad:
        return f"The label contains a control character ({bad}). Remove it and try again."
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
    bad = _bad_character(content, _ALLOWED_CONTROLS)
    if bad:
        return (
            f"The content contains a control character ({bad}); only line breaks and tabs "
            "are allowed. Remove it and try again."
        )
    return None

"""What the model proposes and what people decide: shared-block proposals and pin suggestions,
two kinds of one decision (bot.core.decisions.decision): numbered, expiring, decided once."""

from bot.core.decisions.proposals import ADMINS_ONLY, Proposals, parse_tap
from bot.core.decisions.suggestions import Place, Suggestions, is_suggestion_tap, suggestion_tap

__all__ = [
    "ADMINS_ONLY",
    "Place",
    "Proposals",
    "Suggestions",
    "is_suggestion_tap",
    "parse_tap",
    "suggestion_tap",
]

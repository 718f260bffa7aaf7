"""The conversation: a turn with the model, its history and compaction, the blocks rendered
into the request, the agent tools, and usage and budgets."""

from bot.core.conversation.render import (
    STRONG_TITLE,
    BlockCost,
    Estimate,
    ScopedBlock,
    block_tokens,
    estimate,
    injected,
)
from bot.core.conversation.turns import ChatService, history_key
from bot.core.conversation.usage import UsageLedger, usage_document, usage_table
from bot.core.conversation.why import why_text

__all__ = [
    "STRONG_TITLE",
    "BlockCost",
    "ChatService",
    "Estimate",
    "ScopedBlock",
    "UsageLedger",
    "block_tokens",
    "estimate",
    "history_key",
    "injected",
    "usage_document",
    "usage_table",
    "why_text",
]

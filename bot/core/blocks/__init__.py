"""The blocks: operations on them, the review every change passes (the rules and their codes),
versions, the lifecycle, the chat's pinned message, sensitive content, and imports."""

from bot.core.blocks.chatpin import ChatPin
from bot.core.blocks.ends import Ends, parse_for, parse_until, shown_end
from bot.core.blocks.lifecycle import Lifecycle, remove_blocks
from bot.core.blocks.ops import (
    BlockOps,
    Done,
    Outcome,
    Refused,
    Target,
    find_block,
    seen_of,
    timing_details,
)
from bot.core.blocks.review import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    RULE_TEXTS,
    BlockPolicy,
    Rule,
    count_refusal,
    default_level,
    priority_problem,
    refusal,
    text_problem,
)
from bot.core.blocks.sensitive import (
    PREVIEW_CHARS,
    listing_note,
    preview,
    shown,
    shown_content,
    shown_states,
)
from bot.core.blocks.sticky_file import apply_sticky, is_sticky_file, plan_sticky
from bot.core.blocks.transfer import (
    apply_import,
    describe_changes,
    export_document,
    plan_import,
    read_document,
)
from bot.core.blocks.triggers import (
    MAX_KEYWORD_CHARS,
    MAX_KEYWORDS,
    keywords_problem,
    matcher,
    normal,
    parse_keywords,
)
from bot.core.blocks.versions import BlockVersions

__all__ = [
    "MAX_KEYWORDS",
    "MAX_KEYWORD_CHARS",
    "PREVIEW_CHARS",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "RULE_TEXTS",
    "BlockOps",
    "BlockPolicy",
    "BlockVersions",
    "ChatPin",
    "Done",
    "Ends",
    "Lifecycle",
    "Outcome",
    "Refused",
    "Rule",
    "Target",
    "apply_import",
    "apply_sticky",
    "count_refusal",
    "default_level",
    "describe_changes",
    "export_document",
    "find_block",
    "is_sticky_file",
    "keywords_problem",
    "listing_note",
    "matcher",
    "normal",
    "parse_for",
    "parse_keywords",
    "parse_until",
    "plan_import",
    "plan_sticky",
    "preview",
    "priority_problem",
    "read_document",
    "refusal",
    "remove_blocks",
    "seen_of",
    "shown",
    "shown_content",
    "shown_end",
    "shown_states",
    "text_problem",
    "timing_details",
]

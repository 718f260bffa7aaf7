"""The `/pin status` view (`/sticky`, the Sticky Context design's "all slots with usage stats"):
every block that is sent, in the order the model reads it, with its characters and tokens; then
the idle blocks and when each will be cleaned up; then the totals against the block limit, the
character budget and the token warning."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bot.core.blocks import PREVIEW_CHARS, BlockPolicy, listing_note, preview, timing_details
from bot.core.conversation import BlockCost, Estimate, ScopedBlock, block_tokens, injected
from storage.models import Block, Level, State

INJECTION_OFF = (
    "Injection is off (pins.allow_prompt_injection: false): blocks are kept, but none is sent to "
    "the model, so they add nothing to any request."
)
_PLACES = {
    Level.STRONG: "In the system prompt (strong blocks):",
    Level.CONTEXT: "With your message (context blocks):",
}


@dataclass(frozen=True)
class ScopeStatus:
    """One scope that applies to the speaker here, as the status view shows it."""

    name: str  # as the request names it: "shared" or "personal"
    title: str  # e.g. "Your blocks", "This group's shared blocks"
    blocks: Sequence[Block]
    calls: int  # the scope's model-call count so far
    listed: bool = True  # False: counted in the total, but its blocks are not listed


@dataclass(frozen=True)
class StatusView:
    """Everything the view shows; estimate is None when injection is off (nothing is sent)."""

    scopes: Sequence[ScopeStatus]
    estimate: Estimate | None
    group: bool  # entries name their scope only where there are two
    preview: bool = False  # each block's first PREVIEW_CHARS characters under it (`/sticky`)


def _previewed(view: StatusView, line: str, block: Block) -> list[str]:
    """A block's line, and under it (when the view previews) its first characters as seen."""
    return [line, f"   {preview(block)}"] if view.preview else [line]


def _describe(item: ScopedBlock, group: bool) -> str:
    block = item.block
    details = [item.scope_name] if group else []
    details += [block.level.value, block.state.value, f"priority {block.priority}"]
    details += [note] if (note := listing_note(block)) else []
    details += timing_details(block)
    return f"{block.label} ({', '.join(details)})"


def _sent_lines(view: StatusView, estimate: Estimate) -> list[str]:
    listed = {scope.name for scope in view.scopes if scope.listed}
    costs = [cost for cost in estimate.blocks if cost.item.scope_name in listed]
    if not costs:
        return ["No block is sent with requests here."]
    lines = [
        "Sent with every request here, in the order the model reads them (characters of "
        "content; estimated tokens with the block's boundary lines"
        + (f"; under each, its first {PREVIEW_CHARS} characters" if view.preview else "")
        + "):"
    ]
    place: Level | None = None
    for number, cost in enumerate(costs, start=1):
        if cost.item.block.level is not place:
            place = cost.item.block.level
            lines.append(_PLACES[place])
        lines += _previewed(view, _cost_line(number, cost, view.group), cost.item.block)
    return lines


def _cost_line(number: int, cost: BlockCost, group: bool) -> str:
    chars = len(cost.item.block.content)
    return (
        f"{number}. {_describe(cost.item, group)}: {chars:,} characters, "
        f"about {cost.tokens:,} tokens"
    )


def _triggered_lines(view: StatusView, policy: BlockPolicy) -> list[str]:
    """The blocks that wait for keywords: each with its estimated tokens when it goes, and
    the budget they share in one request."""
    waiting = [
        ScopedBlock(block, scope.name)
        for scope in view.scopes
        if scope.listed
        for block in injected(scope.blocks)
        if block.triggers
    ]
    if not waiting:
        return []
    budget = policy.pins.triggered_budget_tokens
    noun = "block waits" if len(waiting) == 1 else "blocks wait"
    lines = [
        f"{len(waiting)} {noun} for keywords: each goes only with a request that mentions one, "
        f"together at most {budget:,} tokens a request (pins.triggered_budget_tokens; the "
        "lowest priority stays out first). /pin why shows what went with your last request."
    ]
    for number, item in enumerate(waiting, start=1):
        line = f"{number}. {_describe(item, view.group)}: about {block_tokens(item):,} tokens"
        lines += _previewed(view, line, item.block)
    return lines


def _kept_lines(view: StatusView) -> list[str]:
    """With injection off: the blocks that would be sent, without figures for what is not."""
    kept = [
        ScopedBlock(block, scope.name)
        for scope in view.scopes
        if scope.listed
        for block in injected(scope.blocks)
    ]
    if not kept:
        return []
    lines = ["Kept, but not sent:"]
    for number, item in enumerate(kept, start=1):
        chars = len(item.block.content)
        line = f"{number}. {_describe(item, view.group)}: {chars:,} characters"
        lines += _previewed(view, line, item.block)
    return lines


def _idle_lines(view: StatusView, policy: BlockPolicy, now: datetime) -> list[str]:
    lines = []
    for scope in view.scopes:
        if not scope.listed:
            continue
        for block in scope.blocks:
            if block.state is State.IDLE:
                described = _describe(ScopedBlock(block, scope.name), view.group)
                line = f"- {described}: {policy.idle_due(block, scope.calls, now)}"
                lines += _previewed(view, line, block)
    return ["Idle, not sent:", *lines] if lines else []


def _limit_line(scope: ScopeStatus, policy: BlockPolicy) -> str:
    pins = policy.pins
    chars = sum(len(b.content) for b in scope.blocks)
    budget = pins.max_total_chars
    characters = (
        f"{chars:,} of {budget:,} characters (pins.max_total_chars)"
        if budget
        else f"{chars:,} characters (no budget: pins.max_total_chars is 0)"
    )
    return (
        f"{scope.title}: {len(scope.blocks):,} of {pins.max_blocks_per_session:,} blocks, "
        f"{characters}."
    )


def _token_lines(view: StatusView, estimate: Estimate, policy: BlockPolicy) -> list[str]:
    parts = [
        f"{scope.title[0].lower() + scope.title[1:]} about {estimate.of_scope(scope.name):,}"
        for scope in view.scopes
        if any(cost.item.scope_name == scope.name for cost in estimate.blocks)
    ]
    if not parts:
        return ["Every request here carries no pinned blocks."]
    parts.append(
        f"the wrappers (titles, rules, boundaries; counted once) about {estimate.wrapper:,}"
    )
    lines = [
        f"Every request here carries about {estimate.total:,} tokens of pinned blocks: "
        + ", ".join(parts)
        + "."
    ]
    threshold = policy.pins.token_warning_threshold
    if warning := policy.token_warning(estimate.total):
        lines.append(warning)
    elif threshold:
        lines.append(f"That is within the warning threshold of {threshold:,} tokens.")
    return lines


def status_text(view: StatusView, policy: BlockPolicy, now: datetime) -> str:
    """The whole status view for the scopes that apply to the speaker here."""
    estimate = view.estimate
    lines = [INJECTION_OFF, *_kept_lines(view)] if estimate is None else _sent_lines(view, estimate)
    lines += _triggered_lines(view, policy) if estimate is not None else []
    lines += _idle_lines(view, policy, now)
    lines += [_limit_line(scope, policy) for scope in view.scopes if scope.listed]
    if estimate is not None:
        lines += _token_lines(view, estimate, policy)
    return "\n".join(lines)

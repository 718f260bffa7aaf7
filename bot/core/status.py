"""The `/pin status` view (`/sticky`): slots, characters against the budget, levels and states,
the tokens every request carries, and when each idle block becomes due for clean-up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bot.core.policy import BlockPolicy
from bot.core.render import Estimate
from storage.models import Block, Level, State


@dataclass(frozen=True)
class ScopeStatus:
    """One scope as the status view shows it."""

    title: str  # e.g. "Your blocks", "This group's shared blocks"
    blocks: Sequence[Block]
    calls: int  # the scope's model-call count so far
    tokens: int  # what the scope adds to every request here


def _scope_lines(scope: ScopeStatus, policy: BlockPolicy, now: datetime) -> list[str]:
    pins = policy.pins
    blocks = scope.blocks
    chars = sum(len(b.content) for b in blocks)
    budget = pins.max_total_chars
    budget_text = f"of {budget:,}" if budget else "(no budget)"
    levels = Counter(b.level for b in blocks)
    states = Counter(b.state for b in blocks)
    lines = [
        f"{scope.title}:",
        f"  blocks: {len(blocks):,} of {pins.max_blocks_per_session:,}",
        f"  characters: {chars:,} {budget_text}",
        f"  levels: {levels[Level.STRONG]:,} strong, {levels[Level.CONTEXT]:,} context",
        f"  states: {states[State.ACTIVE]:,} active, {states[State.PINNED]:,} pinned, "
        f"{states[State.IDLE]:,} idle",
        f"  tokens added to every request here: about {scope.tokens:,}",
    ]
    prioritised = [b for b in blocks if b.priority]
    if prioritised:
        listed = ", ".join(f"{b.label} {b.priority:+d}" for b in prioritised)
        lines.append(f"  priorities: {listed}")
    for block in blocks:
        if block.state is State.IDLE:
            lines.append(f"  idle '{block.label}': {policy.idle_due(block, scope.calls, now)}")
    return lines


def status_text(
    scopes: Sequence[ScopeStatus], estimate: Estimate, policy: BlockPolicy, now: datetime
) -> str:
    """The whole status view for the scopes that apply to the speaker here."""
    lines: list[str] = []
    for scope in scopes:
        lines.extend(_scope_lines(scope, policy, now))
    lines.append(
        f"Every request here carries about {estimate.total:,} tokens of pinned blocks "
        "(wrappers included)."
    )
    if warning := policy.token_warning(estimate.total):
        lines.append(warning)
    return "\n".join(lines)

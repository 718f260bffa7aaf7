"""The `/pin status` view (`/sticky`): slots, characters against the budget, levels and states,
the tokens every request carries, and when each idle block becomes due for clean-up."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.config import PinsConfig
from bot.core.render import Estimate
from storage.models import Block, Level, State

_DAY = timedelta(days=1)


@dataclass(frozen=True)
class ScopeStatus:
    """One scope as the status view shows it."""

    title: str  # e.g. "Your blocks", "This group's shared blocks"
    blocks: Sequence[Block]
    calls: int  # the scope's model-call count so far
    tokens: int  # what the scope adds to every request here


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _days_left(limit_days: int, idle_for: timedelta) -> int:
    return max(0, math.ceil((timedelta(days=limit_days) - idle_for) / _DAY))


def idle_due(block: Block, calls: int, pins: PinsConfig, now: datetime) -> str:
    """When an idle block becomes due for clean-up, in words."""
    idle_for = now - (block.idle_since or now)
    days = _days_left(pins.idle_retention_days, idle_for)
    further = calls - (block.idle_calls or 0)
    calls_left = max(0, pins.idle_retention_calls - further)
    hard = _days_left(pins.idle_hard_retention_days, idle_for)
    if hard == 0 or (days == 0 and calls_left == 0):
        return "due: deleted at the next model request here"
    return (
        f"deleted once {_plural(days, 'more day')} and {_plural(calls_left, 'more model call')} "
        f"have passed, or in {_plural(hard, 'day')} at the latest"
    )


def _scope_lines(scope: ScopeStatus, pins: PinsConfig, now: datetime) -> list[str]:
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
            lines.append(f"  idle '{block.label}': {idle_due(block, scope.calls, pins, now)}")
    return lines


def status_text(
    scopes: Sequence[ScopeStatus], estimate: Estimate, pins: PinsConfig, now: datetime
) -> str:
    """The whole status view for the scopes that apply to the speaker here."""
    lines: list[str] = []
    for scope in scopes:
        lines.extend(_scope_lines(scope, pins, now))
    lines.append(
        f"Every request here carries about {estimate.total:,} tokens of pinned blocks "
        "(wrappers included)."
    )
    threshold = pins.token_warning_threshold
    if threshold and estimate.total > threshold:
        lines.append(
            f"Warning: that is over the warning threshold of {threshold:,} tokens; consider "
            "shortening, idling or removing blocks."
        )
    return "\n".join(lines)

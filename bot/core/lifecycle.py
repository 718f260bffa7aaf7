"""The pin lifecycle at each model request: count the call for each scope, and delete the idle
blocks whose retention has passed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from bot.config import PinsConfig
from bot.core.clock import Clock, utc_now
from storage import Store
from storage.models import Block, State


def expired(block: Block, now: datetime, calls_before: int, pins: PinsConfig) -> bool:
    """Whether an idle block is due for deletion at a model request: idle for
    `idle_retention_days` and `idle_retention_calls` further calls, or `idle_hard_retention_days`.
    Active and pinned blocks never are."""
    if block.state is not State.IDLE or block.idle_since is None:
        return False
    idle_for = now - block.idle_since
    if idle_for >= timedelta(days=pins.idle_hard_retention_days):
        return True
    further_calls = calls_before - (block.idle_calls or 0)
    return (
        idle_for >= timedelta(days=pins.idle_retention_days)
        and further_calls >= pins.idle_retention_calls
    )


class Lifecycle:
    """Call counting and idle cleanup for the scopes of each model request."""

    def __init__(self, store: Store, pins: PinsConfig, clock: Clock = utc_now) -> None:
        self._store = store
        self._pins = pins
        self._clock = clock

    async def blocks_for_request(self, scopes: Sequence[str]) -> list[Block]:
        """Count one model call for each scope, delete its expired idle blocks, and return the
        blocks left (idle ones included; rendering leaves those out)."""
        blocks, before = await self._store.start_model_call(scopes)
        now = self._clock()
        idle = State.IDLE  # most blocks are not idle: skip the call for them (hot path)
        gone = {
            b.id
            for b in blocks
            if b.state is idle and expired(b, now, before.get(b.scope, 0), self._pins)
        }
        if gone:
            await self._store.delete_blocks(gone)
            blocks = [b for b in blocks if b.id not in gone]
        return blocks

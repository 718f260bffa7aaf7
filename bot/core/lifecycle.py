"""The pin lifecycle at each model request: count the call for each scope, and delete the idle
blocks whose retention has passed."""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.clock import Clock, utc_now
from bot.core.policy import BlockPolicy
from storage.blocks import BlockStore
from storage.models import Block, State


class Lifecycle:
    """Call counting and idle cleanup for the scopes of each model request."""

    def __init__(self, store: BlockStore, policy: BlockPolicy, clock: Clock = utc_now) -> None:
        self._store = store
        self._policy = policy
        self._clock = clock

    async def blocks_for_request(self, scopes: Sequence[str]) -> list[Block]:
        """Count one model call for each scope, delete its expired idle blocks, and return the
        blocks left (idle ones included; rendering leaves those out)."""
        blocks, before = await self._store.start_model_call(scopes)
        now = self._clock()
        idle = State.IDLE  # most blocks are not idle: skip the call for them (hot path)
        gone = [
            b
            for b in blocks
            if b.state is idle and self._policy.expired(b, now, before.get(b.scope, 0))
        ]
        if gone:  # kept as versions: the user can bring them back
            await self._store.delete_expired(gone, now=now)
            ids = {b.id for b in gone}
            blocks = [b for b in blocks if b.id not in ids]
        return blocks

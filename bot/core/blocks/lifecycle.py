"""The pin lifecycle at each model request: count the call for each scope, turn the blocks
whose end has passed idle, and delete the idle blocks whose retention has passed (changes of
the clean-up's, reviewed like any other); and the removal of blocks the system decides on, for
the clean-up and retention alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from bot.clock import Clock, utc_now
from bot.core.blocks.ops import BlockOps
from bot.core.blocks.review import BlockPolicy
from bot.core.people import is_shared_scope
from bot.secrets import redact
from storage import Store
from storage.changes import Applied
from storage.errors import Conflict
from storage.models import (
    Author,
    Block,
    BlockChange,
    BlockState,
    Channel,
    Seen,
    State,
    Wanted,
    label_key,
)

CLEANUP = Author("cleanup", Channel.CLEANUP)


@dataclass(frozen=True)
class ForRequest:
    """The blocks of a request's scopes (idle ones included: rendering leaves those out), and
    those that ended with this request (now idle): their owners are told once, now."""

    blocks: list[Block]
    ended: list[Block]


class Lifecycle:
    """Call counting and idle cleanup for the scopes of each model request."""

    def __init__(self, store: Store, policy: BlockPolicy, clock: Clock = utc_now) -> None:
        self._store, self._clock = store, clock
        self._ops = BlockOps(store, policy, clock)

    async def blocks_for_request(self, scopes: Sequence[str]) -> ForRequest:
        """Count one model call for each scope, turn its ended blocks idle, delete its expired
        idle blocks, and return the blocks left, with those that ended now."""
        blocks, before = await self._store.start_model_call(scopes)
        now = self._clock()
        ended, gone = [], []
        idle, expired = State.IDLE, self._ops.policy.expired
        for b in blocks:  # one pass: most blocks neither end nor are idle (hot path)
            if b.ends_at is not None and b.ends_at <= now and b.state is not idle:
                ended.append(b)
            elif b.state is idle and expired(b, now, before.get(b.scope, 0)):
                gone.append(b)
        if ended and await _end(self._ops, ended):
            now_idle = {b.id for b in ended}
            blocks = [_idled(b, now) if b.id in now_idle else b for b in blocks]
        else:
            ended = []
        if gone and await self._remove(gone):
            ids = {b.id for b in gone}
            blocks = [b for b in blocks if b.id not in ids]
        return ForRequest(blocks, ended)

    async def _remove(self, gone: Sequence[Block]) -> bool:
        """Remove expired blocks (kept as versions: the user can bring them back); False when
        one changed meanwhile (it is looked at again at the next request) or the review
        refused."""
        return await remove_blocks(self._ops, gone)


def _idled(block: Block, now: datetime) -> Block:
    """An ended block as the clean-up left it: idle from now."""
    return dataclasses.replace(block, state=State.IDLE, idle_since=now)


async def _end(ops: BlockOps, ended: Sequence[Block]) -> bool:
    """Turn blocks whose end passed idle as one change per scope, the clean-up's: idle from
    now, when their owner is told, so that they age from then as idle blocks do (one that
    ended long ago is not deleted the turn after the notice); False when one changed meanwhile
    or the review refused (nothing changes then; they are looked at again at the next
    request)."""
    idle = await _cleanup(
        ops, ended, lambda b: dataclasses.replace(BlockState.of(b), state=State.IDLE)
    )
    return bool(idle)


async def remove_blocks(ops: BlockOps, gone: Sequence[Block]) -> bool:
    """Remove blocks the system decided on (the idle clean-up, retention) as one change per
    scope, the clean-up's, reviewed through ops with the system's rights and written like any
    other, each only if it is still as read, all in one transaction; False when one changed
    meanwhile or the review refused (nothing is removed then)."""
    return await _cleanup(ops, gone, lambda b: None) is not None


async def _cleanup(
    ops: BlockOps, blocks: Sequence[Block], state: Callable[[Block], BlockState | None]
) -> list[Applied] | None:
    """Bring each of blocks to state(block) (None: removed) as one change per scope, the
    clean-up's, each only if still as read, all in one transaction: what changed, or None
    when one changed meanwhile or the review refused (nothing changed then)."""
    by_scope: dict[str, list[Block]] = {}
    for block in blocks:
        by_scope.setdefault(block.scope, []).append(block)
    changes = [
        BlockChange(
            scope,
            tuple(Wanted(b.label, state(b)) for b in found),
            CLEANUP,
            {label_key(b.label): Seen(b, None) for b in found},
            is_shared_scope(scope),
            mask=redact,
        )
        for scope, found in by_scope.items()
    ]
    try:
        done = await ops.commit_all(changes)
    except Conflict:
        return None
    return done if isinstance(done, list) else None

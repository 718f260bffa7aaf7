"""Block changes as the storage tests make them: each a `BlockChange` through the store's one
write, built the way the core builds them (an add reviewed against the label's absence, any
other change against the block as the test read it)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from bot.core.blocks.transfer import import_change
from storage import Store
from storage.changes import Applied
from storage.models import (
    ABSENT,
    Author,
    Block,
    BlockChange,
    BlockState,
    ChangeKind,
    Level,
    Limits,
    NewBlock,
    Seen,
    State,
    Version,
    Wanted,
    label_key,
)


async def _seen(store: Store, block: Block) -> dict[str, Seen | None]:
    """The block as the test read it, with its label's mark as the store has it now."""
    _, marks = await store.scope_now(block.scope)
    key = label_key(block.label)
    return {key: Seen(block, marks.get(key, ""))}


async def insert(
    store: Store,
    new: NewBlock,
    *,
    now: datetime,
    limits: Limits,
    by: Author,
    audited: bool = False,
) -> None:
    """Add a block, as `/pin add` does."""
    state = BlockState(
        *(new.content, new.level, new.state, new.priority, new.sensitive),
        *(new.triggers, new.ends_at),
    )
    wanted = (Wanted(new.label, state),)
    added = BlockChange(new.scope, wanted, by, {label_key(new.label): ABSENT}, audited)
    await store.apply_change(added, now=now, limits=limits)


async def update(
    store: Store,
    block: Block,
    *,
    now: datetime,
    limits: Limits,
    by: Author,
    audited: bool = False,
    content: str | None = None,
    level: Level | None = None,
    state: State | None = None,
    priority: int | None = None,
) -> None:
    """Change fields of a block as the test read it (None: as it was)."""
    after = BlockState(
        block.content if content is None else content,
        level or block.level,
        state or block.state,
        block.priority if priority is None else priority,
        block.sensitive,
        block.triggers,
        block.ends_at,
    )
    seen = await _seen(store, block)
    changed = BlockChange(block.scope, (Wanted(block.label, after),), by, seen, audited)
    await store.apply_change(changed, now=now, limits=limits)


async def delete(
    store: Store, block: Block, *, now: datetime, by: Author, audited: bool = False
) -> None:
    """Remove a block as the test read it."""
    seen = await _seen(store, block)
    removal = BlockChange(block.scope, (Wanted(block.label, None),), by, seen, audited)
    await store.apply_change(removal, now=now, limits=Limits(20))


async def clear(
    store: Store, scope: str, *, now: datetime, by: Author, audited: bool = False
) -> int:
    """Remove every block of a scope, as one change; returns how many went."""
    blocks, marks = await store.scope_now(scope)
    seen = {label_key(b.label): Seen(b, marks[label_key(b.label)]) for b in blocks}
    wanted = tuple(Wanted(b.label, None) for b in blocks)
    cleared = BlockChange(scope, wanted, by, seen, audited, ChangeKind.CLEAR)
    return len(await store.apply_change(cleared, now=now, limits=Limits(20)))


async def replace(
    store: Store,
    scopes: dict[str, tuple[int, list[Block]]],
    *,
    now: datetime,
    by: Author,
    audited: Collection[str] = (),
    versions: dict[str, list[Version]] | None = None,
) -> int:
    """Make each scope hold exactly these blocks (an import); returns blocks written."""
    changes = []
    for scope, (calls, blocks) in scopes.items():
        now_there = await store.scope_now(scope)
        history = None if versions is None else versions.get(scope)
        audit = scope in audited
        changes.append(
            import_change(scope, calls, blocks, now_there, history, audited=audit, by=by)
        )
    await store.apply_changes(changes, now=now, limits=Limits(1000))
    return sum(len(blocks) for _, blocks in scopes.values())


async def bring(
    store: Store,
    scope: str,
    wanted: Sequence[Wanted],
    *,
    now: datetime,
    limits: Limits,
    by: Author,
    undoes: str | None = None,
    audited: bool = False,
) -> list[Applied]:
    """Bring labels to wanted states as one change (an undo or a restore)."""
    blocks, marks = await store.scope_now(scope)
    by_key = {label_key(b.label): b for b in blocks}
    seen: dict[str, Seen | None] = {}
    for want in wanted:
        key = label_key(want.label)
        block = by_key.get(key)
        seen[key] = None if block is None else Seen(block, marks[key])
    brought = BlockChange(scope, tuple(wanted), by, seen, audited, undoes=undoes)
    return await store.apply_change(brought, now=now, limits=limits)

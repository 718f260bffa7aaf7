"""The one write of blocks: a reviewed `BlockChange` applied in one transaction — the blocks'
rows, a version of each label it changes, the audit trail of shared scopes, the proposal it
decides and the operation it undoes — or nothing at all. A change is refused (`Stale`) when a
label it was reviewed against changed in between, compared by the label's newest version, so a
decision is never taken on blocks that are no longer there.

One label's add, edit or removal (most changes) is one guarded batch, as cheap as a plain
write; everything else reads the scope inside the transaction that writes it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from storage import models, rows
from storage.dialect import Database, Executor, Step
from storage.errors import AlreadyDecided, Conflict, LabelTaken, LimitReached, OverBudget, Stale
from storage.models import (
    Block,
    BlockChange,
    BlockState,
    ChangeKind,
    Limits,
    ProposalStatus,
    Seen,
    State,
    Wanted,
)
from storage.rows import BLOCK_COLUMNS, block_from_row, ts
from storage.versions import INSERT as VERSION_INSERT
from storage.versions import new_op, recorded, version_row, write_steps

# A label's mark: the operation of its newest kept version ('' when none is kept). Versions are
# never rewritten, so two reads with the same mark saw the same block.
MARK = (
    "COALESCE((SELECT v.op FROM block_versions v WHERE v.scope = blocks.scope AND "
    "v.label_key = blocks.label_key ORDER BY v.id DESC LIMIT 1), '')"
)
_SCOPE_NOW = f"SELECT {BLOCK_COLUMNS}, {MARK} FROM blocks WHERE scope = ?"
# The scope's limits are held in the statement itself, so a write that would break one
# changes nothing, whoever wrote in between.
_INSERT = (
    "INSERT INTO blocks (scope, label, label_key, content, level, state, priority, created_at, "
    "updated_at, sensitive) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
    "WHERE (SELECT COUNT(*) FROM blocks WHERE scope = ?) < ? "
    "AND (? = 0 OR (SELECT COALESCE(SUM(length(content)), 0) FROM blocks WHERE scope = ?) "
    "+ length(?) <= ?) ON CONFLICT (scope, label_key) DO NOTHING"
)
# The budget refuses only a change that makes the scope larger and over budget.
_UPDATE = (
    "UPDATE blocks SET content = ?, level = ?, state = ?, priority = ?, sensitive = ?, "
    "updated_at = ?, {idle}, "
    f"rev = rev + 1 WHERE id = ? AND rev = ? AND {MARK} = ? "
    "AND (? = 0 OR length(?) <= length(content) OR "
    "(SELECT COALESCE(SUM(length(b.content)), 0) FROM blocks b WHERE b.scope = blocks.scope) "
    "- length(content) + length(?) <= ?)"
)
_GOING_IDLE = (
    "idle_since = ?, idle_calls = (SELECT COALESCE(MAX(calls), 0) FROM scope_calls "
    "WHERE scope = blocks.scope)"
)
_DELETE = f"DELETE FROM blocks WHERE id = ? AND rev = ? AND {MARK} = ?"
_DECIDE = (
    "UPDATE proposals SET status = ?, outcome = '', decided_by = ?, decided_at = ? "
    "WHERE group_scope = ? AND number = ? AND status = 'pending'"
)


@dataclass(frozen=True, slots=True)
class Applied:
    """One label a change changed: its label, the block before (None: there was none) and
    the state after (None: removed)."""

    label: str
    before: Block | None
    after: BlockState | None


@dataclass(frozen=True, slots=True)
class _Entry:
    """One label's part of a plan; changed is False for an imported block whose state is as it
    was (its times are still written)."""

    label: str
    before: Block | None
    wanted: Wanted
    changed: bool


def kinds(
    before: Block | BlockState | None, after: BlockState | None
) -> list[tuple[ChangeKind, str]]:
    """What changing before into after is, in the audit trail's words: one (kind, detail) per
    aspect that differs (an add and a removal are one each)."""
    if before is None:
        assert after is not None
        pinned = " pinned" if after.state is State.PINNED else ""
        return [(ChangeKind.ADD, after.level.value + pinned + (" sensitive" * after.sensitive))]
    if after is None:
        return [(ChangeKind.REMOVE, "")]
    found = []
    if after.content != before.content:
        found.append((ChangeKind.EDIT, ""))
    if after.level is not before.level:
        found.append((ChangeKind.LEVEL, after.level.value))
    if after.state is not before.state:
        found.append((ChangeKind.STATE, after.state.value))
    if after.priority != before.priority:
        found.append((ChangeKind.PRIORITY, str(after.priority)))
    if after.sensitive != before.sensitive:
        found.append((ChangeKind.SENSITIVE, "on" if after.sensitive else "off"))
    return found


def _audit(change: BlockChange, at: datetime, entries: list[tuple[Any, ...]]) -> tuple[Step, ...]:
    if not change.audited or not entries:
        return ()
    return (
        Step(
            rows.AUDIT_INSERT, rows.audit_rows(change.scope, change.change, at, entries), many=True
        ),
    )


class ChangeStore(Protocol):
    """The one way blocks change."""

    _db: Database

    async def flush_calls(self) -> None: ...

    async def scope_now(self, scope: str) -> tuple[list[Block], dict[str, str]]:
        """A scope's blocks (oldest first) and each label's mark, as a change is reviewed
        against them."""
        found = await self._db.fetch(f"{_SCOPE_NOW} ORDER BY created_at, id", scope)
        return [block_from_row(row) for row in found], {
            models.label_key(row[2]): row[13] for row in found
        }

    async def apply_change(
        self, change: BlockChange, *, now: datetime, limits: Limits
    ) -> list[Applied]:
        """Apply one reviewed change, committed on return; what changed, per label. Stale when
        a label it was reviewed against changed since, LabelTaken when a label it adds was
        taken meanwhile, LimitReached or OverBudget when the scope would grow past a limit,
        AlreadyDecided when the proposal it carries out was decided first: then nothing is
        written."""
        if _one_label(change):
            return await self._apply_one(change, now=now, limits=limits)
        return await self.apply_changes([change], now=now, limits=limits)

    async def apply_changes(
        self, changes: Sequence[BlockChange], *, now: datetime, limits: Limits
    ) -> list[Applied]:
        """Apply reviewed changes of one or more scopes as one operation in one transaction
        (an import): all of them, or (raising as apply_change does) none."""
        await self.flush_calls()  # an idle mark records the scope's current count
        op, applied = new_op(), []
        async with self._db.transaction(*{c.scope for c in changes}) as tx:
            for change in changes:
                applied += await _apply_in(tx, change, op, now, limits)
        return applied

    async def _apply_one(
        self, change: BlockChange, *, now: datetime, limits: Limits
    ) -> list[Applied]:
        """One label's add, edit or removal as one guarded batch."""
        wanted = change.wanted[0]
        key = models.label_key(wanted.label)
        seen = change.seen.get(key)
        before = seen.block if seen is not None else None
        mark = seen.mark if seen is not None and seen.mark is not None else ""
        after = wanted.state
        if before is not None and after == BlockState.of(before):
            return []
        found = kinds(before, after)
        op = new_op()
        audited = change.audit_contents(before, after)
        entries = [
            (kind, before.label if before else wanted.label, *audited, detail)
            for kind, detail in found
        ]
        label = before.label if before else wanted.label
        version = version_row(
            op, change.scope, label, found[0][0], change.change, now, before, found[0][1]
        )
        kept = (*recorded([version], limits.versions), *_audit(change, now, entries))
        if before is None:
            assert after is not None
            await self._insert(change.scope, wanted.label, after, kept, now=now, limits=limits)
        elif after is None:
            delete = Step(_DELETE, (before.id, before.rev, mark))
            if not await self._db.write(delete, *kept, lock=(change.scope,), guard=True):
                raise Stale(before.label)
        else:
            await self._update(Seen(before, mark), after, kept, now=now, limits=limits)
        return [Applied(label, before, after)]

    async def _insert(
        self,
        scope: str,
        label: str,
        after: BlockState,
        kept: Sequence[Step],
        *,
        now: datetime,
        limits: Limits,
    ) -> None:
        stamp, key, budget = ts(now), models.label_key(label), limits.max_total_chars
        args = (
            *(scope, label, key, after.content, after.level.value, after.state.value),
            *(after.priority, stamp, stamp, int(after.sensitive), scope, limits.max_blocks),
            *(budget, scope),
            *(after.content, budget),
        )
        if await self._db.write(Step(_INSERT, args), *kept, lock=(scope,), guard=True):
            return
        row = await self._db.fetchrow(
            "SELECT (SELECT label FROM blocks WHERE scope = ? AND label_key = ?), COUNT(*), "
            "COALESCE(SUM(length(content)), 0) FROM blocks WHERE scope = ?",
            *(scope, key, scope),
        )
        assert row is not None
        if row[0] is not None:
            raise LabelTaken(row[0])
        if row[1] >= limits.max_blocks:
            raise LimitReached(limits.max_blocks)
        total = int(row[2]) + len(after.content)
        if budget and total > budget:
            raise OverBudget(total, budget)
        raise Conflict("the scope changed while adding")

    async def _update(
        self, seen: Seen, after: BlockState, kept: Sequence[Step], *, now: datetime, limits: Limits
    ) -> None:
        block = seen.block
        if after.state is State.IDLE and block.state is not State.IDLE:
            await self.flush_calls()  # the idle mark records the scope's current count
            idle, idle_args = _GOING_IDLE, [ts(now)]
        elif after.state is State.IDLE:
            idle, idle_args = "idle_since = idle_since", []
        else:
            idle, idle_args = "idle_since = NULL, idle_calls = NULL", []
        budget, content = limits.max_total_chars, after.content
        args = (
            *(content, after.level.value, after.state.value, after.priority, int(after.sensitive)),
            *(ts(now), *idle_args),
            *(block.id, block.rev, seen.mark, budget, content, content, budget),
        )
        update = Step(_UPDATE.format(idle=idle), args)
        if await self._db.write(update, *kept, lock=(block.scope,), guard=True):
            return
        row = await self._db.fetchrow(
            f"SELECT {MARK}, (SELECT COALESCE(SUM(length(b.content)), 0) FROM blocks b "
            "WHERE b.scope = blocks.scope) - length(content), rev FROM blocks WHERE id = ?",
            block.id,
        )
        if row is None or row[0] != seen.mark or row[2] != block.rev:
            raise Stale(block.label)
        total = int(row[1]) + len(content)
        if budget and total > budget:
            raise OverBudget(total, budget)
        raise Conflict(f"block {block.label!r} changed while saving")


def _one_label(change: BlockChange) -> bool:
    """Whether the change is one label's add, edit or removal with nothing besides."""
    if (
        len(change.wanted) != 1
        or len(change.seen) != 1
        or change.kind is not None
        or change.undoes is not None
        or change.calls is not None
        or change.history is not None
        or (change.change.origin is not None and change.proposal is not None)
    ):
        return False
    wanted = change.wanted[0]
    key = models.label_key(wanted.label)
    if key not in change.seen:
        return False
    seen = change.seen[key]
    if change.turns_sensitive(seen.block if seen else None, wanted.state):
        return False  # the label's earlier audit entries are masked in its transaction
    if seen is not None:
        return seen.mark is not None
    return wanted.state is not None and wanted.created_at is None and wanted.updated_at is None


async def _apply_in(
    tx: Executor, change: BlockChange, op: str, now: datetime, limits: Limits
) -> list[Applied]:
    """A change's writes inside a transaction that holds its scope's lock."""
    scope = change.scope
    found = await tx.fetch(_SCOPE_NOW, scope)
    current = {models.label_key(row[2]): Seen(block_from_row(row), row[13]) for row in found}
    for key, seen in change.seen.items():
        now_seen = current.get(key)
        if seen is None and now_seen is not None:
            raise Stale(now_seen.block.label)
        if isinstance(seen, Seen) and (
            now_seen is None
            or (seen.mark is not None and now_seen.mark != seen.mark)
            or now_seen.block.id != seen.block.id
            or now_seen.block.rev != seen.block.rev
        ):
            raise Stale(seen.block.label)
    plan = _plan({key: seen.block for key, seen in current.items()}, change)
    _check(current, plan, limits)
    steps: list[Step] = []
    if (number := change.proposal) is not None:
        decided = (ProposalStatus.APPLIED.value, change.change.actor, ts(now), scope, number)
        if not await tx.execute(_DECIDE, *decided):
            raise AlreadyDecided(number)
    calls = await tx.fetchval("SELECT calls FROM scope_calls WHERE scope = ?", scope)
    versions, audit = [], []
    for entry in plan:
        if entry.changed:
            found_kinds = (
                [(change.kind, "")] if change.kind else kinds(entry.before, entry.wanted.state)
            )
            versions.append(
                version_row(
                    op,
                    scope,
                    entry.label,
                    found_kinds[0][0],
                    change.change,
                    now,
                    entry.before,
                    found_kinds[0][1],
                )
            )
            audit += _audit_entries(change, entry, found_kinds)
            if change.turns_sensitive(entry.before, entry.wanted.state):
                steps += await _mask_audit(tx, change, entry.label)
        steps.append(_write(scope, entry, now, calls, change.kind is ChangeKind.IMPORT))
    if change.undoes is not None:
        steps.append(
            Step(
                "UPDATE block_versions SET undone_by = ? WHERE scope = ? AND op = ?",
                (op, scope, change.undoes),
            )
        )
    if change.history is not None:
        steps.append(Step("DELETE FROM block_versions WHERE scope = ?", (scope,)))
        steps.append(Step(VERSION_INSERT, _given(change.history), many=True))
        versions = []
    if change.calls is not None:
        steps.append(
            Step(
                "INSERT INTO scope_calls (scope, calls) VALUES (?, ?) "
                "ON CONFLICT (scope) DO UPDATE SET calls = excluded.calls",
                (scope, change.calls),
            )
        )
    await write_steps(
        tx, [*steps, *recorded(versions, limits.versions), *_audit(change, now, audit)]
    )
    return [Applied(e.label, e.before, e.wanted.state) for e in plan if e.changed]


def _audit_entries(
    change: BlockChange, entry: _Entry, found: list[tuple[ChangeKind, str]]
) -> list[tuple[Any, ...]]:
    """The audit entries of one label's change (an import that keeps a block's content, only
    its times or state, makes none)."""
    before, after = entry.before, entry.wanted.state
    if (
        change.kind is ChangeKind.IMPORT
        and before is not None
        and after is not None
        and before.content == after.content
    ):
        return []
    audited = change.audit_contents(before, after)
    return [(kind, entry.label, *audited, detail) for kind, detail in found]


async def _mask_audit(tx: Executor, change: BlockChange, label: str) -> list[Step]:
    """The label's earlier entries in its scope's audit trail, masked: a label made sensitive
    keeps nothing of what it hid where every member reads the trail."""
    key = models.label_key(label)
    found = await tx.fetch(
        "SELECT id, label, old_content, new_content FROM shared_audit WHERE group_scope = ?",
        change.scope,
    )
    masked = [
        (*(None if text is None else change.mask(text) for text in (old, new)), row_id)
        for row_id, row_label, old, new in found
        if models.label_key(row_label) == key
    ]
    if not masked:
        return []
    update = "UPDATE shared_audit SET old_content = ?, new_content = ? WHERE id = ?"
    return [Step(update, masked, many=True)]


def _plan(current: Mapping[str, Block], change: BlockChange) -> list[_Entry]:
    """Each label the change writes: the ones whose state would change, and (an import) every
    imported block, whose times are written as given."""
    plan = []
    importing = change.kind is ChangeKind.IMPORT
    for want in change.wanted:
        block = current.get(models.label_key(want.label))
        if block is None and want.state is None:
            continue
        changed = block is None or want.state != BlockState.of(block)
        if changed or (importing and want.state is not None):
            plan.append(_Entry(block.label if block else want.label, block, want, changed))
    return plan


def _check(current: Mapping[str, Seen], plan: Sequence[_Entry], limits: Limits) -> None:
    """Refuse a plan that grows the scope past its block limit or its character budget."""
    count = len(current)
    chars = sum(len(seen.block.content) for seen in current.values())
    new_count, new_chars = count, chars
    for entry in plan:
        before, after = entry.before, entry.wanted.state
        new_count += (after is not None) - (before is not None)
        new_chars += (len(after.content) if after else 0) - (len(before.content) if before else 0)
    if new_count > limits.max_blocks and new_count > count:
        raise LimitReached(limits.max_blocks)
    budget = limits.max_total_chars
    if budget and new_chars > budget and new_chars > chars:
        raise OverBudget(new_chars, budget)


def _write(scope: str, entry: _Entry, now: datetime, calls: int | None, importing: bool) -> Step:
    """The statement bringing one label to its wanted state. A block brought into the idle state
    counts its idle time from now, unless an import gives it."""
    before, want = entry.before, entry.wanted
    after = want.state
    if after is None:
        assert before is not None
        return Step("DELETE FROM blocks WHERE id = ?", (before.id,))
    stamp = ts(now)
    idle = after.state is State.IDLE
    idle_since = (ts(want.idle_since) if want.idle_since else stamp) if idle else None
    idle_calls = (
        (want.idle_calls if want.idle_calls is not None else int(calls or 0)) if idle else None
    )
    updated = ts(want.updated_at) if want.updated_at else stamp
    values = (
        *(after.content, after.level.value, after.state.value, after.priority),
        int(after.sensitive),
    )
    if before is not None and idle and before.state is State.IDLE and want.idle_since is None:
        # A block that stays idle keeps its idle mark: its retention runs on.
        idle_since = None if before.idle_since is None else ts(before.idle_since)
        idle_calls = before.idle_calls
    if before is not None:
        created = ts(want.created_at) if importing and want.created_at else ts(before.created_at)
        return Step(
            "UPDATE blocks SET content = ?, level = ?, state = ?, priority = ?, sensitive = ?, "
            "created_at = ?, updated_at = ?, idle_since = ?, idle_calls = ?, rev = rev + 1 "
            "WHERE id = ?",
            (*values, created, updated, idle_since, idle_calls, before.id),
        )
    return Step(
        "INSERT INTO blocks (scope, label, label_key, content, level, state, priority, "
        "sensitive, created_at, updated_at, idle_since, idle_calls) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            *(scope, entry.label, models.label_key(entry.label), *values),
            *(ts(want.created_at) if want.created_at else stamp, updated, idle_since, idle_calls),
        ),
    )


def _given(versions: Sequence[models.Version]) -> list[tuple[Any, ...]]:
    """Rows for versions exactly as given (an import of an export made with history)."""
    found = []
    for v in versions:
        change = models.Change(v.actor, v.channel, v.origin)
        row = version_row(
            v.op, v.scope, v.label, v.kind, change, v.at, v.before, v.detail, v.created_at
        )
        found.append((*row[:-1], v.undone_by))
    return found

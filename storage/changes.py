"""Every write of blocks and their versions: each statement that writes the `blocks` or
`block_versions` table is here (the schema's migrations and a transfer's raw copy of a whole
database aside).

A reviewed `BlockChange` is applied in one transaction — the blocks' rows, a version of each
label it changes, the audit trail of shared scopes, the proposal it decides and the operation it
undoes — or not at all. A change is refused (`Stale`) when a label it was reviewed against
changed in between, compared by the label's newest version, so a decision is never taken on
blocks that are no longer there.

Each label's statement is built in one place (`_write`) for every change; one label's add, edit
or removal (most changes) is that statement holding what the change was reviewed against and
the scope's limits, one batch as cheap as a plain write; every other change reads its scope in
the transaction that writes it. Besides: a group's move to a new key (`move_group`) and the
retention of versions (`forget_versions_before`, and a removed group's whole
`group_versions_forgotten`)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn, Protocol

from storage import models, rows
from storage.dialect import Database, Executor, Step
from storage.errors import AlreadyDecided, Conflict, LabelTaken, LimitReached, OverBudget, Stale
from storage.models import (
    WITHHELD,
    Author,
    Block,
    BlockChange,
    BlockState,
    ChangeKind,
    Channel,
    Limits,
    ProposalStatus,
    Seen,
    Sql,
    State,
    Wanted,
)
from storage.rows import BLOCK_COLUMNS, BLOCK_WIDTH, block_from_row, encode_triggers, ts

# A label's mark: the operation of its newest kept version ('' when none is kept). Versions are
# never rewritten, so two reads with the same mark saw the same block.
MARK = (
    "COALESCE((SELECT v.op FROM block_versions v WHERE v.scope = blocks.scope AND "
    "v.label_key = blocks.label_key ORDER BY v.id DESC LIMIT 1), '')"
)
_SCOPE_NOW = f"SELECT {BLOCK_COLUMNS}, {MARK} FROM blocks WHERE scope = ?"
_INSERT_BLOCK = (
    "INSERT INTO blocks (scope, label, label_key, content, level, state, priority, sensitive, "
    "triggers, ends_at, updated_at, created_at, idle_since, idle_calls) "
    f"SELECT {', '.join('?' * 12)}"
)
# A scope's blocks, characters and model calls, as a statement holds them.
_COUNT = "(SELECT COUNT(*) FROM blocks b WHERE b.scope = ?)"
_CHARS = "(SELECT COALESCE(SUM(length(b.content)), 0) FROM blocks b WHERE b.scope = ?)"
_CALLS = "(SELECT COALESCE(MAX(calls), 0) FROM scope_calls WHERE scope = ?)"
_DECIDE = (
    "UPDATE proposals SET status = ?, outcome = '', decided_by = ?, decided_at = ? "
    "WHERE group_scope = ? AND number = ? AND status = 'pending'"
)
_UNDONE = "UPDATE block_versions SET undone_by = ? WHERE scope = ? AND op = ?"
_SET_CALLS = (
    "INSERT INTO scope_calls (scope, calls) VALUES (?, ?) "
    "ON CONFLICT (scope) DO UPDATE SET calls = excluded.calls"
)
_VERSION_COLUMNS = (
    "op, scope, label_key, label, kind, detail, actor, channel, origin, at, existed, content, "
    "level, state, priority, sensitive, triggers, ends_at, created_at, undone_by"
)
VERSION_INSERT = f"INSERT INTO block_versions ({_VERSION_COLUMNS}) VALUES ({', '.join('?' * 20)})"
# Everything older than the label's newest `keep`: one index seek finds the cut, and nothing is
# deleted (or read) while the label has fewer versions, as it has on most changes.
_KEEP_NEWEST = (
    "DELETE FROM block_versions WHERE scope = ? AND label_key = ? AND id <= "
    "(SELECT id FROM block_versions WHERE scope = ? AND label_key = ? "
    "ORDER BY id DESC LIMIT 1 OFFSET ?)"
)
# The newest version of each label that has no block now and was sensitive when removed.
_REMOVED_SENSITIVE = (
    "SELECT v.id FROM block_versions v WHERE v.existed = 1 AND v.sensitive = 1 "
    "AND v.id = (SELECT MAX(w.id) FROM block_versions w "
    "WHERE w.scope = v.scope AND w.label_key = v.label_key) "
    "AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.scope = v.scope AND b.label_key = v.label_key)"
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
    was (its times are still written); mark is the label's as the change saw it."""

    label: str
    before: Block | None
    wanted: Wanted
    changed: bool
    mark: str | None = None


def new_op() -> str:
    """A new operation's id: the versions it writes are undone together."""
    return uuid.uuid4().hex


def version_row(
    op: str,
    scope: str,
    label: str,
    kind: ChangeKind,
    change: Author,
    at: datetime,
    before: Block | BlockState | None,
    detail: str = "",
    created_at: datetime | None = None,
) -> tuple[Any, ...]:
    """A row of block_versions: the state before a change of kind to label, and the change."""
    state = BlockState.of(before) if isinstance(before, Block) else before
    if isinstance(before, Block):
        created_at = before.created_at
    origin = change.origin.encode() if change.origin else None
    head = (op, scope, models.label_key(label), label, kind.value, detail)
    who = (change.actor, change.channel.value, origin, ts(at))
    if state is None:
        return (*head, *who, 0, None, None, None, None, 0, None, None, None, None)
    ends_at = None if state.ends_at is None else ts(state.ends_at)
    after = (
        *(state.content, state.level.value, state.state.value, state.priority),
        *(int(state.sensitive), encode_triggers(state.triggers), ends_at),
    )
    return (*head, *who, 1, *after, None if created_at is None else ts(created_at), None)


def _versions(rows_: Sequence[tuple[Any, ...]], keep: int) -> tuple[Step, ...]:
    """The steps writing version rows and keeping each of their labels' newest `keep`."""
    if not rows_:
        return ()
    labels = sorted({(row[1], row[2]) for row in rows_})
    trims = [Step(_KEEP_NEWEST, (scope, key, scope, key, keep)) for scope, key in labels]
    # One row (most changes) as a plain statement: a batch costs asyncpg a round trip more.
    one = len(rows_) == 1
    insert = Step(VERSION_INSERT, rows_[0] if one else list(rows_), many=not one)
    return (insert, *trims)


def kinds(
    before: Block | BlockState | None, after: BlockState | None
) -> list[tuple[ChangeKind, str]]:
    """What changing before into after is, in the audit trail's words: one (kind, detail) per
    aspect that differs (an add and a removal are one each, an add's keywords and end apart)."""
    if after is None:
        return [(ChangeKind.REMOVE, "")]
    found = []
    if before is None:
        pinned = " pinned" if after.state is State.PINNED else ""
        found.append(
            (ChangeKind.ADD, after.level.value + pinned + (" sensitive" * after.sensitive))
        )
    else:
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
    if after.triggers != (before.triggers if before else ()):
        found.append((ChangeKind.TRIGGERS, ", ".join(after.triggers) or "always"))
    if after.ends_at != (before.ends_at if before else None):
        ends = after.ends_at
        found.append((ChangeKind.ENDS, ends.isoformat(timespec="minutes") if ends else "never"))
    return found


def _audit(change: BlockChange, at: datetime, entries: list[tuple[Any, ...]]) -> tuple[Step, ...]:
    """The step adding entries to the scope's audit trail, where the change is audited: one
    per label changed (audit_entry)."""
    found = rows.audit_rows(change.scope, change.by, at, entries)
    return (Step(rows.AUDIT_INSERT, found, many=True),) if change.audited and entries else ()


class ChangeStore(Protocol):
    """The one way blocks and their versions change."""

    _db: Database

    async def flush_calls(self) -> None: ...

    async def scope_now(self, scope: str) -> tuple[list[Block], dict[str, str]]:
        """A scope's blocks (oldest first) and each label's mark, as a change is reviewed
        against them."""
        found = await self._db.fetch(f"{_SCOPE_NOW} ORDER BY created_at, id", scope)
        return [block_from_row(row) for row in found], {
            models.label_key(row[2]): row[BLOCK_WIDTH] for row in found
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
        (an import, an idle clean-up): all of them, or (raising as apply_change does) none."""
        await self.flush_calls()  # an idle mark records the scope's current count
        op, applied = new_op(), []
        async with self._db.transaction(*{c.scope for c in changes}) as tx:
            for change in changes:
                applied += await _apply_in(tx, change, op, now, limits)
        return applied

    async def _apply_one(
        self, change: BlockChange, *, now: datetime, limits: Limits
    ) -> list[Applied]:
        """One label's add, edit or removal in one batch, its scope not read first: the label's
        statement holds the label as seen and the scope's limits, and nothing is written where
        either fails (why is read then)."""
        (wanted,) = change.wanted
        seen = change.seen[models.label_key(wanted.label)]
        before = None if seen is None else seen.block
        if before is not None and wanted.state == BlockState.of(before):
            return []
        label = wanted.label if before is None else before.label
        entry = _Entry(label, before, wanted, True, None if seen is None else seen.mark)
        idle = wanted.state is not None and wanted.state.state is State.IDLE
        if idle and (before is None or before.state is not State.IDLE):
            await self.flush_calls()  # the idle mark records the scope's current count
        version, audit = _recorded(change, entry, new_op(), now)
        steps = (
            _write(change, entry, now, limits),
            *_versions([version], limits.versions),
            *_audit(change, now, audit),
        )
        if not await self._db.write(*steps, lock=(change.scope,), guard=True):
            await self._why_not(change, limits)
        return [Applied(label, before, wanted.state)]

    async def _why_not(self, change: BlockChange, limits: Limits) -> NoReturn:
        """Raise why one label's guarded write changed nothing, by its scope now: the label
        changed (Stale; LabelTaken for an add), a limit, or else Conflict."""
        current = _current(await self._db.fetch(_SCOPE_NOW, change.scope))
        key = models.label_key(change.wanted[0].label)
        if change.seen[key] is None and key in current:
            raise LabelTaken(current[key].block.label)
        _verify(change, current)
        _check(current, _plan(current, change), limits)
        raise Conflict("the scope changed while saving")

    async def move_group(
        self, old: str, new: str, *, members_prefix: str, sessions_prefix: str
    ) -> int:
        """Move a group's blocks, counters, audit trail, versions and history from the key old
        to new, in one transaction; returns how many blocks moved. The group's scopes are old
        and those starting with members_prefix, its history sessions old and those starting
        with sessions_prefix (both prefixes start with old, which is replaced by new).

        A block whose label already exists at the destination stays where it was, so nothing is
        overwritten or duplicated; moving twice moves nothing the second time.

        A move renames keys; it is no change of content: the platform gave the same chat a new
        id (a Telegram group that became a supergroup), and every block, version, audit entry
        and proposal keeps each word, time and author it had. Nobody decides anything a review
        could refuse, and no version is written, since there is nothing to undo: the versions
        move with their blocks, so each label's history and undo go on under the new key."""
        in_group = "(scope = ? OR substr(scope, 1, length(?)) = ?)"
        renamed = "CAST(? AS TEXT) || substr(scope, length(?) + 1)"
        group = (old, members_prefix, members_prefix)
        await self.flush_calls()
        async with self._db.transaction(old, new) as tx:
            moved = await tx.execute(
                f"UPDATE blocks SET scope = {renamed} WHERE {in_group} AND NOT EXISTS "
                "(SELECT 1 FROM blocks d WHERE d.scope = CAST(? AS TEXT) || "
                "substr(blocks.scope, length(?) + 1) AND d.label_key = blocks.label_key)",
                *(new, old, *group, new, old),
            )
            await tx.execute(
                f"INSERT INTO scope_calls (scope, calls) SELECT {renamed}, calls FROM scope_calls "
                f"WHERE {in_group} ON CONFLICT (scope) DO UPDATE SET "
                "calls = scope_calls.calls + excluded.calls",
                *(new, old, *group),
            )
            await tx.execute(f"DELETE FROM scope_calls WHERE {in_group}", *group)
            await tx.execute(
                "UPDATE shared_audit SET group_scope = ? WHERE group_scope = ?", new, old
            )
            await tx.execute("UPDATE proposals SET group_scope = ? WHERE group_scope = ?", new, old)
            for table in ("block_versions", "scope_notes"):
                await tx.execute(
                    f"UPDATE {table} SET scope = {renamed} WHERE {in_group}", *(new, old, *group)
                )
            await tx.execute(
                "UPDATE history SET session = CAST(? AS TEXT) || substr(session, length(?) + 1) "
                "WHERE session = ? OR substr(session, 1, length(?)) = ?",
                *(new, old, old, sessions_prefix, sessions_prefix),
            )
            # The group's own settings and its topics' go with it, each name with its versions;
            # where the new chat already set a name of its own, the old chat's value stays at
            # the old key with its versions (as a block whose label the new chat has does), so
            # no undo under the new key reaches it. The versions move first: the check must
            # see only the new chat's own settings.
            place = "(place = ? OR substr(place, 1, length(?)) = ?)"
            for table in ("group_setting_versions", "group_settings"):
                await tx.execute(
                    f"UPDATE {table} SET place = CAST(? AS TEXT) || substr(place, length(?) + 1) "
                    f"WHERE {place} AND NOT EXISTS (SELECT 1 FROM group_settings d WHERE "
                    f"d.place = CAST(? AS TEXT) || substr({table}.place, length(?) + 1) "
                    f"AND d.name = {table}.name)",
                    *(new, old, old, sessions_prefix, sessions_prefix, new, old),
                )
        return moved

    async def forget_versions_before(self, moment: datetime) -> int:
        """Drop versions of changes made before moment (retention). One outlives it, its
        content withheld: the newest version of a removed label that was sensitive, since that
        is how the review knows the label was (the model never makes it plain again)."""
        await self._db.execute(
            f"UPDATE block_versions SET content = ? WHERE at < ? AND content != ? AND id IN "
            f"({_REMOVED_SENSITIVE})",
            *(WITHHELD, ts(moment), WITHHELD),
        )
        return await self._db.execute(
            f"DELETE FROM block_versions WHERE at < ? AND id NOT IN ({_REMOVED_SENSITIVE})",
            ts(moment),
        )


def versions_forgotten(scopes: Sequence[str]) -> Step:
    """The statement dropping every version of scopes: a forgotten person's scopes go whole."""
    return Step("DELETE FROM block_versions WHERE scope IN (?*)", (list(scopes),))


def versions_without(platform: str, actor: str, former: str) -> list[Step]:
    """The statements making actor, a forgotten person of platform, former in the versions of
    its scopes that stay (a group's shared blocks they changed, a block pinned from their
    message): as who changed them, and as the author of a message a block came from."""
    low, high = rows.prefix_range(f"{platform}:")
    suffix = f":{actor}"
    return [
        Step(
            "UPDATE block_versions SET actor = ? WHERE actor = ? AND scope >= ? AND scope < ?",
            (former, actor, low, high),
        ),
        Step(
            "UPDATE block_versions SET origin = substr(origin, 1, length(origin) - length(?)) "
            "|| ':' WHERE origin LIKE 'message:%' AND substr(origin, length(origin) - "
            "length(?) + 1) = ? AND scope >= ? AND scope < ?",
            (suffix, suffix, suffix, low, high),
        ),
    ]


def group_versions_forgotten(group: str, members_prefix: str) -> Step:
    """The statement dropping every version of a group's scopes, its shared one and its
    members' (whose keys start with members_prefix): the data of a group the bot was removed
    from goes whole once its blocks have gone as block changes (retention)."""
    return Step(
        "DELETE FROM block_versions WHERE scope = ? OR substr(scope, 1, length(?)) = ?",
        (group, members_prefix, members_prefix),
    )


def _one_label(change: BlockChange) -> bool:
    """Whether the change is one label's add, edit or removal with nothing besides."""
    if (
        len(change.wanted) != 1
        or len(change.seen) != 1
        or change.kind is not None
        or change.undoes is not None
        or change.calls is not None
        or change.history is not None
        or (change.by.origin is not None and change.proposal is not None)
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


def _current(found: Sequence[Sequence[Any]]) -> dict[str, Seen]:
    """Each label of a scope, by key, as rows of _SCOPE_NOW hold them."""
    return {models.label_key(row[2]): Seen(block_from_row(row), row[BLOCK_WIDTH]) for row in found}


def _verify(change: BlockChange, current: Mapping[str, Seen]) -> None:
    """Raise Stale when a label the change was reviewed against is no longer as it saw it."""
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


async def _apply_in(
    tx: Executor, change: BlockChange, op: str, now: datetime, limits: Limits
) -> list[Applied]:
    """A change's writes inside a transaction that holds its scope's lock."""
    scope = change.scope
    current = _current(await tx.fetch(_SCOPE_NOW, scope))
    _verify(change, current)
    plan = _plan(current, change)
    _check(current, plan, limits)
    steps: list[Step] = []
    if (number := change.proposal) is not None:
        decided = (ProposalStatus.APPLIED.value, change.by.actor, ts(now), scope, number)
        if not await tx.execute(_DECIDE, *decided):
            raise AlreadyDecided(number)
    versions, audit = [], []
    for entry in plan:
        if entry.changed:
            version, entries = _recorded(change, entry, op, now)
            versions.append(version)
            audit += entries
            if change.turns_sensitive(entry.before, entry.wanted.state):
                steps += await _mask_audit(tx, change, entry.label)
        steps.append(_write(change, entry, now))
    if change.undoes is not None:
        steps.append(Step(_UNDONE, (op, scope, change.undoes)))
    if change.history is not None:
        steps.append(Step("DELETE FROM block_versions WHERE scope = ?", (scope,)))
        steps.append(Step(VERSION_INSERT, _given(change.history), many=True))
        versions = []
    if change.calls is not None:
        steps.append(Step(_SET_CALLS, (scope, change.calls)))
    for step in [*steps, *_versions(versions, limits.versions), *_audit(change, now, audit)]:
        if step.many:
            await tx.executemany(step.sql, step.args)
        else:
            await tx.execute(step.sql, *step.args)
    return [Applied(e.label, e.before, e.wanted.state) for e in plan if e.changed]


def _recorded(
    change: BlockChange, entry: _Entry, op: str, now: datetime
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """The version row and the audit entries of one label's change (an import that keeps a
    block's content, only its times or state, makes no entry)."""
    before, after = entry.before, entry.wanted.state
    found = [(change.kind, "")] if change.kind else kinds(before, after)
    (kind, detail), scope = found[0], change.scope
    version = version_row(op, scope, entry.label, kind, change.by, now, before, detail)
    if change.kind is ChangeKind.IMPORT and before and after and before.content == after.content:
        return version, []
    audited = change.audit_contents(before, after)
    kind, detail = audit_entry(found, restore=change.by.channel is Channel.RESTORE)
    return version, [(kind, entry.label, *audited, detail)]


def audit_entry(
    found: Sequence[tuple[ChangeKind, str]], *, restore: bool
) -> tuple[ChangeKind, str]:
    """One label's change as one audit entry, however many aspects it changed (a web page's
    save may change content, level and priority at once): the first aspect's kind, its detail
    followed by the others' in words ("edit content; level strong; priority 5"); a restore's
    kind is restore, its detail every aspect in words ("restore content; priority 0", "restore
    add context" for a removed block brought back)."""
    words = [_words(kind, detail) for kind, detail in found]
    if restore:
        return ChangeKind.RESTORE, "; ".join(words)
    (kind, detail), others = found[0], words[1:]
    if not others:
        return kind, detail
    return kind, "; ".join([detail or words[0], *others])


def _words(kind: ChangeKind, detail: str) -> str:
    """One aspect of a change in the audit trail's words: "content", "level strong"."""
    return "content" if kind is ChangeKind.EDIT else f"{kind.value} {detail}".strip()


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


def _plan(current: Mapping[str, Seen], change: BlockChange) -> list[_Entry]:
    """Each label the change writes: the ones whose state would change, and (an import) every
    imported block, whose times are written as given."""
    plan = []
    importing = change.kind is ChangeKind.IMPORT
    for want in change.wanted:
        seen = current.get(models.label_key(want.label))
        block = None if seen is None else seen.block
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
    if not limits.blocks_hold(count, new_count):
        raise LimitReached(limits.max_blocks)
    if not limits.chars_hold(chars, new_chars):
        raise OverBudget(new_chars, limits.max_total_chars)


def _write(change: BlockChange, entry: _Entry, now: datetime, held: Limits | None = None) -> Step:
    """The statement bringing one label to its wanted state, for every change. A block brought
    into the idle state counts its idle time from now and its calls from the scope's count,
    unless an import gives them; one that stays idle keeps its idle mark, so its retention runs
    on. With held (a change written without reading its scope first), the statement also holds
    the label as the change saw it (its revision and mark) and the scope's limits, and changes
    no row where either fails."""
    scope, before, want = change.scope, entry.before, entry.wanted
    after, stamp = want.state, ts(now)
    if before is not None:
        where = Sql("id = ?", before.id)
        if held is not None:
            where &= Sql(f"rev = ? AND {MARK} = ?", before.rev, entry.mark)
        if after is None:
            return Step(f"DELETE FROM blocks WHERE {where.text}", where.args)
    assert after is not None
    if after.state is not State.IDLE:
        since, calls = Sql("NULL"), Sql("NULL")
    elif before is not None and before.state is State.IDLE and want.idle_since is None:
        since, calls = Sql("idle_since"), Sql("idle_calls")
    else:
        since = Sql("?", ts(want.idle_since) if want.idle_since else stamp)
        calls = Sql(_CALLS, scope) if want.idle_calls is None else Sql("?", want.idle_calls)
    updated = ts(want.updated_at) if want.updated_at else stamp
    state: tuple[Any, ...] = (after.content, after.level.value, after.state.value, after.priority)
    ends_at = None if after.ends_at is None else ts(after.ends_at)
    state += (int(after.sensitive), encode_triggers(after.triggers), ends_at, updated)
    if before is not None:
        sets = (
            "content = ?, level = ?, state = ?, priority = ?, sensitive = ?, triggers = ?, "
            "ends_at = ?, updated_at = ?"
        )
        if want.created_at and change.kind is ChangeKind.IMPORT:
            sets, state = f"{sets}, created_at = ?", (*state, ts(want.created_at))
        if held is not None:
            where &= _held(held, scope, after.content, adding=False)
        return Step(
            f"UPDATE blocks SET {sets}, idle_since = {since.text}, idle_calls = {calls.text}, "
            f"rev = rev + 1 WHERE {where.text}",
            (*state, *since.args, *calls.args, *where.args),
        )
    created = ts(want.created_at) if want.created_at else stamp
    key = models.label_key(entry.label)
    args = (scope, entry.label, key, *state, created, *since.args, *calls.args)
    insert = f"{_INSERT_BLOCK}, {since.text}, {calls.text}"
    if held is None:
        return Step(insert, args)
    fits = _held(held, scope, after.content, adding=True)
    guarded = f"{insert} WHERE {fits.text} ON CONFLICT (scope, label_key) DO NOTHING"
    return Step(guarded, (*args, *fits.args))


_SCOPE, _CONTENT = object(), object()  # the arguments of a guard, as _guard builds it


@functools.lru_cache(maxsize=16)
def _guard(limits: Limits, adding: bool) -> Sql:
    """The limits as one label's add (or edit) holds them, built once per limits: the scope
    (_SCOPE) takes one block more (adding) and the new content (_CONTENT)."""
    total = Sql(_CHARS, _SCOPE)
    if not adding:
        return limits.chars_hold(total, total + Sql("length(?) - length(content)", _CONTENT))
    count, grown = Sql(_COUNT, _SCOPE), total + Sql("length(?)", _CONTENT)
    return limits.blocks_hold(count, count + 1) & limits.chars_hold(total, grown)


def _held(limits: Limits, scope: str, content: str, *, adding: bool) -> Sql:
    """_guard for one write: of scope, with content."""
    guard = _guard(limits, adding)
    return Sql(guard.text, *(scope if arg is _SCOPE else content for arg in guard.args))


def _given(versions: Sequence[models.Version]) -> list[tuple[Any, ...]]:
    """Rows for versions exactly as given (an import of an export made with history)."""
    found = []
    for v in versions:
        change = models.Author(v.actor, v.channel, v.origin)
        row = version_row(
            v.op, v.scope, v.label, v.kind, change, v.at, v.before, v.detail, v.created_at
        )
        found.append((*row[:-1], v.undone_by))
    return found

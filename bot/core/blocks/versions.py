"""A scope's blocks through time: `/pin history`, `/pin undo` and `/pin restore` (and their
`shared` forms). Undo and restore are changes like any other: the rules of now apply (limits,
the budget, the credential check, permissions) and they are kept as versions themselves."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bot.core.blocks.ends import shown_end
from bot.core.blocks.ops import (
    BlockOps,
    Done,
    Outcome,
    Refused,
    Target,
    find_block,
    kept_note,
    seen_of,
)
from bot.core.blocks.review import BlockPolicy, Rule, refusal
from bot.core.blocks.sensitive import shown_states
from storage.changes import Applied
from storage.errors import Stale
from storage.models import Block, BlockState, ChangeKind, Channel, Version, Wanted, label_key
from storage.versions import VersionStore

SHOWN_CHARS = 60  # of each version's content in /pin history
_WHEN = "%Y-%m-%d %H:%M UTC"


def _when(moment: datetime) -> str:
    return moment.strftime(_WHEN)


def _shown(state: BlockState | None) -> str:
    if state is None:
        return "(no block)"
    text = " ".join(state.content.split())  # as shown_states gives it
    short = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"
    sensitive = ", sensitive" if state.sensitive else ""
    when = f", when {', '.join(state.triggers)}" if state.triggers else ""
    until = f", until {shown_end(state.ends_at)}" if state.ends_at else ""
    return f"[{state.level.value}, {state.state.value}{sensitive}{when}{until}] {short}"


def _what(version: Version) -> str:
    """A change in words: "edit", "level strong", "keywords deploy", "end none (never ends)",
    "remove (undo)"."""
    words = f"{version.kind.value} {version.detail}".strip()
    if version.kind is ChangeKind.TRIGGERS:
        keywords = version.detail
        words = "keywords none (sent always)" if keywords == "always" else f"keywords {keywords}"
    elif version.kind is ChangeKind.ENDS:
        words = "end none (never ends)" if version.detail == "never" else f"end {_end(version)}"
    if version.channel is not Channel.COMMAND:
        words += f" ({version.channel.value})"
    return words


def _end(version: Version) -> str:
    """The end an ends version recorded (its detail: an ISO time), as replies show ends; a
    detail that is not one (an import's, by hand) as it is."""
    try:
        return shown_end(datetime.fromisoformat(version.detail))
    except ValueError:
        return version.detail


def _who(version: Version) -> str:
    return version.actor or "someone without an id"


class BlockVersions:
    """History, undo and restore of one speaker's (or one group's shared) blocks."""

    def __init__(self, store: VersionStore, ops: BlockOps) -> None:
        self._store = store
        self._ops = ops
        self._policy: BlockPolicy = ops.policy

    async def history(self, target: Target, label: str) -> Outcome:
        """The label's versions, newest first, numbered: 1 is the block as it is now."""
        versions = await self._store.versions(target.scope, label)
        if not versions:
            return refusal(Rule.NO_HISTORY, target.where, label=label)
        states = await self._states(target, label, versions)
        pins = self._policy.pins
        lines = [
            f"History of '{versions[0].label}' in {target.noun()}, newest first (kept "
            f"{pins.history_days} days, at most {pins.history_per_block} versions):"
        ]
        shown = shown_states(state for state, _ in states)
        for number, (state, (_, made_by)) in enumerate(zip(shown, states, strict=True), start=1):
            made = (
                f"{_when(made_by.at)} · {_who(made_by)} · {_what(made_by)}"
                if made_by
                else "before its kept history"
            )
            now = " (now)" if number == 1 else ""
            lines.append(f"{number}.{now} {made} · {_shown(state)}")
        lines.append(
            f"Bring one back with {target.command('restore')} {versions[0].label} <number>."
        )
        return Done("\n".join(lines))

    async def numbered(
        self, target: Target, label: str
    ) -> list[tuple[BlockState | None, Version | None]]:
        """The label's versions as /pin history numbers them (1 = now): each state with the
        change that made it (None: made before the kept history); empty when none is kept."""
        versions = await self._store.versions(target.scope, label)
        return await self._states(target, label, versions) if versions else []

    async def _states(
        self, target: Target, label: str, versions: Sequence[Version]
    ) -> list[tuple[BlockState | None, Version | None]]:
        """Each version's state, newest first, with the change that made it (None: made before
        the kept history began). The first is the block as it is now."""
        current = find_block(await self._ops.blocks(target), label)
        states: list[tuple[BlockState | None, Version | None]] = [
            (BlockState.of(current) if current else None, versions[0])
        ]
        for index, version in enumerate(versions):
            made_by = versions[index + 1] if index + 1 < len(versions) else None
            states.append((version.before, made_by))
        return states

    async def undo(self, target: Target) -> Outcome:
        """Revert the scope's last operation (an undo steps over earlier changes, never over
        undos), as one operation: a change like any other, made now by the speaker, under the
        rules of now."""
        # The blocks are read before the operation to undo: a change landing after this read
        # (the operation's own, or a later one) makes the undo stale, never silently lost.
        now = await self._ops.scope_now(target)
        versions = await self._store.last_operation(target.scope)
        if not versions:
            if problem := await self._ops.may_change(target):
                return problem
            return refusal(Rule.NOTHING_TO_UNDO, target.where)
        wanted: dict[str, Wanted] = {}
        for version in versions:  # the first version of a label holds its state before
            wanted.setdefault(
                label_key(version.label),
                Wanted(version.label, version.before, version.created_at),
            )
        outcome = await self._apply(
            target, list(wanted.values()), Channel.UNDO, now, undoes=versions[0].op
        )
        if isinstance(outcome, Refused):
            return outcome
        summary, note = outcome
        first = versions[0]
        labels = ", ".join(f"'{w.label}'" for w in wanted.values())
        kept = f" {note}" if note else ""
        return Done(
            f"Undid {_what(first)} of {labels} by {_who(first)} at {_when(first.at)}. "
            f"{summary}{kept} Send {target.command('undo')} again to go one change further "
            "back."
        )

    async def restore(self, target: Target, label: str, number: int | None) -> Outcome:
        """Bring back version number (None: the one before now; a number /pin history does not
        show is refused) of a block, also of a removed one; over a block that exists now it is
        an edit."""
        if problem := await self._ops.may_change(target):
            return problem
        now = await self._ops.scope_now(target)  # before the versions, as in undo
        versions = await self._store.versions(target.scope, label)
        states = await self._states(target, label, versions) if versions else []
        number = 2 if number is None else number
        if not states and find_block(now[0], label) is None:  # never here, or long forgotten
            return refusal(Rule.MISSING, target.where, label=label)
        if not 1 <= number <= len(states):
            kept = f"versions 1 to {len(states)}" if states else "no versions"
            return refusal(Rule.NO_VERSION, target.where, label=label, kept=kept)
        state, made_by = states[number - 1]
        if state is None:
            return refusal(Rule.VERSION_ABSENT, target.where, number=number, label=label)
        if number == 1:
            return Done(f"'{versions[0].label}' is already as version 1 (now).")
        created = next((v.created_at for v in versions if v.created_at), None)
        wanted = [Wanted(versions[0].label, state, created)]
        outcome = await self._apply(target, wanted, Channel.RESTORE, now)
        if isinstance(outcome, Refused):
            return outcome
        source = f" ({_when(made_by.at)}, by {_who(made_by)})" if made_by else ""
        kept = f" {outcome[1]}" if outcome[1] else ""
        return Done(f"Restored '{versions[0].label}' to version {number}{source}.{kept}")

    async def _apply(
        self,
        target: Target,
        wanted: list[Wanted],
        channel: Channel,
        now: tuple[list[Block], dict[str, str]],
        undoes: str | None = None,
    ) -> tuple[str, str] | Refused:
        """Bring labels to wanted states as one change by the speaker, reviewed against the
        blocks as they were read (now: blocks and marks) before the versions were: what
        changed in words, and why a label stayed sensitive ('' when none did: an undo or a
        restore never makes a sensitive block plain, bot.core.blocks.review)."""
        blocks, marks = now
        seen = seen_of(blocks, marks, [want.label for want in wanted])
        change = target.changed(wanted, seen, channel=channel, undoes=undoes)
        try:
            applied = await self._ops.commit(target, change, blocks)
        except Stale as stale:
            return refusal(Rule.STALE, target.where, label=stale.label)
        if isinstance(applied, Refused):
            if applied.code in _AS_IT_WAS:
                labels = ", ".join(f"'{want.label}'" for want in wanted if want.state)
                return refusal(Rule.AS_IT_WAS, labels=labels, because=applied.reason)
            return applied
        return _summary(applied), kept_note(target, wanted, applied)


# Refusals of what a version holds (not of the scope or the speaker): the reply names the block.
_AS_IT_WAS = {
    Rule.LABEL_TOO_LONG,
    Rule.LABEL_CHARACTER,
    Rule.CONTENT_TOO_LONG,
    Rule.CONTENT_CHARACTER,
    Rule.CREDENTIAL,
    Rule.PRIORITY,
    Rule.TRIGGERS,
}


def _summary(applied: list[Applied]) -> str:
    """What an undo or restore changed, in words."""
    if not applied:
        return "Nothing needed to change."
    back = [a.label for a in applied if a.before is None]
    gone = [a.label for a in applied if a.after is None]
    words = []
    if back:
        words.append(f"Back: {', '.join(repr(label) for label in back)}.")
    if gone:
        words.append(f"Removed again: {', '.join(repr(label) for label in gone)}.")
    others = len(applied) - len(back) - len(gone)
    if others:
        words.append(f"{others} block(s) as they were before.")
    return " ".join(words)

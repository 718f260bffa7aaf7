"""Block operations over one scope, as `/pin`, the agent tools, the chat's pinned message and the
web page ask for them: each builds one `BlockChange`, which the block policy reviews (the one
rule check) and the store applies (the one write); every operation returns a typed outcome."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot import metrics
from bot.clock import Clock, utc_now
from bot.core.blocks.ends import Ends, shown_end
from bot.core.blocks.review import (
    BlockPolicy,
    Done,
    Outcome,
    Refused,
    Rule,
    Where,
    default_level,
    refusal,
)
from bot.core.blocks.sensitive import masked_note
from bot.core.people import (
    Access,
    ChatKind,
    MessageContext,
    Role,
    Speaker,
    is_group_scope,
    is_shared_scope,
)
from bot.secrets import has_marks, hide_parts, marked_parts, redact
from storage import Store
from storage.changes import Applied
from storage.errors import Conflict, LabelTaken, LimitReached, OverBudget, Stale
from storage.models import (
    ABSENT,
    Author,
    Block,
    BlockChange,
    BlockState,
    ChangeKind,
    Channel,
    Level,
    Origin,
    Seen,
    State,
    Wanted,
    label_key,
)

__all__ = [
    "BlockOps",
    "Done",
    "Outcome",
    "Refused",
    "Target",
    "find_block",
    "kept_note",
    "timing_details",
]
# A command's change is decided again on the blocks as they are when another writer changed
# them in between; a decision taken once (a proposal's approval) is not.
_ATTEMPTS = 5


def find_block(blocks: Sequence[Block], label: str) -> Block | None:
    """The block with this label (matched case-insensitively), if any."""
    key = label_key(label)
    return next((block for block in blocks if label_key(block.label) == key), None)


@dataclass(frozen=True)
class Target:
    """One scope as the speaker acts on it: their personal scope here, or the group's shared."""

    scope: str
    shared: bool
    group: bool
    speaker: Speaker
    by: Author

    @classmethod
    def of(
        cls, context: MessageContext, *, shared: bool, channel: Channel = Channel.COMMAND
    ) -> Target | Refused:
        """The speaker's personal or the group's shared scope, or why pins do not work here.
        Changes through the agent tools are the model's; the others the speaker's."""
        speaker, conversation = context.speaker, context.conversation
        if speaker.refusal:  # pins are off: why, as review's permission check says it
            return refusal(Rule.NOT_ALLOWED, reason=speaker.refusal)
        scope = conversation.shared_scope if shared else conversation.personal_scope
        # resolve_access grants a role only where both scopes exist
        if not speaker.pins_on or scope is None:
            return refusal(Rule.PINS_OFF)
        group = conversation.kind is ChatKind.GROUP
        actor = "model" if channel is Channel.TOOL else context.actor
        return cls(scope, shared, group, speaker, Author(actor, channel))

    @classmethod
    def operator(cls, group_scope: str, actor: str, channel: Channel = Channel.WEB) -> Target:
        """A group's shared scope as the bot's operator (or the platform, for its pinned
        message) acts on it: with a shared admin's rights, and every other rule of
        `/pin shared`."""
        speaker = Speaker(Access(Role.SHARED_ADMIN))
        return cls(group_scope, True, True, speaker, Author(actor, channel))

    @functools.cached_property
    def where(self) -> Where:
        """The scope as the block policy and replies name it."""
        return Where(self.shared, self.group)

    def noun(self) -> str:
        """How replies name the blocks of this scope."""
        return self.where.noun

    def empty(self) -> str:
        """What a listing of this scope says when it has no block."""
        if self.shared:
            return "This group has no shared blocks."
        return "You have no personal blocks in this group." if self.group else "You have no blocks."

    def command(self, verb: str) -> str:
        """The `/pin` command that does verb on this scope."""
        return f"{self.where.pin} {verb}"

    def changed(
        self,
        wanted: Sequence[Wanted],
        seen: Mapping[str, Seen | None],
        *,
        channel: Channel | None = None,
        origin: Origin | None = None,
        **more: object,
    ) -> BlockChange:
        """The change of this scope to the wanted states, by this speaker (through channel,
        if another), reviewed against seen."""
        change = Author(self.by.actor, channel or self.by.channel, origin)
        marked = [part for w in wanted if w.state for part in marked_parts(w.state.content)]
        return BlockChange(
            self.scope,
            tuple(wanted),
            change,
            seen,
            self.shared,
            **more,  # type: ignore[arg-type]
            mask=functools.partial(_masked, marked) if marked else redact,
            remask=bool(marked),
        )


def where_of(scope: str) -> Where:
    """A scope, by its key, as the block policy and replies name it."""
    return Where(is_shared_scope(scope), is_group_scope(scope))


def _masked(marked: Sequence[str], text: str) -> str:
    """What the audit trail keeps of text: redacted, and the parts the change marks hidden where
    an earlier entry held them unmarked."""
    return hide_parts(redact(text), marked)


def seen_of(
    blocks: Sequence[Block], marks: dict[str, str], labels: Sequence[str]
) -> dict[str, Seen | None]:
    """What a change to labels is reviewed against: each label's block and mark, or ABSENT."""
    found: dict[str, Seen | None] = {}
    for label in labels:
        key = label_key(label)
        block = find_block(blocks, label)
        found[key] = ABSENT if block is None else Seen(block, marks.get(key, ""))
    return found


def kept_note(target: Target, wanted: Sequence[Wanted], applied: Sequence[Applied]) -> str:
    """What a reply adds where a change stored a label sensitive that it asked for plain (the
    block policy keeps it so): why, and who can make it plain; '' where none was."""
    asked = {label_key(want.label): want.state for want in wanted}
    notes = []
    for done in applied:
        state = asked.get(label_key(done.label))
        if done.after is None or not done.after.sensitive or state is None or state.sensitive:
            continue
        notes.append(_kept_why(target, done.label, done.after.content))
    return " ".join(notes)


def _kept_why(target: Target, label: str, content: str) -> str:
    """Why label stays (or is saved) sensitive, in words for the reply."""
    if has_marks(content):
        return (
            f"'{label}' is sensitive because its content has parts marked ||like this||: they "
            "are hidden from the model and from listings. Remove the marks (with "
            f"{target.command('edit')}) to make it plain."
        )
    return (
        f"'{label}' stays sensitive, as it was: only the user can make it plain, with "
        f"{target.command('sensitive')} {label} off."
    )


class BlockOps:
    """Adds, changes and removes blocks of one scope for one speaker, through the one review
    and the one write."""

    def __init__(self, store: Store, policy: BlockPolicy, clock: Clock = utc_now) -> None:
        self._store = store
        self.policy = policy
        self._clock = clock

    async def blocks(self, target: Target) -> list[Block]:
        """Every block of the target scope, in any state, oldest first."""
        return await self._store.blocks([target.scope])

    async def scope_now(self, target: Target | str) -> tuple[list[Block], dict[str, str]]:
        """A scope's (or the target's) blocks and their labels' marks, as a change is reviewed
        against them."""
        return await self._store.scope_now(target if isinstance(target, str) else target.scope)

    async def commit_all(
        self,
        changes: Sequence[BlockChange],
        blocks: Mapping[str, Sequence[Block]] | None = None,
        *,
        dry_run: bool = False,
    ) -> list[Applied] | dict[str, Refused]:
        """Review changes the system makes (the operator's import, the idle clean-up) with its
        rights (no speaker is asked; every other rule holds), each scope against its blocks in
        blocks (else the labels its change saw), and apply them as one operation in one
        transaction: what changed, or each refused scope's refusal with nothing changed. A dry
        run only reviews. Raises as the store does (nothing changed then)."""
        changes = [await self._kept_sensitive(change) for change in changes]
        refused, blocks = {}, blocks or {}
        for change in changes:
            where, found = where_of(change.scope), blocks.get(change.scope)
            if problem := await self.policy.review(change, where, speaker=None, blocks=found):
                refused[change.scope] = problem
        if refused or dry_run:
            return refused or []
        applied = await self._store.apply_changes(
            changes, now=self._clock(), limits=self.policy.limits
        )
        # The labels that changed (an imported block as it was is not written again), under the
        # channel of the operation: an import's changes all come through one.
        channels = {change.by.channel for change in changes}
        metrics.blocks_written(channels.pop() if len(channels) == 1 else "other", len(applied))
        return applied

    def now(self) -> datetime:
        """The time by the operations' clock."""
        return self._clock()

    async def commit(
        self, target: Target, change: BlockChange, blocks: Sequence[Block] | None
    ) -> list[Applied] | Refused:
        """Review change for the target's speaker against blocks (None: not read; the store
        holds the limits) and apply it: what changed, or the refusal, with nothing changed.
        Stale (the blocks changed since they were read) and AlreadyDecided pass through."""
        policy, where = self.policy, target.where
        change = await self._kept_sensitive(change)
        if problem := await policy.review(change, where, speaker=target.speaker, blocks=blocks):
            return problem
        now = self._clock()
        try:
            applied = await self._store.apply_change(change, now=now, limits=policy.limits)
        except LabelTaken as taken:
            return refusal(Rule.LABEL_TAKEN, where, label=taken.label)
        except LimitReached:
            return policy.too_many(where)
        except OverBudget as over:
            return policy.over_budget(over.total, where)
        metrics.blocks_written(change.by.channel, len(applied))
        if target.shared and applied:  # keep the group's audit trail within its retention
            retention = timedelta(days=policy.pins.audit_retention_days)
            await self._store.prune_audit(target.scope, now - retention)
        return applied

    async def _kept_sensitive(self, change: BlockChange) -> BlockChange:
        """change with the states the block policy keeps (or makes) sensitive: the last state
        of a removed label is read from its newest kept version."""
        last: dict[str, BlockState | None] = {}
        for label in self.policy.sensitive_history_wanted(change):
            versions = await self._store.versions(change.scope, label)
            last[label_key(label)] = versions[0].before if versions else None
        return self.policy.kept_sensitive(change, last)

    async def _decided(
        self, target: Target, change: BlockChange, blocks: Sequence[Block] | None
    ) -> list[Applied] | Refused | None:
        """commit, with None where another writer changed the blocks in between (decide
        again on the blocks as they are now)."""
        try:
            return await self.commit(target, change, blocks)
        except (Stale, Conflict):
            return None

    # --- operations -----------------------------------------------------------------------------

    async def add(
        self,
        target: Target,
        label: str,
        content: str,
        *,
        level: Level | None = None,
        pinned: bool = False,
        priority: int = 0,
        origin: Origin | None = None,
        sensitive: bool = False,
        triggers: Sequence[str] = (),
        ends: Ends | None = None,
    ) -> Outcome:
        """Add a block (at the target's default level when level is None); origin says where
        its content came from; a sensitive block is kept whole and seen redacted; a block with
        triggers goes only with requests that mention one, and one with an end stops then."""
        level = level or default_level(target.group)
        ends_at = ends.resolve(self._clock()) if ends else None
        if problem := self.policy.end_problem(ends_at, self._clock()):
            return problem
        state = BlockState(
            *(content, level, State.PINNED if pinned else State.ACTIVE, priority, sensitive),
            *(tuple(triggers), ends_at),
        )
        change = target.changed([Wanted(label, state)], {label_key(label): ABSENT}, origin=origin)
        for _ in range(_ATTEMPTS):
            try:  # a label taken meanwhile is refused by the store; Conflict: decide again
                outcome = await self.commit(target, change, None)
            except Conflict:
                continue
            if isinstance(outcome, Refused):
                return outcome
            kept = ", pinned (kept until you remove it)" if pinned and not ends_at else ""
            kept += ", pinned until its end (then it goes idle)" if pinned and ends_at else ""
            stored = outcome[0].after if outcome else None
            if sensitive or (stored is not None and stored.sensitive):
                kept += (
                    f", sensitive (the model and listings see it redacted; {masked_note(content)})"
                )
            kept += timing_note(state)
            saved = f"Saved {level.value} block '{label}'{kept}."
            return Done(" ".join(filter(None, [saved, kept_note(target, change.wanted, outcome)])))
        return refusal(Rule.BUSY)

    async def change(
        self,
        target: Target,
        label: str,
        *,
        content: str | None = None,
        level: Level | None = None,
        state: State | None = None,
        priority: int | None = None,
        origin: Origin | None = None,
        sensitive: bool | None = None,
        triggers: Sequence[str] | None = None,
        ends: Ends | None = None,
    ) -> Outcome:
        """Change a block's content, level, state, priority, sensitivity, keywords or end
        (None: as it is; empty keywords: sent always; an Ends of nothing: it no longer ends);
        origin says where new content came from. A block that ended comes back (active) when
        its end is moved into the future or taken away."""
        now = self._clock()
        ends_at = ends.resolve(now) if ends else None
        if problem := self.policy.end_problem(ends_at, now):
            return problem
        for _ in range(_ATTEMPTS):
            blocks, marks = await self.scope_now(target)
            block = find_block(blocks, label)
            if block is None:
                return await self._missing(target, label)
            ended = block.ends_at is not None and block.ends_at <= now
            if ends is not None and ended and state is None and block.state is State.IDLE:
                state = State.ACTIVE
            elif (
                ended
                and ends is None
                and state in (State.ACTIVE, State.PINNED)
                and state is not block.state
            ):
                again = f"{target.command('edit')} {block.label}"
                return refusal(
                    Rule.ENDS,
                    target.where,
                    problem=(
                        f"block '{block.label}' ended at {shown_end(block.ends_at or now)}; "
                        f"give it a new end with {again} --until <date> (or --for <duration>), "
                        f"or take its end away with {again} --until -"
                    ),
                )
            wanted = BlockState(
                block.content if content is None else content,
                level or block.level,
                state or block.state,
                block.priority if priority is None else priority,
                block.sensitive if sensitive is None else sensitive,
                block.triggers if triggers is None else tuple(triggers),
                block.ends_at if ends is None else ends_at,
            )
            change = target.changed(
                [Wanted(block.label, wanted)], seen_of(blocks, marks, [block.label]), origin=origin
            )
            outcome = await self._decided(target, change, blocks)
            if isinstance(outcome, Refused):
                return outcome
            if outcome == [] and sensitive is False and block.sensitive:
                return Done(_kept_why(target, block.label, wanted.content))
            if outcome == []:
                timing = triggers is not None or ends is not None
                return Done(
                    f"Block '{block.label}' already waits for and ends as asked."
                    if timing and content is None
                    else _unchanged(block, level, state, priority, sensitive)
                )
            if outcome is not None:
                stored = outcome[0].after or wanted
                text = self.changed_text(target, block, stored)
                note = kept_note(target, change.wanted, outcome)
                return Done(f"{text} {note}" if note else text)
        return refusal(Rule.BUSY)

    async def may_change(self, target: Target) -> Refused | None:
        """Why the speaker may not change the target's blocks at all (a shared scope without a
        shared admin's rights), or None."""
        nothing = target.changed([], {})
        return await self.policy.review(nothing, target.where, speaker=target.speaker)

    async def _missing(self, target: Target, label: str) -> Refused:
        """The refusal for a label the scope does not hold: that the speaker may not change
        these blocks at all, if so, else that there is no such block."""
        problem = await self.may_change(target)
        return problem or refusal(Rule.MISSING, target.where, label=label)

    def changed_text(self, target: Target, block: Block, wanted: BlockState) -> str:
        """The reply for a committed change of block to wanted."""
        label = block.label
        differs = [
            name
            for name in ("content", "level", "state", "priority", "sensitive", "triggers")
            if getattr(wanted, name) != getattr(block, name)
        ]
        differs += ["ends_at"] if wanted.ends_at != block.ends_at else []
        if len(differs) > 1 or differs in (["triggers"], ["ends_at"]):
            return f"Updated block '{label}'{timing_note(wanted)}."
        if differs == ["content"]:
            return f"Saved the new content of '{label}'."
        if differs == ["level"]:
            return f"Block '{label}' is now {wanted.level.value}."
        if differs == ["priority"]:
            return f"Block '{label}' now has priority {wanted.priority}."
        if differs == ["sensitive"] and wanted.sensitive:
            return (
                f"Block '{label}' is now sensitive: kept whole, but the model, the tools and "
                f"listings see it redacted ({masked_note(wanted.content)}). "
                f"{target.command('sensitive')} {label} off undoes this."
            )
        if differs == ["sensitive"]:
            return f"Block '{label}' is no longer sensitive: the model reads it as it is."
        if wanted.state is State.IDLE:
            return (
                f"Block '{label}' is now idle: {self.policy.idle_notice()}. "
                f"{target.command('activate')} {label} undoes this."
            )
        if wanted.state is State.PINNED:
            return f"Block '{label}' is now pinned: sent to the model and kept until you remove it."
        return f"Block '{label}' is now active."

    async def remove(self, target: Target, label: str) -> Outcome:
        """Delete a block; everyone may delete their own, whatever its level (the model never a
        pinned one)."""
        for _ in range(_ATTEMPTS):
            blocks, marks = await self.scope_now(target)
            block = find_block(blocks, label)
            if block is None:
                return await self._missing(target, label)
            change = target.changed(
                [Wanted(block.label, None)], seen_of(blocks, marks, [block.label])
            )
            outcome = await self._decided(target, change, blocks)
            if isinstance(outcome, Refused):
                return outcome
            if outcome is not None:
                return Done(f"Removed block '{block.label}'.")
        return refusal(Rule.BUSY)

    async def clear(self, target: Target, *, confirm: bool) -> Outcome:
        """Without confirm, say what a clear would delete; with it, delete every block of the
        scope, pinned ones included."""
        for _ in range(_ATTEMPTS):
            blocks, marks = await self.scope_now(target)
            labels = [block.label for block in blocks]
            change = target.changed(
                [Wanted(label, None) for label in labels],
                seen_of(blocks, marks, labels),
                kind=ChangeKind.CLEAR,
            )
            if not confirm or not blocks:
                if problem := await self.policy.review(
                    change, target.where, speaker=target.speaker, blocks=blocks
                ):
                    return problem
                return self._would_clear(target, blocks)
            outcome = await self._decided(target, change, blocks)
            if isinstance(outcome, Refused):
                return outcome
            if outcome is not None:
                return Done(
                    f"Deleted {len(outcome)} block(s) from {target.noun()}. "
                    f"{self._undo_note(target).capitalize()}"
                )
        return refusal(Rule.BUSY)

    def _would_clear(self, target: Target, blocks: Sequence[Block]) -> Done:
        if not blocks:
            return Done(f"{target.empty()} Nothing to clear.")
        pinned = sum(1 for b in blocks if b.state is State.PINNED)
        return Done(
            f"This would delete {len(blocks)} block(s) from {target.noun()}, {pinned} of "
            f"them pinned. Send {target.command('clear')} confirm to delete them all; "
            f"{self._undo_note(target)}"
        )

    def _undo_note(self, target: Target) -> str:
        days = self.policy.pins.history_days
        return f"{target.command('undo')} brings them back, for {days} days."


def timing_details(block: Block, now: datetime | None = None) -> list[str]:
    """A block's keywords and end, as listings show them beside its level and state."""
    details = [f"when: {', '.join(block.triggers)}"] if block.triggers else []
    if block.ends_at is not None:
        ended = now is not None and block.ends_at <= now
        details.append(f"{'ended' if ended else 'until'} {shown_end(block.ends_at)}")
    return details


def timing_note(state: BlockState) -> str:
    """When a block goes with requests and until when, as a reply adds it ('' for a block
    sent always that never ends)."""
    note = ""
    if state.triggers:
        note += f", sent when a message mentions {', '.join(state.triggers)}"
    if state.ends_at is not None:
        note += f", until {shown_end(state.ends_at)}"
    return note


def _unchanged(
    block: Block,
    level: Level | None,
    state: State | None,
    priority: int | None,
    sensitive: bool | None = None,
) -> str:
    if sensitive is not None:
        return f"Block '{block.label}' is already {'' if sensitive else 'not '}sensitive."
    if level is not None:
        return f"Block '{block.label}' is already {level.value}."
    if state is not None:
        return f"Block '{block.label}' is already {state.value}."
    if priority is not None:
        return f"Block '{block.label}' already has priority {priority}."
    return f"Block '{block.label}' already has this content."

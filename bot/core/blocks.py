"""Block operations over one scope, the one path for every change to blocks (`/pin`, the agent
tools, the web page, import): permissions here, the rules of the block policy, pinned-block
protection and the audit trail; every operation returns a typed outcome."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.core.clock import Clock, utc_now
from bot.core.context import MessageContext
from bot.core.conversation import ChatKind
from bot.core.keys import is_shared_scope
from bot.core.permissions import Access, Action, Role, Speaker
from bot.core.policy import BlockPolicy, default_level, priority_problem
from storage.blocks import BlockStore
from storage.errors import Conflict, LabelTaken, LimitReached, NotFound, OverBudget
from storage.models import (
    Block,
    Change,
    Channel,
    Level,
    NewBlock,
    Origin,
    State,
    Version,
    label_key,
)

IMPORT = Change("import", Channel.IMPORT)
# Guarded writes fail only when another writer changed the scope in between; re-reading settles it.
_ATTEMPTS = 5


@dataclass(frozen=True)
class Done:
    """The operation happened (or there was nothing to change); message says what, in English."""

    message: str


@dataclass(frozen=True)
class Refused:
    """The operation changed nothing; reason says why and how to fix it, in English."""

    reason: str


Outcome = Done | Refused
RETRY_LATER = Refused("The blocks changed while saving; nothing was saved. Please try again.")


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
    change: Change

    @classmethod
    def of(
        cls, context: MessageContext, *, shared: bool, channel: Channel = Channel.COMMAND
    ) -> Target | Refused:
        """The speaker's personal or the group's shared scope, or why pins do not work here.
        Changes through the agent tools are the model's; the others the speaker's."""
        speaker, conversation = context.speaker, context.conversation
        if not speaker.pins_on:
            return Refused(speaker.refusal or "Pins are not available here.")
        scope = conversation.shared_scope if shared else conversation.personal_scope
        if scope is None:  # resolve_access grants a role only where both scopes exist
            return Refused("Pins are not available here.")
        group = conversation.kind is ChatKind.GROUP
        actor = "model" if channel is Channel.TOOL else context.actor
        return cls(scope, shared, group, speaker, Change(actor, channel))

    @classmethod
    def operator(cls, group_scope: str, actor: str) -> Target:
        """A group's shared scope as the bot's operator acts on it (from the web page): with a
        shared admin's rights, and every other rule of `/pin shared`."""
        speaker = Speaker(Access(Role.SHARED_ADMIN))
        return cls(group_scope, True, True, speaker, Change(actor, Channel.WEB))

    def noun(self) -> str:
        """How replies name the blocks of this scope."""
        if self.shared:
            return "this group's shared blocks"
        return "your personal blocks in this group" if self.group else "your blocks"

    def empty(self) -> str:
        """What a listing of this scope says when it has no block."""
        if self.shared:
            return "This group has no shared blocks."
        return "You have no personal blocks in this group." if self.group else "You have no blocks."

    def command(self, verb: str) -> str:
        """The `/pin` command that does verb on this scope."""
        return f"/pin shared {verb}" if self.shared else f"/pin {verb}"


@dataclass(frozen=True)
class _Change:
    """The fields of a block that an operation sets to new values."""

    content: str | None = None
    level: Level | None = None
    state: State | None = None
    priority: int | None = None

    @classmethod
    def against(cls, block: Block, **wanted: Any) -> _Change:
        """Only the wanted values that differ from the block's."""
        return cls(**{k: v for k, v in wanted.items() if v is not None and v != getattr(block, k)})

    def fields(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}


class BlockOps:
    """Adds, changes and removes blocks of one scope for one speaker."""

    def __init__(self, store: BlockStore, policy: BlockPolicy, clock: Clock = utc_now) -> None:
        self._store = store
        self.policy = policy
        self._clock = clock

    async def blocks(self, target: Target) -> list[Block]:
        """Every block of the target scope, in any state, oldest first."""
        return await self._store.blocks([target.scope])

    # --- checks ---------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The time by the operations' clock."""
        return self._clock()

    async def write_refusal(self, target: Target, strong: bool = False) -> Refused | None:
        """Why the speaker may not change these blocks (shared blocks need a shared admin;
        personal strong blocks a strong user or admin), or None."""
        if target.shared:
            reason = await target.speaker.refusal_for(Action.SHARED_WRITE)
        elif strong:
            reason = await target.speaker.refusal_for(Action.PERSONAL_STRONG)
        else:
            return None
        return Refused(reason) if reason else None

    def _label_taken(self, target: Target, label: str) -> Refused:
        return Refused(
            f"A block labelled '{label}' already exists in {target.noun()}. "
            f"Use {target.command('edit')} {label} <new content> to change it."
        )

    def _full(self, target: Target, limit: int) -> Refused:
        return Refused(
            f"{target.noun().capitalize()} already hold {limit} blocks, the limit. "
            f"Remove one with {target.command('remove')} <label> first."
        )

    @staticmethod
    def _missing(target: Target, label: str) -> Refused:
        return Refused(
            f"There is no block labelled '{label}' in {target.noun()}. "
            f"Send {target.command('list')} to see them."
        )

    @staticmethod
    def _protected(block: Block) -> Refused:
        return Refused(
            f"Block '{block.label}' is pinned; only the user can change or remove it, with /pin."
        )

    async def _audited(self, target: Target, now: datetime) -> None:
        """Keep a group's audit trail within its retention after a shared change."""
        if target.shared:
            retention = timedelta(days=self.policy.pins.audit_retention_days)
            await self._store.prune_audit(target.scope, now - retention)

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
    ) -> Outcome:
        """Add a block (at the target's default level when level is None); origin says where
        its content came from."""
        level = level or default_level(target.group)
        if refusal := await self.write_refusal(target, level is Level.STRONG):
            return refusal
        if problem := self.policy.block_problem(label, content, priority, group=target.group):
            return Refused(problem)
        state = State.PINNED if pinned else State.ACTIVE
        new = NewBlock(target.scope, label, content, level, state, priority)
        change = Change(target.change.actor, target.change.channel, origin)
        for _ in range(_ATTEMPTS):
            now = self._clock()
            try:
                await self._store.insert_block(
                    new, now=now, limits=self.policy.limits, change=change, audited=target.shared
                )
            except LabelTaken as taken:
                return self._label_taken(target, taken.label)
            except LimitReached as full:
                return self._full(target, full.limit)
            except OverBudget as over:
                return Refused(self.policy.over_budget(over.total))
            except Conflict:
                continue
            await self._audited(target, now)
            kept = ", pinned (kept until you remove it)" if pinned else ""
            return Done(f"Saved {level.value} block '{label}'{kept}.")
        return RETRY_LATER

    async def change(
        self,
        target: Target,
        label: str,
        *,
        content: str | None = None,
        level: Level | None = None,
        state: State | None = None,
        priority: int | None = None,
        protect_pinned: bool = False,
        origin: Origin | None = None,
        if_rev: int | None = None,
    ) -> Outcome:
        """Change a block's content, level, state or priority; with protect_pinned a pinned
        block is refused (the agent tools may never change one). origin says where new content
        came from; with if_rev, a block no longer at that revision is refused (it changed since
        the change was asked for)."""
        if refusal := await self.write_refusal(target):
            return refusal
        if content is not None and (
            problem := self.policy.content_problem(content)
            or self.policy.secret_problem(label, content, group=target.group)
        ):
            return Refused(problem)
        if priority is not None and (problem := priority_problem(priority)):
            return Refused(problem)
        wanted = {"content": content, "level": level, "state": state, "priority": priority}
        for _ in range(_ATTEMPTS):
            blocks = await self.blocks(target)
            block = find_block(blocks, label)
            if block is None:
                return self._missing(target, label)
            if refusal := self._held(target, block, protect_pinned, if_rev):
                return refusal
            strong = Level.STRONG in (block.level, level)
            if strong and (refusal := await self.write_refusal(target, strong=True)):
                return refusal
            change = _Change.against(block, **wanted)
            if not change.fields():
                return Done(_unchanged(block, level, state, priority))
            if change.content is not None and (
                problem := self.policy.budget_problem(blocks, block, change.content)
            ):
                return Refused(problem)
            now = self._clock()
            try:
                await self._store.update_block(
                    block,
                    now=now,
                    limits=self.policy.limits,
                    change=Change(target.change.actor, target.change.channel, origin),
                    audited=target.shared,
                    **change.fields(),
                )
            except OverBudget as over:
                return Refused(self.policy.over_budget(over.total))
            except (Conflict, NotFound):
                continue  # read again: changed, or gone (then it is missing)
            await self._audited(target, now)
            return Done(self._changed(target, block, change))
        return RETRY_LATER

    def _held(
        self, target: Target, block: Block, protect_pinned: bool, if_rev: int | None
    ) -> Refused | None:
        """Why this block may not change now: pinned (for the agent tools), or changed since
        the change was asked for."""
        if protect_pinned and block.state is State.PINNED:
            return self._protected(block)
        if if_rev is not None and block.rev != if_rev:
            return Refused(
                f"Block '{block.label}' changed after this was asked for; nothing was saved. "
                f"Send {target.command('list')} to see it as it is now."
            )
        return None

    def _changed(self, target: Target, block: Block, change: _Change) -> str:
        """The reply for a committed change."""
        fields = change.fields()
        label = block.label
        if len(fields) > 1:
            return f"Updated block '{label}'."
        if change.content is not None:
            return f"Saved the new content of '{label}'."
        if change.level is not None:
            return f"Block '{label}' is now {change.level.value}."
        if change.priority is not None:
            return f"Block '{label}' now has priority {change.priority}."
        if change.state is State.IDLE:
            return (
                f"Block '{label}' is now idle: {self.policy.idle_notice()}. "
                f"{target.command('activate')} {label} undoes this."
            )
        if change.state is State.PINNED:
            return f"Block '{label}' is now pinned: sent to the model and kept until you remove it."
        return f"Block '{label}' is now active."

    async def remove(self, target: Target, label: str, *, protect_pinned: bool = False) -> Outcome:
        """Delete a block; everyone may delete their own, whatever its level."""
        if refusal := await self.write_refusal(target):
            return refusal
        for _ in range(_ATTEMPTS):
            block = find_block(await self.blocks(target), label)
            if block is None:
                return self._missing(target, label)
            if protect_pinned and block.state is State.PINNED:
                return self._protected(block)
            now = self._clock()
            try:
                await self._store.delete_block(
                    block,
                    now=now,
                    change=target.change,
                    audited=target.shared,
                    limits=self.policy.limits,
                )
            except NotFound:
                continue
            await self._audited(target, now)
            return Done(f"Removed block '{block.label}'.")
        return RETRY_LATER

    async def clear(self, target: Target, *, confirm: bool) -> Outcome:
        """Without confirm, say what a clear would delete; with it, delete every block of the
        scope, pinned ones included."""
        if refusal := await self.write_refusal(target):
            return refusal
        blocks = await self.blocks(target)
        if not confirm:
            if not blocks:
                return Done(f"{target.empty()} Nothing to clear.")
            pinned = sum(1 for b in blocks if b.state is State.PINNED)
            return Done(
                f"This would delete {len(blocks)} block(s) from {target.noun()}, {pinned} of "
                f"them pinned. Send {target.command('clear')} confirm to delete them all; "
                f"{self._undo_note(target)}"
            )
        now = self._clock()
        count = await self._store.clear_scope(
            target.scope,
            now=now,
            change=target.change,
            audited=target.shared,
            limits=self.policy.limits,
        )
        await self._audited(target, now)
        return Done(
            f"Deleted {count} block(s) from {target.noun()}. {self._undo_note(target).capitalize()}"
        )

    def _undo_note(self, target: Target) -> str:
        days = self.policy.pins.history_days
        return f"{target.command('undo')} brings them back, for {days} days."

    async def replace_scopes(
        self,
        scopes: dict[str, tuple[int, list[Block]]],
        history: dict[str, list[Version]] | None = None,
    ) -> int:
        """Make each scope hold exactly these blocks (an import, checked by the block policy
        beforehand), in one transaction; shared scopes' changes go to their audit trail. The
        scopes in history get exactly those versions; the others a version of each change.
        Returns blocks written."""
        audited = {scope for scope in scopes if is_shared_scope(scope)}
        return await self._store.replace_scopes(
            scopes,
            now=self._clock(),
            change=IMPORT,
            audited=audited,
            versions=history or None,
            limits=self.policy.limits,
        )


def _unchanged(block: Block, level: Level | None, state: State | None, priority: int | None) -> str:
    if level is not None:
        return f"Block '{block.label}' is already {level.value}."
    if state is not None:
        return f"Block '{block.label}' is already {state.value}."
    if priority is not None:
        return f"Block '{block.label}' already has priority {priority}."
    return f"Block '{block.label}' already has this content."

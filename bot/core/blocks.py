"""Block operations over one scope, the one path for `/pin` and the agent tools: permissions,
label and content rules, limits, the budget, pinned-block protection and the audit trail are all
decided here, and every operation returns a typed outcome."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.config import PinsConfig
from bot.core.clock import Clock, utc_now
from bot.core.context import MessageContext
from bot.core.conversation import ChatKind
from bot.core.credentials import credential_kind
from bot.core.permissions import Access, Action, Role, Speaker
from bot.core.validation import content_problem, label_problem, priority_problem
from storage import Store
from storage.models import AuditEntry, Block, Level, NewBlock, State, label_key

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
    actor: str = ""

    @classmethod
    def of(cls, context: MessageContext, *, shared: bool) -> Target | Refused:
        """The speaker's personal or the group's shared scope, or why pins do not work here."""
        speaker, conversation = context.speaker, context.conversation
        if not speaker.pins_on:
            return Refused(speaker.refusal or "Pins are not available here.")
        scope = conversation.shared_scope if shared else conversation.personal_scope
        if scope is None:  # resolve_access grants a role only where both scopes exist
            return Refused("Pins are not available here.")
        group = conversation.kind is ChatKind.GROUP
        return cls(scope, shared, group, speaker, context.actor)

    @classmethod
    def operator(cls, group_scope: str, actor: str) -> Target:
        """A group's shared scope as the bot's operator acts on it (from the web page): with a
        shared admin's rights, and every other rule of `/pin shared`."""
        return cls(group_scope, True, True, Speaker(Access(Role.SHARED_ADMIN)), actor)

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

    def action(self) -> str:
        """The change as the audit trail names it."""
        parts = []
        if self.content is not None:
            parts.append("edit")
        if self.level is not None:
            parts.append(f"level {self.level.value}")
        if self.state is not None:
            parts.append(f"state {self.state.value}")
        if self.priority is not None:
            parts.append(f"priority {self.priority}")
        return ", ".join(parts)


class BlockOps:
    """Adds, changes and removes blocks of one scope for one speaker."""

    def __init__(self, store: Store, pins: PinsConfig, clock: Clock = utc_now) -> None:
        self._store = store
        self._pins = pins
        self._clock = clock

    @staticmethod
    def default_level(target: Target) -> Level:
        """The level of an add that names none: strong in a DM, context in groups."""
        return Level.CONTEXT if target.group else Level.STRONG

    async def blocks(self, target: Target) -> list[Block]:
        """Every block of the target scope, in any state, oldest first."""
        return await self._store.blocks([target.scope])

    # --- checks ---------------------------------------------------------------------------------

    async def _write_refusal(self, target: Target, strong: bool = False) -> Refused | None:
        """Shared blocks need a shared admin; personal strong blocks a strong user or admin."""
        if target.shared:
            reason = await target.speaker.refusal_for(Action.SHARED_WRITE)
        elif strong:
            reason = await target.speaker.refusal_for(Action.PERSONAL_STRONG)
        else:
            return None
        return Refused(reason) if reason else None

    def _secret_problem(self, target: Target, label: str, content: str) -> str | None:
        if not target.group or not self._pins.refuse_secrets_in_groups:
            return None
        kind = credential_kind(f"{label} {content}")
        if kind is None:
            return None
        return (
            f"Not saved: this looks like {kind}. Blocks in a group can be revealed to every "
            "member (the model may repeat them), so do not pin secrets here; keep them "
            "out of chats. (The operator can turn this check off with "
            "pins.refuse_secrets_in_groups: false.)"
        )

    def _budget_problem(
        self, blocks: list[Block], replaced: Block | None, content: str
    ) -> str | None:
        budget = self._pins.max_total_chars
        if budget == 0:
            return None
        before = sum(len(b.content) for b in blocks)
        total = before - (len(replaced.content) if replaced else 0) + len(content)
        if total <= budget or total <= before:  # only growth past the budget is refused
            return None
        return (
            f"That would bring these blocks to {total} characters, over the budget of "
            f"{budget} (pins.max_total_chars). Shorten or remove a block first."
        )

    def _add_refusal(
        self, target: Target, blocks: list[Block], label: str, content: str
    ) -> Refused | None:
        """Why a block cannot be added to these blocks, or None if it can."""
        if (existing := find_block(blocks, label)) is not None:
            return Refused(
                f"A block labelled '{existing.label}' already exists in {target.noun()}. "
                f"Use {target.command('edit')} {existing.label} <new content> to change it."
            )
        limit = self._pins.max_blocks_per_session
        if len(blocks) >= limit:
            return Refused(
                f"{target.noun().capitalize()} already hold {limit} blocks, the limit. "
                f"Remove one with {target.command('remove')} <label> first."
            )
        problem = self._budget_problem(blocks, None, content)
        return Refused(problem) if problem else None

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

    # --- the audit trail ------------------------------------------------------------------------

    def _audit(
        self,
        target: Target,
        action: str,
        label: str,
        old: str | None,
        new: str | None,
        now: datetime,
    ) -> tuple[AuditEntry, ...]:
        """The audit entry for a change, when the change is to shared blocks."""
        if not target.shared:
            return ()
        entry = AuditEntry(
            group_scope=target.scope,
            actor=target.actor,
            action=action,
            label=label,
            old_content=old,
            new_content=new,
            at=now,
        )
        return (entry,)

    async def _audited(self, target: Target, now: datetime) -> None:
        """Keep a group's audit trail within its retention after a shared change."""
        if target.shared:
            retention = timedelta(days=self._pins.audit_retention_days)
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
    ) -> Outcome:
        """Add a block (at the target's default level when level is None)."""
        level = level or self.default_level(target)
        if refusal := await self._write_refusal(target, level is Level.STRONG):
            return refusal
        problem = (
            label_problem(label, self._pins)
            or content_problem(content, self._pins)
            or priority_problem(priority)
            or self._secret_problem(target, label, content)
        )
        if problem:
            return Refused(problem)
        state = State.PINNED if pinned else State.ACTIVE
        new = NewBlock(target.scope, label, content, level, state, priority)
        action = f"add {level.value}{' pinned' if pinned else ''}"
        for _ in range(_ATTEMPTS):
            # The insert's own guards enforce every limit, so try it first and read the scope
            # only to explain a refusal.
            now = self._clock()
            audit = self._audit(target, action, label, None, content, now)
            if await self._store.insert_block(
                new,
                now=now,
                max_blocks=self._pins.max_blocks_per_session,
                max_total_chars=self._pins.max_total_chars,
                audit=audit,
            ):
                await self._audited(target, now)
                kept = ", pinned (kept until you remove it)" if pinned else ""
                return Done(f"Saved {level.value} block '{label}'{kept}.")
            if refusal := self._add_refusal(target, await self.blocks(target), label, content):
                return refusal
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
    ) -> Outcome:
        """Change a block's content, level, state or priority; with protect_pinned a pinned
        block is refused (the agent tools may never change one)."""
        if refusal := await self._write_refusal(target):
            return refusal
        if content is not None and (
            problem := content_problem(content, self._pins)
            or self._secret_problem(target, label, content)
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
            if protect_pinned and block.state is State.PINNED:
                return self._protected(block)
            strong = Level.STRONG in (block.level, level)
            if strong and (refusal := await self._write_refusal(target, strong=True)):
                return refusal
            change = _Change.against(block, **wanted)
            if not change.fields():
                return Done(_unchanged(block, level, state, priority))
            if change.content is not None and (
                problem := self._budget_problem(blocks, block, change.content)
            ):
                return Refused(problem)
            if await self._update(target, block, change):
                return Done(self._changed(target, block, change))
        return RETRY_LATER

    async def _update(self, target: Target, block: Block, change: _Change) -> bool:
        now = self._clock()
        new_content = block.content if change.content is None else change.content
        audit = self._audit(target, change.action(), block.label, block.content, new_content, now)
        done = await self._store.update_block(
            block,
            now=now,
            audit=audit,
            max_total_chars=self._pins.max_total_chars,
            **change.fields(),
        )
        if done:
            await self._audited(target, now)
        return done

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
            pins = self._pins
            return (
                f"Block '{label}' is now idle: it is no longer sent to the model, and it is "
                f"deleted after {pins.idle_retention_days} idle days and "
                f"{pins.idle_retention_calls} further model calls, or after "
                f"{pins.idle_hard_retention_days} idle days. {target.command('activate')} "
                f"{label} undoes this."
            )
        if change.state is State.PINNED:
            return f"Block '{label}' is now pinned: sent to the model and kept until you remove it."
        return f"Block '{label}' is now active."

    async def remove(self, target: Target, label: str, *, protect_pinned: bool = False) -> Outcome:
        """Delete a block; everyone may delete their own, whatever its level."""
        if refusal := await self._write_refusal(target):
            return refusal
        for _ in range(_ATTEMPTS):
            block = find_block(await self.blocks(target), label)
            if block is None:
                return self._missing(target, label)
            if protect_pinned and block.state is State.PINNED:
                return self._protected(block)
            now = self._clock()
            audit = self._audit(target, "remove", block.label, block.content, None, now)
            if await self._store.delete_block(block, audit):
                await self._audited(target, now)
                return Done(f"Removed block '{block.label}'.")
        return RETRY_LATER

    async def clear(self, target: Target, *, confirm: bool) -> Outcome:
        """Without confirm, say what a clear would delete; with it, delete every block of the
        scope, pinned ones included."""
        if refusal := await self._write_refusal(target):
            return refusal
        blocks = await self.blocks(target)
        if not confirm:
            if not blocks:
                return Done(f"{target.empty()} Nothing to clear.")
            pinned = sum(1 for b in blocks if b.state is State.PINNED)
            return Done(
                f"This would delete {len(blocks)} block(s) from {target.noun()}, {pinned} of "
                f"them pinned. Send {target.command('clear')} confirm to delete them all."
            )
        now = self._clock()
        audit = tuple(
            entry
            for block in blocks
            for entry in self._audit(target, "clear", block.label, block.content, None, now)
        )
        count = await self._store.clear_scope(target.scope, audit)
        await self._audited(target, now)
        return Done(f"Deleted {count} block(s) from {target.noun()}.")


def _unchanged(block: Block, level: Level | None, state: State | None, priority: int | None) -> str:
    if level is not None:
        return f"Block '{block.label}' is already {level.value}."
    if state is not None:
        return f"Block '{block.label}' is already {state.value}."
    if priority is not None:
        return f"Block '{block.label}' already has priority {priority}."
    return f"Block '{block.label}' already has this content."

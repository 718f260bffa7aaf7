"""Executes `/pin` commands (and the agent tools' block operations) against the store, after the
permission check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.config import PinsConfig
from bot.core.commands import PinCommand, Verb
from bot.core.conversation import ChatKind, Conversation
from bot.core.credentials import credential_kind
from bot.core.help import pin_help
from bot.core.permissions import Action, Role, may, refusal_for, resolve_access
from bot.core.render import estimate_tokens, injected
from bot.core.validation import content_problem, label_problem
from storage.models import AuditEntry, Block, Level, NewBlock, State
from storage.sqlite import Store, label_key

Clock = Callable[[], datetime]
# Guarded writes fail only when another writer changed the scope in between; re-reading settles it.
_ATTEMPTS = 5
_RETRY_LATER = "The blocks changed while saving; nothing was saved. Please try again."
_STATE_VERBS = {
    Verb.IDLE: State.IDLE,
    Verb.ACTIVATE: State.ACTIVE,
    Verb.UNPIN: State.ACTIVE,
    Verb.PIN: State.PINNED,
}


def utc_now() -> datetime:
    """The real clock."""
    return datetime.now(UTC)


def find_block(blocks: Sequence[Block], label: str) -> Block | None:
    """The block with this label (matched case-insensitively), if any."""
    key = label_key(label)
    return next((block for block in blocks if label_key(block.label) == key), None)


@dataclass(frozen=True)
class _Target:
    scope: str
    shared: bool
    role: Role
    group: bool
    actor: str = ""

    def noun(self) -> str:
        if self.shared:
            return "this group's shared blocks"
        return "your personal blocks in this group" if self.group else "your blocks"


class PinService:
    """The `/pin` commands over one store."""

    def __init__(self, store: Store, pins: PinsConfig, clock: Clock = utc_now) -> None:
        self._store = store
        self._pins = pins
        self._clock = clock

    # --- commands -------------------------------------------------------------------------------

    async def execute(self, conversation: Conversation, command: PinCommand) -> str:
        """Run a parsed command for this sender in this chat; returns the English reply.

        A reply that reports a change is given only after the change is committed.
        """
        access = resolve_access(conversation, self._pins)
        if access.role is None:
            return access.refusal or "Pins are not available here."
        role = access.role
        if command.shared and role is Role.DM_USER:
            return refusal_for(role, Action.SHARED_READ)
        if command.verb is Verb.HELP:
            return pin_help(
                shared=command.shared,
                group=role is not Role.DM_USER,
                label_limit=self._pins.max_label_length,
            )
        scope = conversation.shared_scope if command.shared else conversation.personal_scope
        if scope is None:  # resolve_access guarantees both scopes for the roles it grants
            return "Pins are not available here."
        target = _Target(
            scope,
            command.shared,
            role,
            conversation.kind is ChatKind.GROUP,
            conversation.sender_id or "",
        )
        reading = command.verb in (Verb.LIST, Verb.LOG)
        if command.shared and not reading and not may(role, Action.SHARED_WRITE):
            return refusal_for(role, Action.SHARED_WRITE)
        if command.verb is Verb.LIST:
            return await self._list(target)
        if command.verb is Verb.LOG:
            return await self._log(target, command.count or 10)
        if command.verb is Verb.CLEAR:
            return await self._clear(target, command.confirm)
        if command.verb is Verb.ADD:
            return await self._add(target, command)
        return await self._change(target, command)

    def _audit(
        self,
        target: _Target,
        action: str,
        label: str,
        old: str | None,
        new: str | None,
        now: datetime,
    ) -> tuple[AuditEntry, ...]:
        """The audit entry for a change, when the change is to shared blocks."""
        if not target.shared:
            return ()
        return (
            AuditEntry(
                group_scope=target.scope,
                actor=target.actor,
                action=action,
                label=label,
                old_content=old,
                new_content=new,
                at=now,
            ),
        )

    async def _audited(self, target: _Target, now: datetime) -> None:
        """Keep a group's audit trail within its retention after a shared change."""
        if target.shared:
            retention = timedelta(days=self._pins.audit_retention_days)
            await self._store.prune_audit(target.scope, now - retention)

    async def _log(self, target: _Target, count: int) -> str:
        entries = await self._store.audit_log(target.scope, count)
        if not entries:
            return "No changes to this group's shared blocks are on record."
        lines = [f"Last {len(entries)} change(s) to this group's shared blocks, newest first:"]
        for entry in entries:
            when = entry.at.strftime("%Y-%m-%d %H:%M UTC")
            lines.append(f"{when} · {entry.actor} · {entry.action} '{entry.label}'")
            if entry.old_content is not None and entry.old_content != entry.new_content:
                lines.append(f"  before: {entry.old_content}")
            if entry.new_content is not None:
                lines.append(f"  after: {entry.new_content}")
        return "\n".join(lines)

    def _secret_problem(self, target: _Target, label: str, content: str) -> str | None:
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

    def _strong_refusal(self, target: _Target) -> str | None:
        if target.shared or may(target.role, Action.PERSONAL_STRONG):
            return None
        return refusal_for(target.role, Action.PERSONAL_STRONG)

    async def _add(self, target: _Target, command: PinCommand) -> str:
        label, content = command.label or "", command.content or ""
        problem = (
            label_problem(label, self._pins)
            or content_problem(content, self._pins)
            or self._secret_problem(target, label, content)
        )
        if problem:
            return problem
        level = command.level or (
            Level.STRONG if target.role is Role.DM_USER and not target.shared else Level.CONTEXT
        )
        if level is Level.STRONG and (refusal := self._strong_refusal(target)):
            return refusal
        state = State.PINNED if command.pinned else State.ACTIVE
        new = NewBlock(scope=target.scope, label=label, content=content, level=level, state=state)
        action = f"add {level.value}{' pinned' if command.pinned else ''}"
        for _ in range(_ATTEMPTS):
            # The insert's own guards enforce every limit, so try it first and read the scope
            # only to explain a refusal.
            now = self._clock()
            if await self._store.insert_block(
                new,
                now=now,
                max_blocks=self._pins.max_blocks_per_session,
                max_total_chars=self._pins.max_total_chars,
                audit=self._audit(target, action, label, None, content, now),
            ):
                await self._audited(target, now)
                kept = ", pinned (kept until you remove it)" if command.pinned else ""
                return f"Saved {level.value} block '{label}'{kept}."
            blocks = await self._store.blocks([target.scope])
            if refusal := self._add_refusal(target, blocks, label, content):
                return refusal
        return _RETRY_LATER

    def _add_refusal(
        self, target: _Target, blocks: list[Block], label: str, content: str
    ) -> str | None:
        """Why a block cannot be added to these blocks, or None if it can."""
        if (existing := find_block(blocks, label)) is not None:
            return (
                f"A block labelled '{existing.label}' already exists in {target.noun()}. "
                f"Use {self._cmd(target, 'edit')} {existing.label} <new content> "
                "to change it."
            )
        if len(blocks) >= self._pins.max_blocks_per_session:
            return (
                f"{target.noun().capitalize()} already hold "
                f"{self._pins.max_blocks_per_session} blocks, the limit. Remove one with "
                f"{self._cmd(target, 'remove')} <label> first."
            )
        return self._budget_problem(blocks, None, content)

    async def _change(self, target: _Target, command: PinCommand) -> str:
        label = command.label or ""
        verb = command.verb
        if verb is Verb.EDIT and (
            problem := (
                content_problem(command.content or "", self._pins)
                or self._secret_problem(target, label, command.content or "")
            )
        ):
            return problem
        for _ in range(_ATTEMPTS):
            blocks = await self._store.blocks([target.scope])
            block = find_block(blocks, label)
            if block is None:
                return (
                    f"There is no block labelled '{label}' in {target.noun()}. "
                    f"Send {self._cmd(target, 'list')} to see them."
                )
            if verb is Verb.REMOVE:
                now = self._clock()
                if await self._store.delete_block(
                    block, self._audit(target, "remove", block.label, block.content, None, now)
                ):
                    await self._audited(target, now)
                    return f"Removed block '{block.label}'."
                continue
            touches_strong = block.level is Level.STRONG or command.level is Level.STRONG
            if touches_strong and (refusal := self._strong_refusal(target)):
                return refusal
            reply = await self._apply(target, blocks, block, command)
            if reply is not None:
                return reply
        return _RETRY_LATER

    async def _apply(
        self, target: _Target, blocks: list[Block], block: Block, command: PinCommand
    ) -> str | None:
        """Write one change to block; None when the block changed meanwhile."""
        change: dict[str, Any]
        if command.verb is Verb.EDIT:
            content = command.content or ""
            if problem := self._budget_problem(blocks, block, content):
                return problem
            change, action = {"content": content}, "edit"
            reply = f"Saved the new content of '{block.label}'."
        elif command.verb is Verb.LEVEL:
            level = command.level or block.level
            if level is block.level:
                return f"Block '{block.label}' is already {level.value}."
            change, action = {"level": level}, f"level {level.value}"
            reply = f"Block '{block.label}' is now {level.value}."
        else:
            state = _STATE_VERBS[command.verb]
            if state is block.state:
                return f"Block '{block.label}' is already {state.value}."
            change, action = {"state": state}, f"state {state.value}"
            reply = self._state_reply(block.label, state)
        now = self._clock()
        audit = self._audit(
            target, action, block.label, block.content, change.get("content", block.content), now
        )
        if not await self._store.update_block(
            block, now=now, audit=audit, max_total_chars=self._pins.max_total_chars, **change
        ):
            return None
        await self._audited(target, now)
        return reply

    def _state_reply(self, label: str, state: State) -> str:
        if state is State.IDLE:
            pins = self._pins
            return (
                f"Block '{label}' is now idle: it is no longer sent to the model, and it is "
                f"deleted after {pins.idle_retention_days} idle days and "
                f"{pins.idle_retention_calls} further model calls, or after "
                f"{pins.idle_hard_retention_days} idle days. /pin activate {label} undoes "
                "this."
            )
        if state is State.PINNED:
            return f"Block '{label}' is now pinned: sent to the model and kept until you remove it."
        return f"Block '{label}' is now active."

    def _budget_problem(
        self, blocks: list[Block], replaced: Block | None, content: str
    ) -> str | None:
        budget = self._pins.max_total_chars
        if budget == 0:
            return None
        total = sum(len(b.content) for b in blocks if b is not replaced) + len(content)
        if total <= budget:
            return None
        return (
            f"That would bring these blocks to {total} characters, over the budget of "
            f"{budget} (pins.max_total_chars). Shorten or remove a block first."
        )

    async def _clear(self, target: _Target, confirm: bool) -> str:
        cmd = self._cmd(target, "clear")
        if not confirm:
            blocks = await self._store.blocks([target.scope])
            if not blocks:
                return f"There are no blocks to clear in {target.noun()}."
            pinned = sum(1 for b in blocks if b.state is State.PINNED)
            return (
                f"This would delete {len(blocks)} block(s) from {target.noun()}, {pinned} of "
                f"them pinned. Send {cmd} confirm to delete them all."
            )
        now = self._clock()
        audit: tuple[AuditEntry, ...] = ()
        if target.shared:
            audit = tuple(
                entry
                for block in await self._store.blocks([target.scope])
                for entry in self._audit(target, "clear", block.label, block.content, None, now)
            )
        count = await self._store.clear_scope(target.scope, audit)
        await self._audited(target, now)
        return f"Deleted {count} block(s) from {target.noun()}."

    async def _list(self, target: _Target) -> str:
        blocks = await self._store.blocks([target.scope])
        if not blocks:
            return (
                f"There are no blocks in {target.noun()}. Add one with "
                f"{self._cmd(target, 'add')} <label> <content>."
            )
        limit = self._pins.max_blocks_per_session
        lines = [f"{target.noun().capitalize()} ({len(blocks)} of {limit}):"]
        live = injected(blocks)
        in_order = live + [b for b in blocks if b.state is State.IDLE]
        for number, block in enumerate(in_order, start=1):
            details = [block.level.value, block.state.value]
            if block.priority:
                details.append(f"priority {block.priority}")
            lines.append(f"{number}. {block.label} ({', '.join(details)})")
            lines.append(block.content)
        threshold = self._pins.token_warning_threshold
        if threshold:
            tokens = estimate_tokens(blocks, "shared" if target.shared else "personal")
            lines.append(f"These blocks add about {tokens} tokens to every request.")
            if tokens > threshold:
                lines.append(
                    f"Warning: that is over the warning threshold of {threshold} tokens; "
                    "consider shortening, idling or removing blocks."
                )
        return "\n".join(lines)

    @staticmethod
    def _cmd(target: _Target, verb: str) -> str:
        return f"/pin shared {verb}" if target.shared else f"/pin {verb}"

    # --- agent tools ------------------------------------------------------------------------------

    def _agent_target(self, conversation: Conversation) -> _Target | str:
        access = resolve_access(conversation, self._pins)
        scope = conversation.personal_scope
        if access.role is None or scope is None:
            return access.refusal or "Pins are not available here."
        return _Target(scope, False, access.role, conversation.kind is ChatKind.GROUP)

    async def agent_set(
        self,
        conversation: Conversation,
        label: str,
        content: str,
        *,
        level: Level | None,
        pinned: bool,
        priority: int | None,
    ) -> str:
        """Create or update a block of the speaker's personal scope for the model; returns what
        happened, or why not, in English. Pinned blocks are never changed this way."""
        target = self._agent_target(conversation)
        if isinstance(target, str):
            return f"Refused: {target}"
        content = content.strip()
        problem = (
            label_problem(label, self._pins)
            or content_problem(content, self._pins)
            or self._secret_problem(target, label, content)
        )
        if problem:
            return f"Refused: {problem}"
        for _ in range(_ATTEMPTS):
            blocks = await self._store.blocks([target.scope])
            existing = find_block(blocks, label)
            if existing is None:
                reply = await self._agent_insert(
                    target, blocks, label, content, level, pinned, priority or 0
                )
            else:
                reply = await self._agent_update(
                    target, blocks, existing, content, level, pinned, priority
                )
            if reply is not None:
                return reply
        return f"Refused: {_RETRY_LATER}"

    async def _agent_insert(
        self,
        target: _Target,
        blocks: list[Block],
        label: str,
        content: str,
        level: Level | None,
        pinned: bool,
        priority: int,
    ) -> str | None:
        level = level or (Level.STRONG if target.role is Role.DM_USER else Level.CONTEXT)
        if level is Level.STRONG and (refusal := self._strong_refusal(target)):
            return f"Refused: {refusal}"
        if refusal := self._add_refusal(target, blocks, label, content):
            return f"Refused: {refusal}"
        state = State.PINNED if pinned else State.ACTIVE
        new = NewBlock(
            scope=target.scope,
            label=label,
            content=content,
            level=level,
            state=state,
            priority=priority,
        )
        if await self._store.insert_block(
            new,
            now=self._clock(),
            max_blocks=self._pins.max_blocks_per_session,
            max_total_chars=self._pins.max_total_chars,
        ):
            return (
                f"Saved {level.value} block '{label}'"
                f"{' (pinned)' if pinned else ''}; it applies from the next turn."
            )
        return None

    async def _agent_update(
        self,
        target: _Target,
        blocks: list[Block],
        block: Block,
        content: str,
        level: Level | None,
        pinned: bool,
        priority: int | None,
    ) -> str | None:
        if block.state is State.PINNED:
            return (
                f"Refused: block '{block.label}' is pinned; only the user can change or "
                "remove it, with /pin."
            )
        touches_strong = block.level is Level.STRONG or level is Level.STRONG
        if touches_strong and (refusal := self._strong_refusal(target)):
            return f"Refused: {refusal}"
        if problem := self._budget_problem(blocks, block, content):
            return f"Refused: {problem}"
        done = await self._store.update_block(
            block,
            now=self._clock(),
            max_total_chars=self._pins.max_total_chars,
            content=content,
            level=level,
            state=State.PINNED if pinned else None,
            priority=priority,
        )
        return f"Updated block '{block.label}'; it applies from the next turn." if done else None

    async def agent_get(self, conversation: Conversation, label: str | None) -> str | list[Block]:
        """The speaker's personal blocks (or the one labelled label), or a refusal."""
        target = self._agent_target(conversation)
        if isinstance(target, str):
            return f"Refused: {target}"
        blocks = await self._store.blocks([target.scope])
        if label is None:
            return blocks
        found = find_block(blocks, label)
        return [found] if found else f"There is no block labelled '{label}'."

    async def agent_delete(self, conversation: Conversation, label: str) -> str:
        """Delete a personal block for the model, unless it is pinned."""
        target = self._agent_target(conversation)
        if isinstance(target, str):
            return f"Refused: {target}"
        blocks = await self._store.blocks([target.scope])
        block = find_block(blocks, label)
        if block is None:
            return f"There is no block labelled '{label}'."
        if block.state is State.PINNED:
            return (
                f"Refused: block '{block.label}' is pinned; only the user can remove it, "
                "with /pin remove."
            )
        await self._store.delete_block(block)
        return f"Deleted block '{block.label}'."

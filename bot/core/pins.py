"""Executes `/pin` commands: reads (list, log, help) here, every change through BlockOps."""

from __future__ import annotations

from bot.config import PinsConfig
from bot.core.blocks import BlockOps, Done, Outcome, Refused, Target
from bot.core.clock import Clock, utc_now
from bot.core.commands import LOG_DEFAULT, PinCommand, Verb
from bot.core.context import MessageContext
from bot.core.help import pin_help
from bot.core.permissions import Action, Role, refusal_for
from bot.core.render import estimate_tokens, injected
from storage.models import State
from storage.sqlite import Store

_STATE_VERBS = {
    Verb.IDLE: State.IDLE,
    Verb.ACTIVATE: State.ACTIVE,
    Verb.UNPIN: State.ACTIVE,
    Verb.PIN: State.PINNED,
}


class PinService:
    """The `/pin` commands over one store."""

    def __init__(self, store: Store, pins: PinsConfig, clock: Clock = utc_now) -> None:
        self._store = store
        self._pins = pins
        self.ops = BlockOps(store, pins, clock)

    async def execute(self, context: MessageContext, command: PinCommand) -> str:
        """Run a parsed command for the message's sender; returns the English reply.

        A reply that reports a change is given only after the change is committed.
        """
        speaker = context.speaker
        if not speaker.pins_on:
            return speaker.refusal or "Pins are not available here."
        if command.shared and speaker.listed_role is Role.DM_USER:
            return refusal_for(Role.DM_USER, Action.SHARED_READ)
        if command.verb is Verb.HELP:
            return pin_help(
                shared=command.shared,
                group=speaker.listed_role is not Role.DM_USER,
                label_limit=self._pins.max_label_length,
            )
        target = Target.of(context, shared=command.shared)
        if isinstance(target, Refused):
            return target.reason
        if command.verb is Verb.LIST:
            return await self._list(target)
        if command.verb is Verb.LOG:
            return await self._log(target, command.count or LOG_DEFAULT)
        outcome = await self._write(target, command)
        return outcome.message if isinstance(outcome, Done) else outcome.reason

    async def _write(self, target: Target, command: PinCommand) -> Outcome:
        ops, label = self.ops, command.label or ""
        if command.verb is Verb.ADD:
            return await ops.add(
                target, label, command.content or "", level=command.level, pinned=command.pinned
            )
        if command.verb is Verb.CLEAR:
            return await ops.clear(target, confirm=command.confirm)
        if command.verb is Verb.REMOVE:
            return await ops.remove(target, label)
        if command.verb is Verb.EDIT:
            return await ops.change(target, label, content=command.content or "")
        if command.verb is Verb.LEVEL:
            return await ops.change(target, label, level=command.level)
        return await ops.change(target, label, state=_STATE_VERBS[command.verb])

    async def _log(self, target: Target, count: int) -> str:
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

    async def _list(self, target: Target) -> str:
        blocks = await self.ops.blocks(target)
        if not blocks:
            return (
                f"There are no blocks in {target.noun()}. Add one with "
                f"{target.command('add')} <label> <content>."
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

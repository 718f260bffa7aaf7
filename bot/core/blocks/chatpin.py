"""A group's pinned chat message as its shared context block (telegram.sync_pinned_message):
a message pinned by someone who may change the shared blocks becomes the block (replacing the
one before, and active again if it was idle), whatever was pinned before: a message pinned
again after another one, or after everything was unpinned, is the block again. A group found
with no pinned message at all has the block idled. Only a pin ever sets the block's content."""

from __future__ import annotations

import dataclasses
import logging

from bot.core.blocks.ops import BlockOps, Done, Refused, Target, find_block
from bot.core.people import MessageContext
from storage import Store
from storage.models import Author, Channel, Level, Origin, State

log = logging.getLogger(__name__)
NOTE = "chat-pin"  # the scope note saying why the pinned message is not the block


class ChatPin:
    """Turns a group's pinned chat message into its shared context block."""

    def __init__(self, store: Store, ops: BlockOps, label: str) -> None:
        self._store = store
        self._ops = ops
        self.label = label

    async def pinned(
        self, context: MessageContext, text: str | None, *, message_id: str, author: str | None
    ) -> str:
        """Make the pinned message (its text, or its caption) the group's shared block, if the
        one who pinned it may change shared blocks; returns what happened, for the log."""
        target = Target.of(context, shared=True, channel=Channel.TELEGRAM_PIN)
        if isinstance(target, Refused):
            return f"not taken: {target.reason}"
        if not context.conversation.sender_id:
            return "not taken: pinned without a sender id (an anonymous admin or a channel)"
        origin = Origin(message_id, author)
        target = dataclasses.replace(
            target, by=Author(target.by.actor, Channel.TELEGRAM_PIN, origin)
        )
        if refusal := await self._ops.may_change(target):
            return f"not taken: {refusal.reason}"
        if not text or not text.strip():
            return "not taken: the pinned message has no text"
        content = text.strip()
        policy = self._ops.policy
        # A pinned credential is not taken, and the group hears why from /pin shared status
        # (the refusal names its kind, never the text).
        if problem := policy.content_problem(content) or policy.secret_problem(
            f"{self.label} {content}", group=True
        ):
            note = f"the chat's pinned message is not the '{self.label}' block: {problem.reason}"
            await self._store.set_note(target.scope, NOTE, note, now=self._ops.now())
            return f"not taken: {problem.reason}"
        block = find_block(await self._ops.blocks(target), self.label)
        if block is not None and block.state is State.ACTIVE and block.content == content:
            # A repeated delivery of this pin, or the message the block holds pinned again:
            # the block is this message already. (A message pinned again after another one,
            # or after the block went idle, is no longer what the block holds: it is taken.)
            await self._store.set_note(target.scope, NOTE, None, now=self._ops.now())
            return "already taken: the block holds this message"
        if block is None:
            outcome = await self._ops.add(
                target, self.label, content, level=Level.CONTEXT, origin=origin
            )
        else:
            state = State.ACTIVE if block.state is State.IDLE else None
            outcome = await self._ops.change(target, self.label, content=content, state=state)
        if isinstance(outcome, Done):
            await self._store.set_note(target.scope, NOTE, None, now=self._ops.now())
            return f"taken: {outcome.message}"
        return f"not taken: {outcome.reason}"

    async def unpinned(self, group_scope: str) -> bool:
        """Idle the group's pinned-message block (the group has no pinned message now); True
        when it changed."""
        target = Target.operator(group_scope, "telegram", Channel.TELEGRAM_PIN)
        block = find_block(await self._ops.blocks(target), self.label)
        if block is None or block.state is State.IDLE:
            return False
        outcome = await self._ops.change(target, self.label, state=State.IDLE)
        return isinstance(outcome, Done)

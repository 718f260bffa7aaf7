"""A group's pinned chat message as its shared context block (telegram.sync_pinned_message):
a message pinned by someone who may change the shared blocks becomes the block (replacing the
one before, and active again if it was idle), whatever was pinned before: a message pinned
again after another one, or after everything was unpinned, is the block again. A group found
with no pinned message at all has the block idled. Only a pin ever sets the block's content.

Pins arrive in the order the chat announced them (Telegram's service message ids grow per chat):
the newest pin taken is kept (a scope note, not shown), and a pin announced before it, delivered
again (Telegram replaying a run of old updates after a crash), is not taken again. Unpinning
sends nothing: a chat found with a pinned message still (one of several unpinned, the newest
included) keeps its block; only a chat found with none idles it."""

from __future__ import annotations

import dataclasses
import logging

from bot.core.blocks.ops import BlockOps, Done, Refused, Target, find_block
from bot.core.people import MessageContext
from storage import Store
from storage.models import Author, Channel, Level, Origin, State

log = logging.getLogger(__name__)
NOTE = "chat-pin"  # the scope note saying why the pinned message is not the block
# The scope note (a leading ".": not shown) of the newest pin taken: "<chat id> <where>".
TAKEN_NOTE = ".chat-pin-taken"


class ChatPin:
    """Turns a group's pinned chat message into its shared context block."""

    def __init__(self, store: Store, ops: BlockOps, label: str) -> None:
        self._store = store
        self._ops = ops
        self.label = label

    async def pinned(
        self,
        context: MessageContext,
        text: str | None,
        *,
        message_id: str,
        author: str | None,
        pinned_at: int | None = None,
    ) -> str:
        """Make the pinned message (its text, or its caption) the group's shared block, if the
        one who pinned it may change shared blocks and the pin (announced at pinned_at) is newer
        than the one taken last; returns what happened, for the log."""
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
        chat = context.conversation.chat_id or ""
        taken = await self._taken_at(target.scope, chat)
        if pinned_at is not None and taken is not None and pinned_at <= taken:
            # Delivered again: the block holds this pin or a newer one already.
            return f"not taken: announced at {pinned_at}, not after the pin taken last ({taken})"
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
            await self._take(target.scope, chat, pinned_at)
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
            await self._take(target.scope, chat, pinned_at)
            return f"taken: {outcome.message}"
        return f"not taken: {outcome.reason}"

    async def _taken_at(self, scope: str, chat: str) -> int | None:
        """Where the newest pin taken in this chat was announced (None: none known; a group
        that became a supergroup starts counting again, under its new chat id)."""
        kept = (await self._store.notes(scope)).get(TAKEN_NOTE, "")
        where, _, at = kept.partition(" ")
        return int(at) if where == chat and at.isdigit() else None

    async def _take(self, scope: str, chat: str, pinned_at: int | None) -> None:
        """Remember the pin taken (announced at pinned_at) as the newest."""
        if pinned_at is not None:
            note = f"{chat} {pinned_at}"
            await self._store.set_note(scope, TAKEN_NOTE, note, now=self._ops.now())

    async def unpinned(self, group_scope: str) -> bool:
        """Idle the group's pinned-message block (the group has no pinned message now); True
        when it changed."""
        target = Target.operator(group_scope, "telegram", Channel.TELEGRAM_PIN)
        block = find_block(await self._ops.blocks(target), self.label)
        if block is None or block.state is State.IDLE:
            return False
        outcome = await self._ops.change(target, self.label, state=State.IDLE)
        return isinstance(outcome, Done)

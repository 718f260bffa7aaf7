"""One chat turn: the speaker's scopes, lifecycle, rendering, history, the model, the reply."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence

from bot.config import Config
from bot.core.conversation import Conversation
from bot.core.permissions import resolve_access
from bot.core.pins import Clock, PinService, utc_now
from bot.core.render import ordered, render
from bot.llm.base import ChatModel, Message, ModelError
from storage.models import Block, HistoryEntry
from storage.sqlite import Store

log = logging.getLogger(__name__)


def recent_history(
    entries: Sequence[HistoryEntry], max_chars: int, max_turns: int
) -> tuple[list[HistoryEntry], list[int]]:
    """Split history into the newest entries within the budget and the ids of the rest.

    Whole turns (a user message and its reply) are kept or dropped together; 0 turns or chars means
    no history is sent.
    """
    kept: list[HistoryEntry] = []
    chars = 0
    turns = 0
    index = len(entries)
    while index >= 2 and turns < max_turns:
        pair = entries[index - 2 : index]
        size = sum(len(entry.content) for entry in pair)
        if chars + size > max_chars:
            break
        kept[:0] = pair
        chars += size
        turns += 1
        index -= 2
    dropped = [entry.id for entry in entries[:index]]
    return kept, dropped


class ChatService:
    """Runs chat turns; turns of one conversation run in order, other conversations concurrently."""

    def __init__(
        self, store: Store, pins: PinService, config: Config, model: ChatModel,
        clock: Clock = utc_now,
    ) -> None:
        self._store = store
        self._pins = pins
        self._config = config
        self._model = model
        self._clock = clock
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def _lock(self, session: str) -> asyncio.Lock:
        lock = self._locks.get(session)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[session] = lock
        return lock

    async def turn(self, conversation: Conversation, text: str) -> str:
        """Send text to the model with the speaker's blocks and history; returns the reply.

        A failed model call returns one short English line and leaves no history.
        """
        session = conversation.session_key
        async with self._lock(session):
            shared, personal = await self._blocks(conversation)
            history = await self._store.history(session)
            kept, dropped = recent_history(
                history, self._config.chat.history_max_chars, self._config.chat.history_max_turns
            )
            messages = self.build_messages(shared, personal, kept, text)
            try:
                reply = await self._model.complete(messages)
            except ModelError as error:
                log.warning("model call failed for %s: %s", session, error)
                return error.user_message
            await self._store.append_turn(session, text, reply, now=self._clock(),
                                          drop_ids=dropped)
            return reply

    async def _blocks(self, conversation: Conversation) -> tuple[list[Block], list[Block]]:
        access = resolve_access(conversation, self._config.pins)
        if access.role is None:
            return [], []
        shared_scope, personal_scope = conversation.shared_scope, conversation.personal_scope
        scopes = [scope for scope in (shared_scope, personal_scope) if scope]
        blocks = await self._pins.blocks_for_request(scopes)
        shared = [b for b in blocks if b.scope == shared_scope]
        personal = [b for b in blocks if b.scope == personal_scope]
        return shared, personal

    def build_messages(
        self, shared: Sequence[Block], personal: Sequence[Block],
        history: Sequence[HistoryEntry], text: str,
    ) -> list[Message]:
        """The exact messages array for the model: system prompt with the strong section, history,
        then the user's message with the context section before it."""
        system = self._config.llm.system_prompt
        user = text
        if self._config.pins.allow_prompt_injection:
            rendered = render(ordered(shared, personal), text)
            if rendered.strong:
                system = f"{system}\n\n{rendered.strong}" if system else rendered.strong
            if rendered.context:
                user = f"{rendered.context}\n\n{text}"
        messages: list[Message] = [{"role": "system", "content": system}] if system else []
        messages.extend({"role": entry.role, "content": entry.content} for entry in history)
        messages.append({"role": "user", "content": user})
        return messages

"""The core's front door: one incoming message in, at most one English reply out."""

from __future__ import annotations

import logging
import math
import re
import time

from bot.config import Config
from bot.core.access import access_refusal
from bot.core.chat import ChatService
from bot.core.commands import ParseError, parse_pin
from bot.core.conversation import Conversation
from bot.core.help import GENERAL_HELP
from bot.core.limits import RateLimiter
from bot.core.pins import Clock, PinService, utc_now
from bot.core.whoami import whoami
from bot.llm.base import ChatModel, TextSink
from storage.sqlite import Store

log = logging.getLogger(__name__)
_COMMAND = re.compile(r"/(\S*)\s*(.*)", re.DOTALL)


def split_command(text: str) -> tuple[str, str | None, str]:
    """`/name@bot rest` → (name, bot or None, rest); name is case-folded."""
    match = _COMMAND.match(text)
    if match is None:
        return "", None, text
    name, _, bot = match.group(1).partition("@")
    return name.casefold(), bot or None, match.group(2)


class Pinbot:
    """Routes a message to `/pin`, the general commands, or a chat turn with the model."""

    def __init__(
        self,
        config: Config,
        store: Store,
        model: ChatModel,
        *,
        clock: Clock = utc_now,
        bot_username: str | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.pins = PinService(store, config.pins, clock)
        self.chat = ChatService(store, self.pins, config, model, clock)
        self.bot_username = bot_username
        self._pin_commands = RateLimiter(config.limits.pin_commands_per_minute, clock)
        self._turns = RateLimiter(config.limits.model_turns_per_minute, clock)

    def is_command(self, text: str) -> bool:
        """Whether text is a command (for this bot, when it names one)."""
        return text.startswith("/")

    def addressed_to_other_bot(self, text: str) -> bool:
        """Whether text is a command that names a different bot (`/pin@other_bot`)."""
        _, bot, _ = split_command(text)
        return (
            bot is not None
            and self.bot_username is not None
            and bot.casefold() != self.bot_username.casefold()
        )

    async def handle(
        self,
        conversation: Conversation,
        text: str,
        *,
        addressed: bool = True,
        on_text: TextSink | None = None,
    ) -> str | None:
        """Answer one message; None means the message is not for this bot.

        A message that is not a command goes to the model only when addressed to the bot; while a
        streaming model answers, on_text gets the text so far.
        """
        text = text.strip()
        if not text or (not self.is_command(text) and not addressed):
            return None
        started = time.perf_counter()
        reply = await self._answer(conversation, text, on_text)
        if reply is not None:
            kind = "command" if self.is_command(text) else "chat"
            log.info(
                "handled %s session=%s ms=%.1f",
                kind,
                conversation.session_key,
                (time.perf_counter() - started) * 1000,
            )
            # What people wrote is theirs: only at debug level.
            log.debug("message session=%s text=%r reply=%r", conversation.session_key, text, reply)
        return reply

    async def _answer(
        self, conversation: Conversation, text: str, on_text: TextSink | None
    ) -> str | None:
        if self.is_command(text) and self.addressed_to_other_bot(text[:200]):
            return None
        if refusal := access_refusal(conversation, self.config.access):
            return refusal
        limit = self.config.limits.max_message_chars
        if len(text) > limit:  # checked before any parsing
            return (
                f"Your message is {len(text):,} characters long; the limit is {limit:,}. "
                "Please send a shorter one."
            )
        if not self.is_command(text):
            if wait := self._turns.acquire(self._sender_key(conversation)):
                return f"You are sending messages too fast. Try again in {math.ceil(wait)} s."
            return await self.chat.turn(conversation, text, on_text)
        return await self.command(conversation, text)

    @staticmethod
    def _sender_key(conversation: Conversation) -> str:
        return f"{conversation.platform}:{conversation.sender_id or conversation.session_key}"

    async def move_group(self, platform: str, old_chat: str, new_chat: str) -> int:
        """Move a group's blocks, counters and history to its new chat id; returns blocks moved."""
        return await self.store.move_group(
            f"{platform}:group:{old_chat}", f"{platform}:group:{new_chat}"
        )

    async def command(self, conversation: Conversation, text: str) -> str:
        """Run a slash command and return its reply."""
        name, _, rest = split_command(text)
        if name == "pin":
            if wait := self._pin_commands.acquire(self._sender_key(conversation)):
                return f"You are sending /pin commands too fast. Try again in {math.ceil(wait)} s."
            parsed = parse_pin(rest)
            if isinstance(parsed, ParseError):
                return parsed.message
            return await self.pins.execute(conversation, parsed)
        if name in ("start", "help"):
            return GENERAL_HELP
        if name == "whoami":
            return whoami(conversation, self.config.pins)
        if name in ("reset", "new"):
            count = await self.chat.reset(conversation)
            return (
                f"Started a new conversation: {count} earlier message(s) forgotten. "
                "Pinned blocks are kept."
            )
        shown = name if len(name) <= 32 else name[:32] + "…"
        return f"Unknown command /{shown}. Send /pin help to manage pinned blocks."

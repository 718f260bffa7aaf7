"""The core's front door: one incoming message in, at most one English reply out.

Adapters report what they know of a message as an `Incoming` (the conversation, whether it mentions
or replies to the bot, how to ask the platform about group admins) with a `Surface` for what the
core asks back; `Pinbot.handle(incoming, surface)` decides whether it is for this bot, resolves
the sender once, routes it to `/pin`, the other commands, or a chat turn, and sends the reply.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot import metrics
from bot.clock import Clock, utc_now
from bot.config import Config
from bot.core.blocks import BlockPolicy, ChatPin
from bot.core.commands import (
    GENERAL_HELP,
    ParseError,
    PinService,
    parse_pin,
    parse_sticky,
    split_command,
)
from bot.core.conversation import ChatService, UsageLedger
from bot.core.decisions import ADMINS_ONLY, parse_tap, suggestion_tap
from bot.core.entry.inbox import KEEP_PROCESSED, Handler, Inbox, join_workers
from bot.core.entry.incoming import Incoming, Surface
from bot.core.entry.jobs import Jobs
from bot.core.people import (
    AdminLookup,
    ChatKind,
    Conversation,
    GroupTrigger,
    MessageContext,
    RateLimiter,
    admission,
    direct_key,
    group_children,
    group_key,
    group_prefix,
    is_addressed,
    parse_scope,
    whoami,
)
from bot.core.replies import Messenger, Reply, Sent
from bot.llm.base import ChatModel
from bot.logs import handled_fields
from storage import Store
from storage.errors import Unavailable

log = logging.getLogger(__name__)
SHOWN_COMMAND_CHARS = 32  # an unknown command is echoed back at most this long
FAILED_REPLY = "Sorry, something went wrong with that message. Please try again."
UNREADABLE_REPLY = "I can only read text messages. Please send your request as text."
UNREADABLE_REPLIES_PER_MINUTE = 1  # per chat: a burst of photos gets one answer
HOUSEKEEPING_INTERVAL = timedelta(hours=1)
# SQLite indexes changed blocks for search in batches: often enough that a search has few left.
SEARCH_INDEX_INTERVAL = timedelta(minutes=1)


@dataclass(frozen=True)
class Tapped:
    """What a tap on one of the bot's buttons does: the notice the tapper sees at once, and the
    command that carries it out in the chat's order (None: nothing to carry out)."""

    notice: str
    command: str | None


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
        self.clock = clock
        self.pins = PinService(store, BlockPolicy(config.pins), clock)
        self.usage = UsageLedger(
            store, config.budgets, clock, llm=config.llm, pricing=config.pricing
        )
        self.chat = ChatService(
            store,
            self.pins.ops,
            config,
            model,
            self.usage,
            clock,
            self.pins.proposals,
            self.pins.suggestions,
        )
        self.bot_username = bot_username
        limits = config.limits
        self._pin_commands = RateLimiter(store, "pin", limits.pin_commands_per_minute, clock)
        self._turns = RateLimiter(store, "turn", limits.model_turns_per_minute, clock)
        self._unreadable = RateLimiter(store, "unreadable", UNREADABLE_REPLIES_PER_MINUTE, clock)
        self.chat_pin = ChatPin(store, self.pins.ops, config.telegram.pinned_label)
        self.jobs = Jobs(store, clock)
        self.jobs.add("delivery housekeeping", HOUSEKEEPING_INTERVAL, self._housekeeping)
        self.jobs.add("stale budget holds", HOUSEKEEPING_INTERVAL, self.usage.forget_stale_holds)
        self.jobs.add("block history retention", HOUSEKEEPING_INTERVAL, self._forget_old_versions)
        self.jobs.add("search index", SEARCH_INDEX_INTERVAL, self._catch_up_search)
        # The console user always addresses the bot; platforms follow their group_trigger.
        self._triggers: dict[str, GroupTrigger] = {
            "telegram": config.telegram.group_trigger,
            "feishu": config.feishu.group_trigger,
        }

    # --- what frontends need besides handling messages ---------------------------------------

    def inbox(self, handler: Handler) -> Inbox:
        """Delivery for a frontend that is posted updates (webhooks): each recorded on arrival
        and handed to handler once, one chat's in order, on whichever worker holds the chat."""
        return Inbox(
            self.store,
            handler,
            clock=self.clock,
            jobs=self.jobs,
            takeover_check_s=self.config.storage.takeover_check_s,
        )

    async def join_workers(self, *, advice: str, sole: str | None = None) -> None:
        """Serve the store as one of its workers (alone in role sole, if given); ConfigError
        with advice when a live process stands in the way."""
        await join_workers(self.store, self.clock, advice=advice, sole=sole)

    async def leave_workers(self) -> None:
        """Stop serving: this process's chats and roles go to the other workers."""
        await self.store.leave_workers()

    async def run_jobs(self, sleep: Callable[[float], Awaitable[None]]) -> None:
        """Run the periodic jobs that are due, every storage.takeover_check_s, until cancelled
        (for a frontend without an inbox, whose watcher does it)."""
        while True:
            await sleep(self.config.storage.takeover_check_s)
            await self.jobs.run_due()

    async def chat_pinned(
        self,
        conversation: Conversation,
        text: str | None,
        *,
        message_id: str,
        author: str | None,
        platform_admin: AdminLookup | None = None,
    ) -> str:
        """A message was pinned in a group chat (conversation: who pinned it, where): make it
        the group's shared pinned-message block if they may; returns what happened, for the
        log."""
        context = MessageContext.resolve(
            conversation, self.config.pins, platform_admin, self.config.access
        )
        if refusal := context.admission.refusal:
            return f"not taken: {refusal}"
        return await self.chat_pin.pinned(context, text, message_id=message_id, author=author)

    def use_messenger(self, messenger: Messenger) -> None:
        """Post and update messages of the bot's own (proposals, pin suggestions) through
        messenger."""
        self.pins.proposals.messenger = messenger
        self.pins.suggestions.messenger = messenger

    async def tapped(
        self,
        conversation: Conversation,
        data: str,
        platform_admin: AdminLookup | None = None,
        *,
        message: Sent,
        counted: bool = True,
    ) -> Tapped | None:
        """A tap on a button of the bot's (conversation: who tapped, where; message: the
        message whose button it is), answered at once: the notice to show the tapper, and the
        command that carries the tap out in the chat's order (None when the tap counts for
        nothing). None for a button that is not ours. A pin suggestion's button counts only in
        the tapper's DM, on the very message that shows that suggestion. Counted (bot.metrics:
        one tap handled, and an access refusal) unless counted is False: an adapter that asks
        again for the same tap says so."""
        parsed = parse_tap(data)
        suggested = suggestion_tap(data)
        if parsed is None and suggested is None:
            return None
        started = time.perf_counter()
        tapped, refused = await self._tapped(
            conversation, parsed, suggested, platform_admin, message
        )
        if counted:
            if refused:
                metrics.refused("access")
            metrics.handled("tap", time.perf_counter() - started)
        return tapped

    async def _tapped(
        self,
        conversation: Conversation,
        parsed: tuple[bool, int] | None,
        suggested: tuple[bool, int] | None,
        platform_admin: AdminLookup | None,
        message: Sent,
    ) -> tuple[Tapped, bool]:
        """What a tap of ours does, and whether it was refused for who tapped."""
        context = MessageContext.resolve(
            conversation, self.config.pins, platform_admin, self.config.access
        )
        if refusal := context.admission.refusal or context.speaker.refusal:
            return Tapped(refusal, None), True
        if suggested is not None:
            pin, number = suggested
            scope = conversation.personal_scope
            # Posted only in DMs: a copy, forward or forgery elsewhere counts for nothing.
            if (
                conversation.kind is not ChatKind.DIRECT
                or scope is None
                or not await self.pins.suggestions.shows(scope, number, message)
            ):
                return Tapped("This button does nothing here.", None), False
            notice = f"{'Pinning' if pin else 'Dismissing'} suggestion #{number}…"
            return Tapped(notice, f"/pin {'accept' if pin else 'dismiss'} {number}"), False
        assert parsed is not None
        if await self.pins.proposals.may_decide(context):  # a refusal: not a shared admin
            return Tapped(ADMINS_ONLY, None), True
        approve, number = parsed
        verb = "approve" if approve else "reject"
        notice = f"{'Approving' if approve else 'Rejecting'} proposal #{number}…"
        return Tapped(notice, f"/pin shared {verb} {number}"), False

    async def shows_suggestions(self, conversation: Conversation, message: Sent) -> bool:
        """Whether message shows one of the sender's pin suggestions, which are posted in
        their DM only: how a platform whose taps do not say what kind of chat they come from
        (Feishu's card actions) tells a tap in a DM from one in a group."""
        if not conversation.sender_id:
            return False
        scope = direct_key(conversation.platform, conversation.sender_id)
        return await self.pins.suggestions.shows(scope, None, message)

    async def chat_pin_groups(self, platform: str) -> list[tuple[str, str]]:
        """(group scope, chat id) of every group of platform that has a pinned-message block."""
        scopes = await self.store.scopes_with_label(group_prefix(platform), self.chat_pin.label)
        found = [(scope, parse_scope(scope)) for scope in scopes]
        return [(scope, parsed.owner) for scope, parsed in found if parsed is not None]

    async def _forget_old_versions(self, now: datetime) -> None:
        await self.store.forget_versions_before(now - timedelta(days=self.config.pins.history_days))

    async def _catch_up_search(self, now: datetime) -> None:
        await self.store.catch_up_search()

    async def _housekeeping(self, now: datetime) -> None:
        await self.store.forget_updates_before(now - KEEP_PROCESSED)
        await self.store.forget_full_buckets(now)

    def _names_other_bot(self, text: str) -> bool:
        """Whether text is a command that names a different bot (`/pin@other_bot`)."""
        _, bot, _ = split_command(text)
        return (
            bot is not None
            and self.bot_username is not None
            and bot.casefold() != self.bot_username.casefold()
        )

    async def handle(self, incoming: Incoming, surface: Surface) -> Reply | None:
        """Answer one message: the reply goes to surface.send and is returned too (for the
        caller's log); None means the message is not for this bot, and nothing is sent.

        A message the bot cannot read (text None) gets one short answer per chat and minute when
        addressed, and nothing goes to the model. A command is for the bot unless it names
        another bot; other text when the trigger policy says the bot is addressed
        (`is_addressed`). The platform is asked about admin status (incoming.platform_admin) at
        most once, and only when that could change a decision; the replied message only when a
        command needs it. While a streaming model answers, surface.on_text gets the text so far;
        surface.thinking() runs while the model works. A fault is logged and answered with one
        short line; for a redelivered update a database that cannot be reached raises
        Unavailable instead, and nothing is sent: the update's next processing answers it, once.
        """
        reply = await self._reply_to(incoming, surface)
        if reply is not None and reply.text:
            await surface.send(reply)
        return reply

    async def _reply_to(self, incoming: Incoming, surface: Surface) -> Reply | None:
        conversation = incoming.conversation
        addressed = is_addressed(
            conversation,
            mentioned=incoming.mentioned,
            replied_to_bot=incoming.replied_to_bot,
            trigger=self._triggers.get(conversation.platform, "all"),
        )
        if incoming.text is None:
            return await self._answer_unreadable(conversation) if addressed else None
        text = incoming.text.strip()
        if not text:
            return None
        if text.startswith("/"):
            if self._names_other_bot(text):
                return None
        elif not addressed:
            return None
        started = time.perf_counter()
        try:
            reply = await self._answer(incoming, text, surface)
        except Unavailable:
            if incoming.redelivered:
                raise
            log.exception("the database could not be reached for %s", conversation.session_key)
            reply = Reply.failed(FAILED_REPLY)
        except Exception:  # a fault in one message must not stop the others: log, answer, go on
            log.exception("handling a message in %s failed", conversation.session_key)
            reply = Reply.failed(FAILED_REPLY)
        kind = "command" if text.startswith("/") else "turn"
        took = time.perf_counter() - started
        metrics.handled(kind, took)
        log.info(
            "handled %s session=%s outcome=%s ms=%.1f",
            kind,
            conversation.session_key,
            reply.outcome,
            took * 1000,
            extra=handled_fields(conversation.platform, kind, reply.outcome, took),
        )
        # What people wrote is theirs: only at debug level.
        log.debug("message session=%s text=%r reply=%r", conversation.session_key, text, reply.text)
        return reply

    async def _answer(self, incoming: Incoming, text: str, surface: Surface) -> Reply:
        conversation = incoming.conversation
        context = MessageContext.resolve(
            conversation,
            self.config.pins,
            incoming.platform_admin,
            self.config.access,
            incoming.replied,
        )
        if refusal := context.admission.refusal:
            metrics.refused("access")
            return Reply.refused(refusal)
        limit = self.config.limits.max_message_chars
        if len(text) > limit:  # checked before any parsing
            return Reply.refused(
                f"Your message is {len(text):,} characters long; the limit is {limit:,}. "
                "Please send a shorter one."
            )
        if text.startswith("/"):
            return await self.command(context, text)
        if wait := await self._turns.acquire(self._sender_key(conversation)):
            metrics.refused("rate_limit")
            return Reply.refused(
                f"You are sending messages too fast. Try again in {math.ceil(wait)} s."
            )
        if refusal := await self.usage.budget_refusal(context):
            return Reply.refused(refusal)
        async with surface.thinking():
            return await self.chat.turn(context, text, surface.on_text)

    async def _answer_unreadable(self, conversation: Conversation) -> Reply | None:
        if refusal := admission(conversation, self.config.access).refusal:
            metrics.refused("access")
            return Reply.refused(refusal)
        if await self._unreadable.acquire(conversation.session_key):
            return None
        return Reply.refused(UNREADABLE_REPLY)

    @staticmethod
    def _sender_key(conversation: Conversation) -> str:
        return f"{conversation.platform}:{conversation.sender_id or conversation.session_key}"

    async def move_group(self, platform: str, old_chat: str, new_chat: str) -> int:
        """Move a group's blocks, counters and history to its new chat id; returns blocks moved."""
        old, new = group_key(platform, old_chat), group_key(platform, new_chat)
        members, sessions = group_children(old)
        return await self.store.move_group(
            old, new, members_prefix=members, sessions_prefix=sessions
        )

    async def command(self, context: MessageContext, text: str) -> Reply:
        """Run a slash command and return its reply."""
        name, _, rest = split_command(text)
        conversation = context.conversation
        if name in ("pin", "sticky"):
            if wait := await self._pin_commands.acquire(self._sender_key(conversation)):
                metrics.refused("rate_limit")
                return Reply.refused(
                    f"You are sending /pin commands too fast. Try again in {math.ceil(wait)} s."
                )
            parsed = parse_pin(rest) if name == "pin" else parse_sticky(rest)
            if isinstance(parsed, ParseError):
                return Reply.refused(parsed.message)
            return await self.pins.execute(context, parsed)
        if name in ("start", "help"):
            return Reply(GENERAL_HELP)
        if name == "whoami":
            return Reply(await whoami(context))
        if name == "usage":
            return Reply(await self.usage.report(context))
        if name in ("reset", "new"):
            count = await self.chat.reset(conversation)
            return Reply(
                f"Started a new conversation: {count} earlier message(s) forgotten. "
                "Pinned blocks are kept."
            )
        shown = name if len(name) <= SHOWN_COMMAND_CHARS else name[:SHOWN_COMMAND_CHARS] + "…"
        return Reply.refused(f"Unknown command /{shown}. Send /pin help to manage pinned blocks.")

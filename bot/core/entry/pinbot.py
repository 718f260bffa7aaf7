"""The core's front door: every platform event in, through one entry, `Pinbot.handle(event,
surface)`, what the core makes of it out.

Adapters report what they know as an event value: a message (`Incoming`: the conversation, whether
it mentions or replies to the bot, how to ask the platform about group admins), a tap on a
button, a pin, and the rest of bot.core.entry.events; the surface is what the core asks back
while it answers a message. For a message the core decides whether it is for this bot, resolves
the sender once, routes it to `/pin`, the other commands, or a chat turn, and sends the reply.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TypeVar, overload

from bot import metrics
from bot.clock import Clock, utc_now
from bot.config import Config
from bot.core.blocks import BlockPolicy, ChatPin
from bot.core.commands import (
    FORGET_TAP,
    GENERAL_HELP,
    ParseError,
    PersonCommands,
    PersonData,
    PinService,
    parse_pin,
    parse_sticky,
    split_command,
)
from bot.core.conversation import ChatService, UsageLedger
from bot.core.decisions import ADMINS_ONLY, is_suggestion_tap, parse_tap, suggestion_tap
from bot.core.entry.events import (
    BotRemoved,
    ChatPinned,
    ChatUnpinned,
    Event,
    GroupMoved,
    PinnedChats,
    Tap,
    Tapped,
)
from bot.core.entry.inbox import Handler, Inbox, Sender
from bot.core.entry.incoming import Incoming, Surface
from bot.core.entry.jobs import Jobs
from bot.core.entry.retention import RETENTION_INTERVAL, Retention
from bot.core.groups import GroupCommands, GroupSettings
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
from bot.core.replies import Messenger, Reply, Result, Sent
from bot.llm.base import ChatModel
from bot.llm.router import Models
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
T = TypeVar("T")


class Pinbot:
    """The core: takes every platform event through `handle`; its other methods run the
    process around it (the inbox, the workers, the periodic jobs, readiness)."""

    def __init__(
        self,
        config: Config,
        store: Store,
        model: ChatModel | Models,
        *,
        clock: Clock = utc_now,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.pins = PinService(
            store,
            BlockPolicy(config.pins),
            clock,
            history_per_sender=config.chat.history_per_sender,
        )
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
        self.bot_username: str | None = None
        limits = config.limits
        self._pin_commands = RateLimiter(store, "pin", limits.pin_commands_per_minute, clock)
        self._turns = RateLimiter(store, "turn", limits.model_turns_per_minute, clock)
        self._unreadable = RateLimiter(store, "unreadable", UNREADABLE_REPLIES_PER_MINUTE, clock)
        self.chat_pin = ChatPin(store, self.pins.ops, config.telegram.pinned_label)
        self.people = PersonCommands(PersonData(store, self.pins.ops, clock))
        self._messenger: Messenger | None = None
        self.jobs = Jobs(store, clock)
        self.jobs.add("delivery housekeeping", HOUSEKEEPING_INTERVAL, self._housekeeping)
        self.jobs.add("stale budget holds", HOUSEKEEPING_INTERVAL, self.usage.forget_stale_holds)
        self.retention = Retention(store, self.pins.ops, config.retention_in_effect)
        self.jobs.add("retention", RETENTION_INTERVAL, self._enforce_retention)
        self.jobs.add("search index", SEARCH_INDEX_INTERVAL, self._catch_up_search)
        # The console user always addresses the bot; platforms follow their group_trigger.
        self.groups = GroupCommands(store, config, clock)
        self._triggers: dict[str, GroupTrigger] = {
            "telegram": config.telegram.group_trigger,
            "feishu": config.feishu.group_trigger,
        }

    # --- what frontends need besides handling messages ---------------------------------------

    def inbox(self, handler: Handler, sender: Sender, *, resends: bool) -> Inbox:
        """Delivery for a platform frontend: each update recorded on arrival and handed to
        handler once, one chat's in order, on whichever worker holds the chat, and its answer
        to sender (resends: the platform takes the same send twice as one; see Inbox)."""
        return Inbox(
            self.store,
            handler,
            sender,
            resends=resends,
            clock=self.clock,
            jobs=self.jobs,
            takeover_check_s=self.config.storage.takeover_check_s,
        )

    def every(
        self, name: str, interval: timedelta, job: Callable[[datetime], Awaitable[None]]
    ) -> None:
        """Run job every interval among the periodic jobs (on one worker only), the first time at
        the first check; job gets the time it runs at."""
        self.jobs.add(name, interval, job)

    def known_as(self, username: str | None) -> None:
        """The bot's own username on its platform: a command naming another bot
        (`/pin@other_bot`) is not for this one."""
        self.bot_username = username

    def probe(self, make: Callable[[Store, Clock], T]) -> T:
        """What make builds over the store and clock the core serves from: a readiness check
        (bot.metrics.listener.Health) watches them without reaching into the core."""
        return make(self.store, self.clock)

    def use_messenger(self, messenger: Messenger) -> None:
        """Post and update messages of the bot's own (proposals, pin suggestions) through
        messenger."""
        self.pins.proposals.messenger = messenger
        self.pins.suggestions.messenger = messenger
        self._messenger = messenger

    # --- the one entry ------------------------------------------------------------------------

    @overload
    async def handle(self, event: Incoming, surface: Surface) -> Reply | None: ...
    @overload
    async def handle(self, event: Tap, surface: Surface) -> Tapped | None: ...
    @overload
    async def handle(self, event: ChatPinned, surface: Surface) -> str: ...
    @overload
    async def handle(self, event: ChatUnpinned, surface: Surface) -> bool: ...
    @overload
    async def handle(self, event: PinnedChats, surface: Surface) -> list[str]: ...
    @overload
    async def handle(self, event: GroupMoved, surface: Surface) -> int: ...
    @overload
    async def handle(self, event: BotRemoved, surface: Surface) -> None: ...

    async def handle(
        self, event: Event, surface: Surface
    ) -> Reply | Tapped | str | bool | list[str] | int | None:
        """Take one platform event; what it gives back is the event's own (see each event's
        type). Only a message is answered on surface (the other events pass SILENT): its reply
        goes to surface.send and is returned too (for the caller's log); None means the message
        is not for this bot, and nothing is sent.

        A message the bot cannot read (text None) gets one short answer per chat and minute when
        addressed, and nothing goes to the model. A command is for the bot unless it names
        another bot or, where commands cannot name their bot (incoming.commands_for_bot False),
        it is said in a group without addressing the bot; other text when the trigger policy
        says the bot is addressed (`is_addressed`). The platform is asked about admin status
        (incoming.platform_admin) at most once, and only when that could change a decision; the
        replied message only when a command needs it. While a streaming model answers,
        surface.on_text gets the text so far; surface.thinking() runs while the model works. A
        fault is logged and answered with one short line; for a redelivered update a database
        that cannot be reached raises Unavailable instead, and nothing is sent: the update's
        next processing answers it, once.
        """
        if isinstance(event, Incoming):
            reply = await self._reply_to(event, surface)
            if reply is not None and reply.text:
                await surface.send(reply)
            return reply
        if isinstance(event, Tap):
            return await self._tap(event)
        if isinstance(event, ChatPinned):
            return await self._chat_pinned(event)
        if isinstance(event, ChatUnpinned):
            return await self.chat_pin.unpinned(group_key(event.platform, event.chat_id))
        if isinstance(event, PinnedChats):
            prefix = group_prefix(event.platform)
            scopes = await self.store.scopes_with_label(prefix, self.chat_pin.label)
            return sorted({p.owner for s in scopes if (p := parse_scope(s)) is not None})
        if isinstance(event, GroupMoved):
            return await self._move_group(event)
        # The group's data stays for the grace period (see BotRemoved): noted, logged, counted.
        await self.retention.bot_removed(event.conversation, self.clock())
        log.info(
            "removed from %s by %s", event.conversation.session_key, event.conversation.sender_id
        )
        metrics.handled("removed", 0.0)
        return None

    async def _chat_pinned(self, event: ChatPinned) -> str:
        """Make a message pinned in a group the group's shared pinned-message block if who
        pinned it may; what happened, for the log."""
        context = MessageContext.resolve(
            event.conversation, self.config.pins, event.platform_admin, self.config.access
        )
        if refusal := context.admission.refusal:
            return f"not taken: {refusal}"
        return await self.chat_pin.pinned(
            context,
            event.text,
            message_id=event.message_id,
            author=event.author,
            pinned_at=event.pinned_at,
        )

    async def _tap(self, tap: Tap) -> Tapped | None:
        """A tap answered at once: the notice to show the tapper, and the command that carries
        the tap out in the chat's order (None when the tap counts for nothing). None for a
        button that is not ours. A pin suggestion's button counts only in the tapper's DM, on
        the very message that shows that suggestion. Counted (bot.metrics: one tap handled,
        and an access refusal) unless tap.counted is False."""
        conversation, message = tap.conversation, tap.message
        if tap.data == FORGET_TAP:
            return await self._forget_tapped(tap)
        if message is None:
            use = "/pin suggestions" if is_suggestion_tap(tap.data) else "/pin shared proposals"
            return Tapped(
                f"This message is too old for its buttons; use {use}.", None, conversation
            )
        parsed, suggested = parse_tap(tap.data), suggestion_tap(tap.data)
        if parsed is None and suggested is None:
            return None
        started = time.perf_counter()
        if not tap.chat_kind_known:
            direct = conversation.sender_id is not None and await self.pins.suggestions.shows(
                direct_key(conversation.platform, conversation.sender_id), None, message
            )
            kind = ChatKind.DIRECT if direct else ChatKind.GROUP
            conversation = replace(conversation, kind=kind)
        notice, command, refused = await self._tapped(
            conversation, parsed, suggested, tap.platform_admin, message
        )
        if tap.counted:
            if refused:
                metrics.refused("access")
            metrics.handled("tap", time.perf_counter() - started)
        return Tapped(notice, command, conversation)

    async def _forget_tapped(self, tap: Tap) -> Tapped:
        """A tap on /forget me's button: the tapper's data removed as the tap is answered (the
        button only ever forgets who taps it; asked again for its command, uncounted, it does
        nothing more), its message showing the outcome instead of the button."""
        conversation = tap.conversation
        if not tap.counted:
            return Tapped("Forgotten.", None, conversation)
        if conversation.sender_id is None:
            return Tapped("I cannot tell who you are; send /forget me confirm.", None, conversation)
        reply = await self.people.forget(conversation.platform, conversation.sender_id)
        if tap.message is not None and self._messenger is not None:
            await self._messenger.edit(tap.message, replace(reply, buttons=()))
        notice = "Forgotten." if reply.outcome is Result.DONE else "Nothing was removed."
        return Tapped(notice, None, conversation)

    async def _tapped(
        self,
        conversation: Conversation,
        parsed: tuple[bool, int] | None,
        suggested: tuple[bool, int] | None,
        platform_admin: AdminLookup | None,
        message: Sent,
    ) -> tuple[str, str | None, bool]:
        """What a tap of ours does (its notice and command), and whether it was refused for who
        tapped."""
        context = MessageContext.resolve(
            conversation, self.config.pins, platform_admin, self.config.access
        )
        if refusal := context.admission.refusal or context.speaker.refusal:
            return refusal, None, True
        if suggested is not None:
            pin, number = suggested
            scope = conversation.personal_scope
            # Posted only in DMs: a copy, forward or forgery elsewhere counts for nothing.
            if (
                conversation.kind is not ChatKind.DIRECT
                or scope is None
                or not await self.pins.suggestions.shows(scope, number, message)
            ):
                return "This button does nothing here.", None, False
            notice = f"{'Pinning' if pin else 'Dismissing'} suggestion #{number}…"
            return notice, f"/pin {'accept' if pin else 'dismiss'} {number}", False
        assert parsed is not None
        if await self.pins.proposals.may_decide(context):  # a refusal: not a shared admin
            return ADMINS_ONLY, None, True
        approve, number = parsed
        verb = "approve" if approve else "reject"
        notice = f"{'Approving' if approve else 'Rejecting'} proposal #{number}…"
        return notice, f"/pin shared {verb} {number}", False

    async def _enforce_retention(self, now: datetime) -> None:
        await self.retention.run(now)

    async def _catch_up_search(self, now: datetime) -> None:
        await self.store.catch_up_search()

    async def _housekeeping(self, now: datetime) -> None:
        await self.store.forget_full_buckets(now)

    def _names_other_bot(self, text: str) -> bool:
        """Whether text is a command that names a different bot (`/pin@other_bot`)."""
        _, bot, _ = split_command(text)
        return (
            bot is not None
            and self.bot_username is not None
            and bot.casefold() != self.bot_username.casefold()
        )

    async def _reply_to(self, incoming: Incoming, surface: Surface) -> Reply | None:
        conversation = incoming.conversation
        # What the group (and its topic) set for itself, read for each of its messages: a
        # change through one worker applies at another's next update.
        in_group = conversation.kind is ChatKind.GROUP
        settings = await self.groups.settings_of(conversation) if in_group else None
        trigger = settings.trigger if settings else None
        addressed = is_addressed(
            conversation,
            mentioned=incoming.mentioned,
            replied_to_bot=incoming.replied_to_bot,
            trigger=trigger or self._triggers.get(conversation.platform, "all"),
        )
        if incoming.text is None:
            return await self._answer_unreadable(conversation) if addressed else None
        text = incoming.text.strip()
        if not text:
            return None
        if text.startswith("/"):
            if self._names_other_bot(text):
                return None
            # The platform's mention rules come first where a command cannot name its bot:
            # another bot in the group may be the one asked.
            grouped = conversation.kind is ChatKind.GROUP
            if grouped and not incoming.commands_for_bot and not addressed:
                return None
        elif not addressed:
            return None
        started = time.perf_counter()
        try:
            reply = await self._answer(incoming, text, surface, settings)
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

    async def _answer(
        self, incoming: Incoming, text: str, surface: Surface, settings: GroupSettings | None
    ) -> Reply:
        conversation = incoming.conversation
        config = settings.applied(self.config) if settings else self.config
        context = MessageContext.resolve(
            conversation,
            config.pins,
            incoming.platform_admin,
            self.config.access,
            incoming.replied,
            model=settings.model if settings else None,
            budgets=config.budgets if config is not self.config else None,
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
            return await self._command(context, text, incoming)
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

    async def _move_group(self, event: GroupMoved) -> int:
        """Move a group's blocks, counters and history to its new chat id; returns blocks moved."""
        old = group_key(event.platform, event.old_chat)
        new = group_key(event.platform, event.new_chat)
        members, sessions = group_children(old)
        return await self.store.move_group(
            old, new, members_prefix=members, sessions_prefix=sessions
        )

    async def _command(self, context: MessageContext, text: str, incoming: Incoming) -> Reply:
        """Run a slash command and return its reply."""
        name, _, rest = split_command(text)
        conversation = context.conversation
        if name == "group":
            if wait := await self._pin_commands.acquire(self._sender_key(conversation)):
                metrics.refused("rate_limit")
                return Reply.refused(f"Too fast. Try again in {math.ceil(wait)} s.")
            return await self.groups.execute(
                context, rest, incoming.platform_admin, incoming.mentioned_users
            )
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
        if name in ("export", "forget"):
            if wait := await self._pin_commands.acquire(self._sender_key(conversation)):
                metrics.refused("rate_limit")
                return Reply.refused(f"Too fast. Try again in {math.ceil(wait)} s.")
            act = self.people.export_me if name == "export" else self.people.forget_me
            direct = conversation.kind is ChatKind.DIRECT
            return await act(conversation.platform, conversation.sender_id, direct, rest)
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

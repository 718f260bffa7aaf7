"""The Telegram adapter over python-telegram-bot: Telegram updates in, core replies out."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import hmac
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any

import httpx
from aiohttp import web
from telegram import (
    BotCommand,
    BotCommandScopeAllGroupChats,
    BotCommandScopeAllPrivateChats,
    Message,
    MessageEntity,
    Update,
    User,
)
from telegram.constants import ChatAction, ChatMemberStatus, ChatType
from telegram.error import Conflict, InvalidToken, NetworkError, TelegramError
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    ChatMemberHandler,
    ContextTypes,
    MessageHandler,
    Updater,
    filters,
)

from bot import metrics
from bot.adapters import TELEGRAM
from bot.adapters.kit import (
    Lost,
    RefusalLog,
    after_commit,
    from_inbox,
    in_inbox,
    unless_lost,
    with_backoff,
)
from bot.adapters.telegram_http import AiohttpRequest
from bot.adapters.telegram_send import StreamedReply, TelegramSender
from bot.adapters.webhook import serve_webhook
from bot.config import ConfigError, TelegramConfig, secret_from_env, telegram_token_problem
from bot.core.entry import (
    SILENT,
    BotRemoved,
    ChatKind,
    ChatPinned,
    ChatUnpinned,
    Conversation,
    GroupMoved,
    Incoming,
    Pinbot,
    PinnedChats,
    Quoted,
    QuotedLookup,
    Reply,
    ReplySurface,
    Sent,
    Surface,
    Tap,
    delivery_chat,
)
from bot.llm.base import TextSink
from storage.models import PendingUpdate

log = logging.getLogger(__name__)

PLATFORM = TELEGRAM
# Telegram sends these as `from` when the real sender is hidden behind a chat.
ANONYMOUS_SENDER_IDS = {1087968824, 136817688, 777000}
TYPING_REFRESH_S = 4.5
PROBE_TIMEOUT_S = 10.0
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# Polling is working while a getUpdates was answered within its long poll and this much more.
POLL_ANSWER_SLACK_S = 30.0
# A webhook worker is not ready once Telegram has answered none of its requests for this long.
SEND_FAILURE_WINDOW_S = 60.0
CONFLICT_LOG_INTERVAL_S = 60.0  # a second poller is reported once a minute, not per poll
# 8 parallel sends are plenty for one bot (Telegram allows ~30 messages/s); a small pool also
# kept httpx's sends cheap while many chats waited (it walked every pooled connection).
SEND_CONNECTIONS = 8
RECENT_UPDATES = 256
PRIVATE_COMMANDS = [
    BotCommand("pin", "Manage your pinned rules and notes"),
    BotCommand("sticky", "Status of your pinned blocks (/pin status)"),
    BotCommand("usage", "Your model usage and what is left of your budget"),
    BotCommand("reset", "Start a new conversation (pinned blocks stay)"),
    BotCommand("whoami", "Your ids and what you may do here"),
    BotCommand("export", "Everything the bot holds about you, as a file (/export me)"),
    BotCommand("forget", "Remove everything the bot holds about you (/forget me)"),
    BotCommand("help", "What this bot does"),
]
GROUP_COMMANDS = [
    BotCommand("pin", "Pinned blocks: yours, this group's, and proposals to decide"),
    BotCommand("sticky", "Status of pinned blocks here (/pin status)"),
    BotCommand("usage", "Your model usage and what is left of your budget"),
    BotCommand("reset", "Start a new conversation (pinned blocks stay)"),
    BotCommand("whoami", "Your ids and what you may do here"),
    BotCommand("group", "This group's (or topic's) settings, for its owner and admins"),
    BotCommand("help", "What this bot does"),
]


# Messages whose content the bot cannot read; service messages (joins, pins, titles) are not here.
UNREADABLE_CONTENT = (
    filters.PHOTO
    | filters.VOICE
    | filters.AUDIO
    | filters.VIDEO
    | filters.VIDEO_NOTE
    | filters.ANIMATION
    | filters.Sticker.ALL
    | filters.Document.ALL
)


# Update fields and the kind the metrics count them as; any other update is "other".
_UPDATE_KINDS = (
    ("message", "message"),
    ("channel_post", "message"),
    ("edited_message", "edit"),
    ("edited_channel_post", "edit"),
    ("callback_query", "tap"),
)


# The messages whose edit failed while one tap was carried out (set by on_tap): a decision's
# message that cannot show its outcome any more (too old, deleted) is answered instead.
_UNEDITED: contextvars.ContextVar[set[tuple[str, str]] | None] = contextvars.ContextVar(
    "unedited", default=None
)


def _polling_recovered(failed_for: float) -> None:
    """Polling failed (each failure logged as a warning) and now Telegram answers again."""
    log.info("polling Telegram works again, after %.0f s of failed requests", failed_for)


def update_kind(update: object) -> str:
    """What kind of update this is (an Update, or one as posted: a dict), as counted."""
    for field, kind in _UPDATE_KINDS:
        present = update.get(field) if isinstance(update, dict) else getattr(update, field, None)
        if present is not None:
            return kind
    return "other"


class RecordingQueue(asyncio.Queue[object]):
    """The queue python-telegram-bot's Updater puts each polled update into: put records it in
    the inbox first. The Updater confirms updates to Telegram (the next getUpdates' offset)
    only once put has returned for each, so an update is confirmed only once it is recorded; a
    failure to record is a NetworkError, which the Updater retries by polling the update again.
    """

    def __init__(self, record: Callable[[Update], Awaitable[object]]) -> None:
        super().__init__()
        self._record = record

    async def put(self, item: object) -> None:
        """Record a polled update (nothing else is put here)."""
        if not isinstance(item, Update):
            return
        try:
            await self._record(item)
        except Exception as error:
            raise NetworkError(f"could not record update {item.update_id}: {error}") from error


def conversation_of(message: Message, tapper: User | None = None) -> Conversation:
    """The core's view of a Telegram message: chat kind, ids, topic and sender (or, for a tap
    on its buttons, the tapper)."""
    chat = message.chat
    sender = tapper or message.from_user
    hidden = sender is None or sender.id in ANONYMOUS_SENDER_IDS
    hidden = hidden or (tapper is None and message.sender_chat is not None)
    sender_id = None if hidden or sender is None else str(sender.id)
    kinds = ("user id",)
    if chat.type == ChatType.PRIVATE:
        return Conversation(
            PLATFORM, ChatKind.DIRECT, str(chat.id), sender_id, sender_id_kinds=kinds
        )
    if chat.type in (ChatType.GROUP, ChatType.SUPERGROUP):
        topic = message.message_thread_id if message.is_topic_message else None
        return Conversation(
            PLATFORM,
            ChatKind.GROUP,
            str(chat.id),
            sender_id,
            topic_id=str(topic) if topic else None,
            sender_id_kinds=kinds,
        )
    kind = ChatKind.CHANNEL if chat.type == ChatType.CHANNEL else ChatKind.UNKNOWN
    return Conversation(PLATFORM, kind, str(chat.id), sender_id, sender_id_kinds=kinds)


class TelegramFrontend:
    """Runs the bot on Telegram: polling or webhook, triggers, replies, migration, admins."""

    def __init__(
        self,
        pinbot: Pinbot,
        config: TelegramConfig,
        token: str,
        *,
        webhook_secret: str | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pinbot = pinbot
        self.config = config
        self._webhook_secret = webhook_secret
        self._sleep = sleep
        self.monotonic = monotonic
        self._admin_cache: dict[tuple[int, int], tuple[bool, float]] = {}
        self._runner: web.AppRunner | None = None
        self._poller: Updater | None = None
        self._recent: dict[str, Update] = {}  # payload → update, the last RECENT_UPDATES made
        self._conflict_reported_at: float | None = None
        self._refusals = RefusalLog("Telegram", monotonic)
        # Telegram has no way to take a send twice as one: an update is done before its answer
        # goes out (see Inbox).
        self.inbox = pinbot.inbox(self._process_recorded, self._send_recorded, resends=False)
        self._requests = (  # sending, and getUpdates
            AiohttpRequest(SEND_CONNECTIONS, monotonic=monotonic),
            AiohttpRequest(
                1,
                read_timeout=config.poll_timeout_s + 10,
                monotonic=monotonic,
                keeps_updates=True,
            ),
        )
        self._requests[1].reach.recovered = _polling_recovered
        self._asking: asyncio.Task[None] | None = None  # a getMe asked by not_ready
        self.app: Application[Any, Any, Any, Any, Any, Any] = (
            ApplicationBuilder()
            .token(token)
            .base_url(config.base_url.rstrip("/"))  # PTB appends the token directly
            .updater(None)  # polling puts into our RecordingQueue (_start)
            .request(self._requests[0])
            .get_updates_request(self._requests[1])
            .build()
        )
        self.app.add_handler(MessageHandler(filters.StatusUpdate.MIGRATE, self.on_migrate))
        if config.sync_pinned_message:
            self.app.add_handler(
                MessageHandler(filters.StatusUpdate.PINNED_MESSAGE, self.on_pinned)
            )
            pinbot.every(
                "telegram pinned messages",
                timedelta(seconds=config.pinned_check_s),
                self.check_pinned_messages,
            )
        text_updates = filters.UpdateType.MESSAGE | filters.UpdateType.CHANNEL_POST
        self.app.add_handler(MessageHandler(text_updates & filters.TEXT, self.on_message))
        self.app.add_handler(
            MessageHandler(filters.UpdateType.MESSAGE & UNREADABLE_CONTENT, self.on_message)
        )
        self.app.add_handler(CallbackQueryHandler(self.on_tap))
        self.app.add_handler(ChatMemberHandler(self.on_removed, ChatMemberHandler.MY_CHAT_MEMBER))
        self.app.add_error_handler(self.on_error)
        self.sender = TelegramSender(self.app.bot, config, sleep, monotonic)
        pinbot.use_messenger(self)

    @classmethod
    def from_config(cls, pinbot: Pinbot, config: TelegramConfig) -> TelegramFrontend:
        """Build the frontend with its secrets read from the environment variables config names."""
        token = secret_from_env(config.token_env, "The Telegram bot token")
        if problem := telegram_token_problem(config.token_env, token):
            raise ConfigError(problem)
        secret = None
        if config.mode == "webhook":
            if not config.webhook_url:
                raise ConfigError("telegram.webhook_url must be set when telegram.mode is webhook")
            secret = secret_from_env(config.webhook_secret_env, "The Telegram webhook secret")
        return cls(pinbot, config, token, webhook_secret=secret)

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (getMe), register the command menus, and start receiving updates.

        A rejected token, a wrong base URL, a port in use or a second poller raise ConfigError
        naming what to fix; failures that waiting can fix (network, timeouts, a failing gateway)
        are retried."""
        try:
            await self._start()
        except BaseException:  # nothing is left open by a start that failed
            for request in self._requests:
                await request.shutdown()
            raise

    async def _start(self) -> None:
        await self._connect()
        self.pinbot.known_as(self.app.bot.username)
        await self._register_commands()
        if self.config.mode == "webhook":
            await self._start_webhook()
        else:
            await self.inbox.start(
                sole=f"the Telegram poller of bot {self.app.bot.id}",
                advice="only one process may poll a bot; stop the other one, or run several "
                "workers in webhook mode (telegram.mode: webhook) on PostgreSQL",
            )
            self._poller = Updater(self.app.bot, RecordingQueue(self._record_polled))
            await self._poller.initialize()
            await self._poller.start_polling(
                timeout=self.config.poll_timeout_s, error_callback=self._on_polling_error
            )
        await self.app.start()
        log.info("telegram bot @%s started (%s)", self.app.bot.username, self.config.mode)

    async def _start_webhook(self) -> None:
        """Join the workers, listen for Telegram's posts, then tell Telegram where to post."""
        await self.inbox.start()
        self._runner, _ = await serve_webhook(
            self.config.webhook_path,
            self.on_webhook,
            host=self.config.webhook_listen,
            port=self.config.webhook_port,
            port_setting="telegram.webhook_port",
        )
        await self.app.bot.set_webhook(
            url=self.config.webhook_url, secret_token=self._webhook_secret
        )

    async def stop(self) -> None:
        """Stop receiving, finish the updates in progress, and disconnect. In webhook mode the
        chats' other waiting updates are left to the other workers; a poller's wait in the
        inbox for its next start."""
        if self._asking is not None:
            self._asking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._asking
        if self._poller is not None and self._poller.running:
            await self._poller.stop()  # confirms to Telegram what was recorded
            await self._poller.shutdown()
        if self._runner is not None:
            await self._runner.cleanup()
            log.info("webhook closed; finishing the updates in progress")
        await self.inbox.stop()
        log.info("updates in progress finished")
        if self.app.running:
            await self.app.stop()
        await self.app.shutdown()

    def not_ready(self) -> str | None:
        """Why the connection to Telegram is not working now (None: it is): polling works while
        a getUpdates was answered within its long poll and POLL_ANSWER_SLACK_S; a webhook worker
        while its listener is up and Telegram answers its requests (none failing, with none
        answered since, for SEND_FAILURE_WINDOW_S; before its first request, nothing failed).
        A webhook worker not ready asks Telegram again meanwhile (getMe): taken out of traffic,
        it would have no request of its own to find Telegram back with."""
        if self.config.mode == "webhook":
            if self._runner is None:
                return "the Telegram webhook listener is not up"
            problem = self._requests[0].reach.problem("Telegram", SEND_FAILURE_WINDOW_S)
            if problem is not None and (self._asking is None or self._asking.done()):
                self._asking = asyncio.get_running_loop().create_task(self._ask_telegram())
            return problem
        answered = self._requests[1].answered_at
        if answered is None:
            return "Telegram has not answered a getUpdates yet"
        window = self.config.poll_timeout_s + POLL_ANSWER_SLACK_S
        if self.monotonic() - answered > window:
            return f"Telegram has answered no getUpdates for {window:g} s"
        return None

    async def _ask_telegram(self) -> None:
        """getMe, for readiness: its answer (or failure) is noted by the request layer."""
        with contextlib.suppress(TelegramError):
            await self.app.bot.get_me()

    def _on_polling_error(self, error: TelegramError) -> None:
        """Say plainly when another process polls the same bot (Telegram then answers one of
        the two with 409 Conflict); other polling errors are retried by the updater."""
        if not isinstance(error, Conflict):
            log.warning("polling Telegram failed: %s; retrying", error)
            return
        now = self.monotonic()
        reported = self._conflict_reported_at
        if reported is not None and now - reported < CONFLICT_LOG_INTERVAL_S:
            return
        self._conflict_reported_at = now
        log.error(
            "another process is polling Telegram with this bot token (Telegram says: %s); only "
            "one poller may run per bot: stop the other one, or run several workers in webhook "
            "mode (telegram.mode: webhook)",
            error.message,
        )

    # --- webhook --------------------------------------------------------------------------------

    async def on_webhook(self, request: web.Request) -> web.Response:
        """Record a posted update (Telegram gets 200 once it is committed, and 500, to deliver
        it again, only when the store could not record it), then process it in its chat's
        order. An update that cannot be handled (bad data in it) is acknowledged and logged."""
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, (self._webhook_secret or "").encode()):
            self._refusals.note(request.remote or "unknown", "wrong secret token")
            return web.Response(status=403)
        try:
            # Telegram sends UTF-8 JSON; anything else (another charset, invalid bytes) is no
            # update, whatever its Content-Type says.
            raw = (await request.read()).decode("utf-8")
            data = json.loads(raw)
            update_id = data["update_id"]
        except (ValueError, TypeError, KeyError, RecursionError):  # UnicodeDecodeError too
            raw, data, update_id = "", None, None
        if type(update_id) is not int or not 0 <= update_id < 2**63:
            return web.Response(status=400, text="not a Telegram update")
        try:
            await self._record(update_id, raw, data)
        except Exception as error:  # Telegram delivers it again later
            log.error("could not record update %d: %s", update_id, error)
            return web.Response(status=500)
        return web.Response(status=200)

    async def _record_polled(self, update: Update) -> None:
        """Record an update polled from Telegram (see RecordingQueue)."""
        data = self._requests[1].take_polled(update.update_id) or update.to_dict()
        raw = json.dumps(data, ensure_ascii=False, default=_epoch_seconds)
        self._remember(raw, update)
        await self._record(update.update_id, raw, data, update)

    def _update_of(self, payload: str) -> Update:
        """The update a recorded payload holds, made once for its recording, processing and
        sending (python-telegram-bot's objects cost more to make than the rest of an update's
        handling but its database writes)."""
        update = self._recent.get(payload)
        if update is None:
            update = Update.de_json(json.loads(payload), self.app.bot)
            self._remember(payload, update)
        return update

    def _remember(self, payload: str, update: Update) -> None:
        self._recent[payload] = update
        if len(self._recent) > RECENT_UPDATES:
            del self._recent[next(iter(self._recent))]

    async def _record(
        self, update_id: int, raw: str, data: dict[str, Any], update: Update | None = None
    ) -> None:
        """Record an update (committed on return: Telegram may be told it arrived), to be
        processed in its chat's order; counted once, and a button tap answered at once, by
        whoever records it first (a repeated delivery is neither). update: data as an Update,
        if it was made already."""
        chat = _chat_id(data)
        key = delivery_chat(PLATFORM, str(chat) if chat is not None else f"update:{update_id}")
        recorded = await self.inbox.receive(
            PLATFORM, str(update_id), chat=key, position=update_id, payload=raw
        )
        if not recorded:
            return
        metrics.update_received(PLATFORM, update_kind(data))
        if "callback_query" in data:
            try:
                await self.answer_tap(update or Update.de_json(data, self.app.bot))
            except Exception:  # recorded: Telegram must not deliver it again for this
                log.exception("answering the button tap of update %d failed", update_id)

    async def _process_recorded(self, pending: PendingUpdate) -> list[Reply]:
        """Process an update from the inbox; its answer, for the inbox to send. Unavailable
        when its turn could not be recorded: nothing is sent, and the update's next processing
        answers it."""
        return await from_inbox(self.app.process_update(self._update_of(pending.payload)))

    async def _send_recorded(self, pending: PendingUpdate, replies: Sequence[Reply]) -> None:
        """Send an update's answer as replies to its message."""
        message = self._update_of(pending.payload).effective_message
        if message is None:
            return
        for reply in replies:
            await self.sender.reply(message, reply)

    async def _connect(self) -> None:
        """getMe, retried with backoff while Telegram cannot be reached (network, timeouts,
        5xx, answers that are not JSON); a rejected token is a ConfigError."""

        async def initialize() -> None:
            try:
                await self.app.initialize()
            except InvalidToken:
                raise ConfigError(await self._why_rejected()) from None

        await with_backoff(
            initialize,
            transient=(TelegramError,),
            what="Telegram at telegram.base_url",
            sleep=self._sleep,
            detail=lambda error: getattr(error, "message", str(error)),
        )

    async def _why_rejected(self) -> str:
        """Tell a rejected token from a wrong base URL (python-telegram-bot reports both as
        InvalidToken): the Bot API answers a bad token with JSON, a wrong URL rarely does."""
        url = f"{self.config.base_url.rstrip('/')}{self.app.bot.token}/getMe"
        try:
            async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
                response = await client.get(url)
            answer = response.json()
            from_bot_api = isinstance(answer, dict) and answer.get("ok") is False
        except (httpx.HTTPError, ValueError):
            from_bot_api = False
        if from_bot_api:
            return (
                f"Telegram rejected the bot token in ${self.config.token_env}; copy it again "
                "from @BotFather (telegram.token_env names the variable)"
            )
        return (
            f"telegram.base_url ({self.config.base_url}) does not answer like the Telegram Bot "
            "API; it should look like https://api.telegram.org/bot"
        )

    async def _register_commands(self) -> None:
        try:
            await self.app.bot.set_my_commands(
                PRIVATE_COMMANDS, scope=BotCommandScopeAllPrivateChats()
            )
            await self.app.bot.set_my_commands(GROUP_COMMANDS, scope=BotCommandScopeAllGroupChats())
        except TelegramError as error:
            log.warning("could not register the command menu: %s", error)

    # --- handlers -------------------------------------------------------------------------------

    async def on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Hand a message to the core with what Telegram says about it; the core answers on its
        surface. A message with no text (a photo, a sticker, a file) reaches the core as
        unreadable: a caption is not taken as the message. A channel post gets nothing."""
        message = update.effective_message
        if message is None:
            return
        if message.chat.type == ChatType.CHANNEL:
            # Whatever the bot said in a channel, every subscriber would read it, and pins are
            # not available there anyway: not even the refusal is posted.
            log.info(
                "a post in channel %s was not answered: nothing is posted into channels",
                message.chat.id,
            )
            return
        surface = TelegramSurface(self, message)
        try:
            await self._handle(self._incoming(message), surface)
        finally:
            surface.close()  # previews of a turn that failed stop here

    def _incoming(self, message: Message) -> Incoming:
        """What Telegram says about a message, as the core takes it."""
        conversation = conversation_of(message)
        text = with_spoiler_marks(message.text, message.entities)
        return Incoming(
            conversation,
            None if text is None else self._without_mention(text),
            mentioned=self._mentions_me(message),
            replied_to_bot=self._replies_to_me(message),
            replied=self._replied_lookup(message),
            platform_admin=self._admin_lookup(message, conversation),
            redelivered=in_inbox(),
            mentioned_users=self._mentioned_users(message),
        )

    @staticmethod
    def _mentioned_users(message: Message) -> tuple[tuple[str, str], ...]:
        """The people message mentions with their ids: text mentions (of someone without a
        username: the entity carries the user). An @username carries no id and the Bot API
        cannot look one up, so it is not here."""
        kinds: list[str | None] = [MessageEntity.TEXT_MENTION]
        return tuple(
            (shown, str(entity.user.id))
            for entity, shown in message.parse_entities(kinds).items()
            if entity.user is not None
        )

    async def _handle(self, incoming: Incoming, surface: Surface) -> Reply | None:
        """The one way a Telegram update reaches the core (None also when an update from the
        inbox found the database unreachable: it is answered by its next processing)."""
        reply = await unless_lost(self.pinbot.handle(incoming, surface))
        return None if isinstance(reply, Lost) else reply

    async def on_pinned(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A message was pinned in a group: it becomes the group's pinned-message block when
        the one who pinned it may change shared blocks (telegram.sync_pinned_message)."""
        message = update.effective_message
        pinned = message.pinned_message if message is not None else None
        if message is None or pinned is None:
            return
        conversation = conversation_of(message)
        if conversation.kind is not ChatKind.GROUP:
            return
        readable = pinned if isinstance(pinned, Message) else None
        text = (
            with_spoiler_marks(readable.text, readable.entities)
            or with_spoiler_marks(readable.caption, readable.caption_entities)
            if readable
            else None
        )
        author = readable.from_user if readable else None
        admin = self._admin_lookup(message, conversation)
        author_id = str(author.id) if author else None
        pin = ChatPinned(
            conversation,
            text,
            str(pinned.message_id),
            author_id,
            admin,
            pinned_at=message.message_id,  # the service message: ids grow per chat
        )
        outcome = await unless_lost(self.pinbot.handle(pin, SILENT))
        if isinstance(outcome, Lost):
            return
        log.info("pinned message %s in chat %s %s", pinned.message_id, message.chat.id, outcome)

    async def answer_tap(self, update: Update) -> None:
        """Answer a tap on a button at once (the tapper's button stops spinning): what it does,
        or why it counts for nothing. Every tap is answered, whatever its data, and whatever
        went wrong working out the answer."""
        query = update.callback_query
        if query is None:
            return
        message = query.message
        try:
            if isinstance(message, Message):
                tap = self._tap(message, query.from_user, query.data)
            else:  # too old for Telegram to show: the core says what to use instead
                tapper = Conversation(PLATFORM, ChatKind.UNKNOWN, None, str(query.from_user.id))
                tap = Tap(tapper, query.data or "", None)
            tapped = await self.pinbot.handle(tap, SILENT)
            notice = tapped.notice if tapped else "This button does nothing any more."
        except Exception:
            log.exception("working out the answer to a button tap failed")
            notice = "That did not work; try again, or use /pin shared proposals."
        try:
            await query.answer(notice)
        except TelegramError as error:
            log.warning("answering a button tap failed: %s", error)

    async def on_tap(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Carry out a tap (answered already) in its chat's order: a shared admin's decision on
        a proposal, whose outcome replaces the message's buttons."""
        query = update.callback_query
        message = query.message if query else None
        if query is None or not isinstance(message, Message):
            return
        # Counted when it was answered (answer_tap): asked again here for the command.
        tap = dataclasses.replace(self._tap(message, query.from_user, query.data), counted=False)
        tapped = await self.pinbot.handle(tap, SILENT)
        if tapped is None or tapped.command is None:
            return
        incoming = Incoming(
            tapped.conversation,
            tapped.command,
            mentioned=True,
            platform_admin=tap.platform_admin,
            redelivered=in_inbox(),
        )
        unedited: set[tuple[str, str]] = set()
        token = _UNEDITED.set(unedited)
        try:
            # The outcome shows in the buttons' message.
            reply = await self._handle(incoming, SILENT)
        finally:
            _UNEDITED.reset(token)
        if reply is None:
            return
        # The outcome quotes blocks and labels, which are the chat's: only at debug level.
        log.debug("tap %r in chat %s: %s", query.data, message.chat.id, reply.text)
        if (str(message.chat.id), str(message.message_id)) in unedited:
            # Decided and saved, but its message cannot show it (too old to edit, deleted):
            # the tapper hears the outcome as a reply instead of nothing.
            log.info(
                "the message tapped in chat %s could not show the outcome; it is answered",
                message.chat.id,
            )
            await after_commit(functools.partial(self.sender.reply, message))(reply)

    def _tap(self, message: Message, tapper: User, data: str | None) -> Tap:
        """A tap on one of message's buttons, as the core takes it."""
        conversation = conversation_of(message, tapper)
        sent = Sent(str(message.chat.id), str(message.message_id))
        return Tap(conversation, data or "", sent, self._admin_lookup(message, conversation))

    async def check_pinned_messages(self, now: datetime) -> None:
        """Telegram sends nothing when a message is unpinned: ask getChat of each group whose
        pinned message is a block, and idle the block where the chat has none pinned now."""
        for chat_id in await self.pinbot.handle(PinnedChats(PLATFORM), SILENT):
            try:
                chat = await self.app.bot.get_chat(chat_id)
            except TelegramError as error:
                log.warning("getChat for chat %s failed: %s", chat_id, error)
                continue
            unpinned = ChatUnpinned(PLATFORM, chat_id)
            if chat.pinned_message is None and await self.pinbot.handle(unpinned, SILENT):
                log.info("chat %s has no pinned message now: its block is idle", chat_id)

    async def on_migrate(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Move a group's blocks, counters and history when it becomes a supergroup."""
        message = update.effective_message
        if message is None:
            return
        if message.migrate_to_chat_id:
            old, new = message.chat.id, message.migrate_to_chat_id
        elif message.migrate_from_chat_id:
            old, new = message.migrate_from_chat_id, message.chat.id
        else:
            return
        moved = await unless_lost(
            self.pinbot.handle(GroupMoved(PLATFORM, str(old), str(new)), SILENT)
        )
        if isinstance(moved, Lost):
            return
        log.info("group %s migrated to %s: %d block(s) moved", old, new, moved)

    async def on_removed(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The bot was removed from a group, or left it: the core logs and counts it."""
        change = update.my_chat_member
        gone = (ChatMemberStatus.LEFT, ChatMemberStatus.BANNED)
        group = change and change.chat.type in (ChatType.GROUP, ChatType.SUPERGROUP)
        if change and group and change.new_chat_member.status in gone:
            by = str(change.from_user.id)
            where = Conversation(PLATFORM, ChatKind.GROUP, str(change.chat.id), by)
            await unless_lost(self.pinbot.handle(BotRemoved(where), SILENT))

    async def on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Log a failure of one update (without secrets) and keep going."""
        log.error("update failed: %r", context.error, exc_info=context.error)

    async def send(self, chat: str, reply: Reply) -> Sent | None:
        """Post reply in a chat (by its id), split like any reply."""
        return await self.sender.send(chat, reply)

    async def edit(self, sent: Sent, reply: Reply) -> bool:
        """Replace the text of a message the bot sent; False (logged by who asked) when
        Telegram refused, which a tap being carried out answers (on_tap)."""
        edited = False
        try:
            edited = await self.sender.edit(sent, reply)
        finally:
            if not edited and (unedited := _UNEDITED.get()) is not None:
                unedited.add((sent.chat, sent.message_id))
        return edited

    # --- triggers -------------------------------------------------------------------------------

    def _replies_to_me(self, message: Message) -> bool:
        """Whether message replies to one of the bot's own messages (a topic's opening service
        message does not count: Telegram sets it as the reply target of every topic message)."""
        replied = message.reply_to_message
        return (
            replied is not None
            and replied.forum_topic_created is None
            and replied.from_user is not None
            and replied.from_user.id == self.app.bot.id
        )

    @staticmethod
    def _replied_lookup(message: Message) -> QuotedLookup | None:
        """The message this one replies to, for reply-to-pin: the quoted part when the reply
        quotes one, else its text or caption as plain text. A topic's opening service message is
        not a reply target (Telegram sets it on every message of the topic)."""
        replied = message.reply_to_message
        if replied is None or replied.forum_topic_created is not None:
            return None
        quote = message.quote.text if message.quote is not None else None
        text = quote or replied.text or replied.caption
        author = str(replied.from_user.id) if replied.from_user else None
        quoted = Quoted(text, str(replied.message_id), author)

        async def lookup() -> Quoted:
            return quoted

        return lookup

    def _mentions_me(self, message: Message) -> bool:
        """Whether message (or its caption) @mentions the bot, by username or as a text
        mention."""
        me = self.app.bot
        mention = f"@{me.username}".casefold()
        kinds: list[str | None] = [MessageEntity.MENTION, MessageEntity.TEXT_MENTION]
        entities = message.parse_entities(kinds) | message.parse_caption_entities(kinds)
        for entity, value in entities.items():
            if entity.type == MessageEntity.MENTION and value.casefold() == mention:
                return True
            if entity.user is not None and entity.user.id == me.id:
                return True
        return False

    def _without_mention(self, text: str) -> str:
        username = self.app.bot.username
        stripped = re.sub(rf"^@{re.escape(username)}\b[\s,:]*", "", text, flags=re.IGNORECASE)
        return stripped or text

    @contextlib.asynccontextmanager
    async def typing(self, message: Message) -> AsyncIterator[None]:
        """Show "typing…" in message's chat (and topic) until the block ends."""

        async def keep_typing() -> None:
            while True:
                try:
                    await message.chat.send_action(
                        ChatAction.TYPING,
                        message_thread_id=message.message_thread_id
                        if message.is_topic_message
                        else None,
                    )
                except TelegramError as error:
                    log.debug("typing indicator failed: %s", error)
                await self._sleep(TYPING_REFRESH_S)

        task = asyncio.create_task(keep_typing())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _admin_lookup(
        self, message: Message, conversation: Conversation
    ) -> Callable[[], Awaitable[bool | None]] | None:
        """How the core asks whether the sender administers this group (None outside groups)."""
        sender = conversation.sender_id
        if conversation.kind is not ChatKind.GROUP or sender is None:
            return None

        async def is_admin() -> bool | None:
            return await self._is_group_admin(message, int(sender))

        return is_admin

    async def _is_group_admin(self, message: Message, user_id: int) -> bool | None:
        """Ask Telegram (getChatMember) whether the user is the group's creator or an
        administrator, cached for `telegram.admin_cache_ttl_s`; None when Telegram cannot say."""
        key = (message.chat.id, user_id)
        cached = self._admin_cache.get(key)
        now = self.monotonic()
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            member = await message.chat.get_member(user_id)
        except TelegramError as error:
            log.warning("getChatMember failed for chat %s: %s", message.chat.id, error)
            return None
        is_admin = member.status in (ChatMemberStatus.OWNER, ChatMemberStatus.ADMINISTRATOR)
        self._admin_cache[key] = (is_admin, now + self.config.admin_cache_ttl_s)
        return is_admin


class TelegramSurface(ReplySurface):
    """A Telegram message being answered: "typing" while the model works, a streamed answer
    previewed as a reply that grows, and the reply sent as that stream's final form, split to
    Telegram's limit. The reply goes out once the inbox has recorded the message's processing,
    unless previews of it show already (they end in it at once). A webhook worker shows no
    previews: another worker may take the chat up and answer the message again."""

    def __init__(self, frontend: TelegramFrontend, message: Message) -> None:
        self._stream = StreamedReply(frontend.sender, message)
        self._held = after_commit(self._stream.finish)
        super().__init__(self._answer)
        self._previews = frontend.config.mode == "polling"
        self._typing = functools.partial(frontend.typing, message)

    @property
    def on_text(self) -> TextSink | None:
        """The previews of a streamed answer (none on a webhook worker)."""
        return self._stream.update if self._previews else None

    async def _answer(self, reply: Reply) -> None:
        if self._stream.showing:
            await self._stream.finish(reply)
        else:
            await self._held(reply)

    def thinking(self) -> AbstractAsyncContextManager[None]:
        """Telegram's "typing…" while the model works."""
        return self._typing()

    def close(self) -> None:
        """Stop showing previews of a turn that ended without a reply."""
        self._stream.close()


def _epoch_seconds(value: object) -> int:
    """A date python-telegram-bot's to_dict leaves as a datetime (an inaccessible message's
    date 0, for one), as the Bot API writes dates: seconds since the epoch."""
    if isinstance(value, datetime):
        return int(value.timestamp())
    raise TypeError(f"{type(value).__name__} is not JSON")


def _chat_id(update: dict[str, Any]) -> int | None:
    """The id of the chat an update (as posted, JSON) belongs to, if any. Read from the JSON
    itself: building python-telegram-bot's objects twice per update costs more than the rest of
    receiving it."""
    for value in update.values():
        if isinstance(value, dict) and isinstance(value.get("message"), dict):
            value = value["message"]  # a callback query: the chat of the message tapped
        chat = value.get("chat") if isinstance(value, dict) else None
        if isinstance(chat, dict) and isinstance(chat.get("id"), int):
            return int(chat["id"])
    return None


def with_spoiler_marks(text: str | None, entities: Sequence[MessageEntity] | None) -> str | None:
    """The text with each spoiler Telegram drew in it written back as `||…||`, the mark the core
    reads as a secret of the user's own: a `/pin add` with a spoiler keeps it hidden from the
    model and listings, and a spoiler in a message or a pinned message stays marked if the
    model or the pinned-message sync pins it."""
    spoilers = sorted(
        (e for e in entities or () if e.type == MessageEntity.SPOILER),
        key=lambda entity: entity.offset,
    )
    if text is None or not spoilers:
        return text
    # Entity offsets count UTF-16 units: cut the text in those units.
    units = text.encode("utf-16-le")
    parts: list[str] = []
    position = 0
    for entity in spoilers:
        start, end = entity.offset * 2, (entity.offset + entity.length) * 2
        if start < position or end > len(units):
            continue  # overlapping or out of range: Telegram never sends it; keep the text
        parts.append(units[position:start].decode("utf-16-le", errors="replace"))
        parts.append("||" + units[start:end].decode("utf-16-le", errors="replace") + "||")
        position = end
    parts.append(units[position:].decode("utf-16-le", errors="replace"))
    return "".join(parts)

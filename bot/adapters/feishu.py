"""The Feishu (Lark) adapter: `im.message.receive_v1` events in (webhook or long connection, through
lark-oapi's dispatcher), core replies out (through our own pooled HTTP client)."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from aiohttp import web

from bot import metrics
from bot.adapters import FEISHU
from bot.adapters.feishu_api import (
    FeishuApi,
    FeishuApiError,
    FeishuCredentialsError,
    FeishuTransientError,
)
from bot.adapters.feishu_format import CARD_VALUE_KEY
from bot.adapters.kit import (
    Reachability,
    RefusalLog,
    after_commit,
    from_inbox,
    in_inbox,
    with_backoff,
)
from bot.adapters.webhook import serve_webhook
from bot.clock import Clock, utc_now
from bot.config import ConfigError, FeishuConfig, secret_from_env
from bot.core.entry import (
    SILENT,
    BotRemoved,
    ChatKind,
    Conversation,
    Incoming,
    Pinbot,
    Quoted,
    QuotedLookup,
    Reply,
    ReplySurface,
    Sent,
    Surface,
    Tap,
    delivery_chat,
)
from storage.models import PendingUpdate

log = logging.getLogger(__name__)
# Feishu is not reached once its API calls (or the long connection) have failed this long.
PLATFORM_WINDOW_S = 60.0

PLATFORM = FEISHU
LOGGED_DETAIL_CHARS = 200  # of a refused webhook's error, enough to tell token from signature
SIGNATURE_HEADERS = ("X-Lark-Request-Timestamp", "X-Lark-Request-Nonce", "X-Lark-Signature")
TIMESTAMP_HEADER = SIGNATURE_HEADERS[0]
MAX_TIMESTAMP_DIGITS = 12  # seconds since 1970 need 10 digits until the year 2286
URL_VERIFICATION = "url_verification"  # the type of Feishu's request URL check
MAX_OTHER_APPS_LOGGED = 100  # other apps' ids remembered, so their events are logged once each
MAX_ADMIN_CHATS = 10_000  # groups whose owner and managers are kept before expired ones go


@dataclass(frozen=True)
class Mention:
    """One @mention in a message: its placeholder key, who it names, their display name."""

    key: str
    open_id: str | None
    name: str


@dataclass(frozen=True)
class FeishuMessage:
    """The parts of an `im.message.receive_v1` event the bot uses."""

    event_id: str
    message_id: str
    chat_id: str | None
    chat_type: str | None
    thread_id: str | None
    root_id: str | None
    message_type: str | None
    content: str
    mentions: tuple[Mention, ...]
    open_id: str | None
    user_id: str | None
    union_id: str | None
    parent_id: str | None = None  # the message this one replies to (absent from older records)

    def conversation(self) -> Conversation:
        """The core's view: p2p is a DM keyed by open_id, a group (and topic thread) a group."""
        named = [
            (kind, value)
            for kind, value in (("user_id", self.user_id), ("union_id", self.union_id))
            if value
        ]
        kind = {"p2p": ChatKind.DIRECT, "group": ChatKind.GROUP}.get(
            self.chat_type or "", ChatKind.UNKNOWN
        )
        topic = (self.thread_id or self.root_id or None) if kind is ChatKind.GROUP else None
        return Conversation(
            PLATFORM,
            kind,
            self.chat_id,
            self.open_id,
            topic_id=topic,
            sender_aliases=tuple(value for _, value in named),
            sender_id_kinds=("open_id", *(name for name, _ in named)),
        )

    def to_json(self) -> str:
        """The event as recorded in the inbox."""
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, recorded: str) -> FeishuMessage:
        """The event as to_json recorded it."""
        fields = json.loads(recorded)
        mentions = tuple(Mention(**mention) for mention in fields.pop("mentions"))
        return cls(**fields, mentions=mentions)

    def raw_text(self) -> str | None:
        """The message's text with its mention placeholders, or None if it has no text."""
        return content_text(self.message_type, self.content)


def content_text(message_type: str | None, content: str) -> str | None:
    """The text of a text or post message's content (mention placeholders left in), or None
    for a message with no text (an image, a file, a sticker)."""
    try:
        body = json.loads(content)
    except json.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    if message_type == "text":
        text = body.get("text")
        return text if isinstance(text, str) else None
    if message_type == "post":
        return _post_text(body)
    return None


def _post_text(body: dict[str, Any]) -> str | None:
    post = body.get("content")
    if post is None:  # a localised post: {"zh_cn": {"title":…, "content":…}}
        post = next((v.get("content") for v in body.values() if isinstance(v, dict)), None)
    if not isinstance(post, list):
        return None
    lines = []
    for paragraph in post:
        parts = []
        for element in paragraph if isinstance(paragraph, list) else []:
            if isinstance(element, dict) and element.get("tag") == "text":
                parts.append(str(element.get("text", "")))
            elif isinstance(element, dict) and element.get("tag") == "at":
                parts.append(f"@{element.get('user_name', '')}")
        lines.append("".join(parts))
    return "\n".join(lines)


def message_of(data: Any) -> FeishuMessage:
    """Read a lark-oapi P2ImMessageReceiveV1 (or anything shaped like it) into a FeishuMessage."""
    header = getattr(data, "header", None)
    event = getattr(data, "event", None)
    message = getattr(event, "message", None)
    sender_ids = getattr(getattr(event, "sender", None), "sender_id", None)
    mentions = tuple(
        Mention(
            str(getattr(m, "key", "") or ""),
            getattr(getattr(m, "id", None), "open_id", None),
            str(getattr(m, "name", "") or ""),
        )
        for m in getattr(message, "mentions", None) or []
    )
    return FeishuMessage(
        event_id=str(getattr(header, "event_id", "") or ""),
        message_id=str(getattr(message, "message_id", "") or ""),
        chat_id=getattr(message, "chat_id", None) or None,
        chat_type=getattr(message, "chat_type", None) or None,
        thread_id=getattr(message, "thread_id", None) or None,
        root_id=getattr(message, "root_id", None) or None,
        message_type=getattr(message, "message_type", None) or None,
        content=str(getattr(message, "content", "") or ""),
        mentions=mentions,
        open_id=getattr(sender_ids, "open_id", None) or None,
        user_id=getattr(sender_ids, "user_id", None) or None,
        union_id=getattr(sender_ids, "union_id", None) or None,
        parent_id=getattr(message, "parent_id", None) or None,
    )


def resolve_mentions(
    text: str, mentions: tuple[Mention, ...], bot_open_id: str | None
) -> tuple[str, bool]:
    """Replace mention placeholders with @names and drop a leading mention of this bot; returns
    the text and whether the bot was mentioned."""
    mentioned = False
    leading = re.match(r"\s*(@_user_\d+)\s*", text)
    for mention in mentions:
        if bot_open_id and mention.open_id == bot_open_id:
            mentioned = True
            if leading and leading.group(1) == mention.key:
                text = text[leading.end() :]
                leading = None
    for mention in sorted(mentions, key=lambda m: len(m.key), reverse=True):
        if mention.key:
            text = text.replace(mention.key, f"@{mention.name}")
    return text.strip(), mentioned


def mentioned_users(
    mentions: tuple[Mention, ...], bot_open_id: str | None
) -> tuple[tuple[str, str], ...]:
    """The people a message mentions, as the core takes them: each mention's text as
    resolve_mentions shows it (`@name`) and the person's open_id; not the bot itself, nor a
    mention without an open_id (`@all`) or a name."""
    return tuple(
        (f"@{mention.name}", mention.open_id)
        for mention in mentions
        if mention.open_id and mention.name and mention.open_id != bot_open_id
    )


ADMIN_PERMISSION_HINT = (
    "the app needs the im:chat:readonly permission (or im:chat:read, or im:chat) to read a "
    "group's owner and managers"
)


def chat_admins(chat: dict[str, Any]) -> frozenset[str] | None:
    """A group's owner and managers (their open_ids) in `GET im/v1/chats/:chat_id`'s data, or
    None when it does not say (Feishu gives only a chat's name, avatar and counts to an app
    outside it)."""
    owner = chat.get("owner_id")
    managers = chat.get("user_manager_id_list")
    if owner is None and managers is None:
        return None
    people = {str(owner)} if owner else set()
    if isinstance(managers, list):
        people.update(str(manager) for manager in managers if manager)
    return frozenset(people)


PERMISSION_HINT = (
    "In groups the app needs the im:message.group_msg permission to read other members' "
    "messages: ask the app's administrator to grant it, or write the content after the label."
)


def quoted_of(message_id: str, item: dict[str, Any]) -> Quoted:
    """A message as the `GET im/v1/messages/:message_id` API returns it (one of `data.items`),
    as the core reads a replied message: plain text with mentions as @names."""
    body = item.get("body") if isinstance(item.get("body"), dict) else {}
    raw = content_text(item.get("msg_type"), str((body or {}).get("content") or ""))
    mentions = tuple(
        Mention(str(m.get("key") or ""), None, str(m.get("name") or ""))
        for m in item.get("mentions") or []
        if isinstance(m, dict)
    )
    text = resolve_mentions(raw, mentions, None)[0] if raw is not None else None
    sender = item.get("sender") if isinstance(item.get("sender"), dict) else {}
    author = (sender or {}).get("id")
    return Quoted(text, message_id, str(author) if author else None)


def unreadable_parent(error: Exception) -> str:
    """The refusal for a replied message Feishu would not give: why, and the permission."""
    return f"I could not read the message you replied to ({error}). {PERMISSION_HINT}"


def _adopt_lark_logger() -> None:
    """lark-oapi logs through its own handler to stdout: send its records through ours
    (redacted, JSON when asked) instead. Its request errors are ours to report (one line per
    refused webhook), so below debug level only its critical records pass."""
    lark_log = logging.getLogger("Lark")
    lark_log.handlers.clear()
    lark_log.propagate = True
    if logging.getLogger().level > logging.DEBUG:
        lark_log.setLevel(logging.CRITICAL)


# The events lark-oapi's dispatcher hands over during one webhook request.
_RECEIVED: contextvars.ContextVar[list[FeishuMessage] | None] = contextvars.ContextVar(
    "feishu_received", default=None
)
CARD_ACTION = "card_action"  # the message_type under which a card tap waits in the inbox
TAP_ANSWER_TIMEOUT_S = 2.5  # Feishu waits 3 s for a card action's answer


def tap_of(data: Any) -> FeishuMessage | None:
    """A card button tap (lark-oapi's P2CardActionTrigger) as the inbox keeps it: the tapper,
    the card's chat and message, and the button's data as content; None when it is not a
    button of ours."""
    header = getattr(data, "header", None)
    event = getattr(data, "event", None)
    operator = getattr(event, "operator", None)
    context = getattr(event, "context", None)
    value = getattr(getattr(event, "action", None), "value", None) or {}
    button = value.get(CARD_VALUE_KEY) if isinstance(value, dict) else None
    if not isinstance(button, str):
        return None
    return FeishuMessage(
        event_id=str(getattr(header, "event_id", "") or ""),
        message_id=str(getattr(context, "open_message_id", "") or ""),
        chat_id=getattr(context, "open_chat_id", None) or None,
        chat_type=None,  # a card action does not say; FeishuFrontend._tap works it out
        thread_id=None,
        root_id=None,
        message_type=CARD_ACTION,
        content=button,
        mentions=(),
        open_id=getattr(operator, "open_id", None) or None,
        user_id=getattr(operator, "user_id", None) or None,
        union_id=getattr(operator, "union_id", None) or None,
    )


class FeishuFrontend:
    """Runs the bot on Feishu: records each event once, processes them per chat in order,
    replies."""

    def __init__(
        self,
        pinbot: Pinbot,
        config: FeishuConfig,
        api: FeishuApi,
        *,
        verification_token: str,
        encrypt_key: str,
        clock: Clock = utc_now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        import lark_oapi as lark  # takes seconds to import: only when Feishu is used

        _adopt_lark_logger()
        self.pinbot = pinbot
        self.config = config
        self.api = api
        self._clock = clock
        self._sleep = sleep
        self.bot_open_id: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # events from the long connection
        self.inbox = pinbot.inbox(self._process_recorded, self._send_recorded, resends=True)
        self._runner: web.AppRunner | None = None
        self._long_connection: threading.Thread | None = None
        # Down from lark-oapi's on_reconnecting until its on_reconnected (its own thread).
        self._long_connection_down = Reachability(monotonic)
        self._monotonic = monotonic
        self._asking: asyncio.Task[None] | None = None  # a call asked by not_ready
        self._refusals = RefusalLog("Feishu", monotonic)
        self._encrypt_key = encrypt_key
        self._other_apps: set[str] = set()  # app ids whose events were ignored (logged once)
        # chat_id → its owner and managers (open_ids), and until when they are trusted.
        self._admins: dict[str, tuple[frozenset[str], float]] = {}
        self.port = config.webhook_port
        self.dispatcher = (
            lark.EventDispatcherHandler.builder(encrypt_key, verification_token)
            .register_p2_im_message_receive_v1(self.on_event)
            .register_p2_card_action_trigger(self.on_card_action)
            .register_p2_im_chat_member_bot_deleted_v1(self.on_bot_removed)
            .build()
        )
        pinbot.use_messenger(self)

    @classmethod
    def from_config(cls, pinbot: Pinbot, config: FeishuConfig) -> FeishuFrontend:
        """Build it with its secrets read from the environment variables config names."""
        if not config.app_id:
            raise ConfigError("feishu.app_id must be set to run on Feishu")
        secret = secret_from_env(config.app_secret_env, "The Feishu app secret")
        token = ""
        if config.mode == "webhook":
            token = secret_from_env(
                config.verification_token_env, "The Feishu event verification token"
            )
        key = (
            secret_from_env(config.encrypt_key_env, "The Feishu encrypt key")
            if config.encrypt_key_env
            else ""
        )
        return cls(
            pinbot, config, FeishuApi(config, secret), verification_token=token, encrypt_key=key
        )

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Learn the bot's open_id, then listen for events in the configured mode."""
        self._loop = asyncio.get_running_loop()
        await self._learn_open_id()
        await self.inbox.start()
        if self.config.mode == "webhook":
            await self._start_webhook()
        else:
            self._start_long_connection()
        log.info("feishu bot started (%s)", self.config.mode)

    async def _learn_open_id(self) -> None:
        """Fetch the bot's open_id, retrying with backoff while Feishu cannot be reached; refused
        credentials end the start with ConfigError."""
        try:
            self.bot_open_id = await with_backoff(
                self.api.bot_open_id,
                transient=(httpx.HTTPError, FeishuTransientError),
                what="Feishu",
                sleep=self._sleep,
            )
        except FeishuCredentialsError as error:
            raise ConfigError(str(error)) from None
        except FeishuApiError as error:
            log.warning(
                "could not fetch the bot's open_id (group mentions will not trigger): %s", error
            )

    async def stop(self) -> None:
        """Stop listening and finish the events in progress; the chats' other waiting events
        are left to the other workers."""
        if self._asking is not None:
            self._asking.cancel()
            await asyncio.gather(self._asking, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        await self._recorded()
        await self.inbox.stop()
        await self.api.close()

    async def idle(self) -> None:
        """Wait until every event received so far has been processed."""
        await self._recorded()
        await self.inbox.idle()

    async def _recorded(self) -> None:
        """Wait until every event handed over by the long connection is recorded."""
        await asyncio.sleep(0)  # let events handed over with call_soon_threadsafe be spawned
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
            await asyncio.sleep(0)

    async def _start_webhook(self) -> None:
        self._runner, self.port = await serve_webhook(
            self.config.webhook_path,
            self.on_webhook,
            host=self.config.webhook_host,
            port=self.config.webhook_port,
            port_setting="feishu.webhook_port",
        )

    def _start_long_connection(self) -> None:
        thread = threading.Thread(target=self._run_long_connection, name="feishu-ws", daemon=True)
        thread.start()
        self._long_connection = thread

    def not_ready(self) -> str | None:
        """Why the connection to Feishu is not working now (None: it is): the webhook listener
        is up, or the long connection runs and has not been reconnecting for over
        PLATFORM_WINDOW_S; and Feishu answers the bot's API calls (none failing, with none
        answered since, for PLATFORM_WINDOW_S; before the first, nothing failed). While its
        calls fail, one is made meanwhile (the bot's open_id): a worker taken out of traffic
        would have no call of its own to find Feishu back with."""
        if self.config.mode == "webhook":
            if self._runner is None:
                return "the Feishu webhook listener is not up"
        else:
            thread = self._long_connection
            if thread is None or not thread.is_alive():
                return "the Feishu long connection is not running"
            down = self._long_connection_down.failing_since
            if down is not None and self._monotonic() - down > PLATFORM_WINDOW_S:
                return (
                    f"the Feishu long connection has been down for over {PLATFORM_WINDOW_S:g} s "
                    "(reconnecting)"
                )
        problem = self.api.reach.problem("Feishu", PLATFORM_WINDOW_S)
        if problem is not None and (self._asking is None or self._asking.done()):
            self._asking = asyncio.get_running_loop().create_task(self._ask_feishu())
        return problem

    async def _ask_feishu(self) -> None:
        """A call for readiness: its answer (or failure) is noted by the API client."""
        try:
            await self.api.bot_open_id()
        except Exception as error:  # noted already; readiness says so
            log.debug("asking Feishu for readiness failed: %s", error)

    def _run_long_connection(self) -> None:
        """Run lark-oapi's blocking long-connection client on its own loop in this thread."""
        import lark_oapi as lark
        import lark_oapi.ws.client as ws_client

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        ws_client.loop = loop  # the module captured whatever loop existed at import time
        client = lark.ws.Client(
            self.config.app_id,
            self.api.app_secret,
            event_handler=self.dispatcher,
            domain=self.config.base_url,
        )
        # Hooks of lark-oapi's client (its own thread): the connection was lost, and is back.
        client.on_reconnecting = self._long_connection_down.failed
        client.on_reconnected = self._long_connection_down.answered
        try:
            client.start()
        except Exception:
            log.exception("feishu long connection stopped")

    # --- receiving ------------------------------------------------------------------------------

    async def on_webhook(self, request: web.Request) -> web.Response:
        """Hand a POSTed event to lark-oapi's dispatcher (token, decryption, signature,
        url_verification), record the event, and answer: 200 once it is committed, 500 (Feishu
        delivers it again) when it could not be. It is processed afterwards. With an encrypt
        key, a request signed further than feishu.request_max_age_s from the bot's clock is
        refused (401) like a bad signature."""
        import lark_oapi as lark

        raw = lark.RawRequest()
        raw.uri = request.path
        raw.body = await request.read()
        # lark-oapi looks the signature headers up by their exact spelling: given as named
        # whatever case a proxy wrote them in (HTTP/2 lowercases them), and empty when absent
        # (an unsigned request must fail its signature check, not crash it).
        raw.headers = dict(request.headers) | {
            header: request.headers.get(header, "") for header in SIGNATURE_HEADERS
        }
        read = self._read(raw.body)
        verification = read is not None and read.type == URL_VERIFICATION
        # lark-oapi checks no signature on a url_verification (nor without an encrypt key).
        signed = self._encrypt_key and not verification
        if signed and (stale := self._stale(request.headers.get(TIMESTAMP_HEADER, ""))):
            self._refusals.note(request.remote or "unknown", stale)
            return web.json_response({"msg": "refused"}, status=401)
        received: list[FeishuMessage] = []
        token = _RECEIVED.set(received)
        try:
            # Calls on_event and on_card_action synchronously, in this context.
            result = self.dispatcher.do(raw)
        finally:
            _RECEIVED.reset(token)
        if result.status_code != 200:
            detail = (result.content or b"").decode("utf-8", "replace")[:LOGGED_DETAIL_CHARS]
            self._refusals.note(request.remote or "unknown", detail)
            status = 401 if ("token" in detail or "signature" in detail) else 400
            return web.json_response({"msg": "refused"}, status=status)
        if verification:
            # lark-oapi writes the challenge into its answer unescaped ('{"challenge":"%s"}'),
            # so a quote in it could add keys: the same challenge, as JSON.
            return web.json_response({"challenge": read.challenge})
        taps = [event for event in received if event.message_type == CARD_ACTION]
        try:
            for event in received:
                if event.message_type != CARD_ACTION:
                    await self._record(event)
            if taps:  # a card action is answered in this response: what the tap does
                return web.json_response(await self._tap(taps[0]))
        except Exception as error:
            log.error("could not record a Feishu event: %s", error)
            return web.json_response({"msg": "try again"}, status=500)
        return web.Response(body=result.content, status=200, content_type="application/json")

    def _stale(self, timestamp: str) -> str | None:
        """Why a signed request's timestamp (X-Lark-Request-Timestamp, seconds since the epoch)
        is refused, or None when it is within feishu.request_max_age_s of the bot's clock, past
        or future: a request recorded on its way is not accepted again later."""
        # Only the request's timestamp counts, never the event's header.create_time: Feishu
        # delivers an event again, hours later, with a fresh timestamp at every delivery.
        # The signature hashes timestamp + nonce + key + body as one string, so moving digits
        # between timestamp and nonce keeps it valid: an empty or re-split timestamp must fail
        # here (a shorter one is decades old, a longer one centuries ahead).
        # Bounded before int(): Python refuses to read more than 4,300 digits (ValueError).
        if (
            not (timestamp.isascii() and timestamp.isdigit())
            or len(timestamp) > MAX_TIMESTAMP_DIGITS
        ):
            return f"a signed request without a valid {TIMESTAMP_HEADER} header"
        skew = int(timestamp) - self._clock().timestamp()
        if abs(skew) <= self.config.request_max_age_s:
            return None
        when = "ahead of" if skew > 0 else "behind"
        return (
            f"a signed request {abs(skew):.0f} s {when} this machine's clock (more than "
            f"feishu.request_max_age_s, {self.config.request_max_age_s:g} s)"
        )

    def _read(self, body: bytes) -> Any:
        """The request as lark-oapi's dispatcher reads it (an EventContext: decrypted, its type
        worked out the same way), or None when it cannot be read (the dispatcher refuses it)."""
        from lark_oapi.core.utils import AESCipher, Strings
        from lark_oapi.event.context import EventContext

        # The steps of EventDispatcherHandler.do, with lark-oapi's own pieces.
        try:
            encrypted = json.loads(body).get("encrypt")
            plaintext = (
                AESCipher(self._encrypt_key).decrypt_str(encrypted)
                if Strings.is_not_empty(encrypted)
                else body.decode("utf-8")
            )
            context = EventContext(json.loads(plaintext))
            if Strings.is_not_empty(context.schema):
                context.type = context.header.event_type
            elif Strings.is_not_empty(context.uuid):
                context.type = context.event.get("type")
        except Exception:  # whatever the dispatcher makes of it, it is no url_verification
            return None
        return context

    def on_card_action(self, data: Any) -> Any:
        """lark-oapi's callback for a card button tap, which Feishu wants answered at once:
        during a webhook request it is collected and answered by on_webhook; from the long
        connection (its own thread) it is answered here, with what the bot's loop says."""
        from lark_oapi.event.callback.model.p2_card_action_trigger import (
            P2CardActionTriggerResponse as Answer,
        )

        if self._for_another_app(data):
            return Answer({})
        tap = tap_of(data)
        received = _RECEIVED.get()
        if tap is None or received is not None:
            if tap is not None and received is not None:
                received.append(tap)
            return Answer({})
        loop = self._loop
        if loop is None:
            return Answer({})
        future = asyncio.run_coroutine_threadsafe(self._tap(tap), loop)
        try:
            answer = future.result(TAP_ANSWER_TIMEOUT_S)
        except Exception as error:  # the tap is recorded or not; Feishu shows no toast
            log.warning("answering a card action failed: %s", error)
            return Answer({})
        return Answer(answer)

    async def _tap(self, tap: FeishuMessage) -> dict[str, Any]:
        """What a card button tap does, as Feishu's card action answer (a toast); a tap that
        counts is recorded, to be carried out in its chat's order."""
        # The bot's cards are proposals, posted in groups, and pin suggestions, in DMs: the
        # chat is the tapper's DM when the tapped card is one of their suggestions (never what
        # the button's data says: anyone can copy a card).
        message = Sent(tap.chat_id or "", tap.message_id)
        conversation = tap.conversation()
        # Feishu does not say the chat's kind; the owner and managers are asked only if the
        # core takes the tap for a group's (a proposal) and the answer could decide it.
        as_group = dataclasses.replace(conversation, kind=ChatKind.GROUP)
        tapped = await self.pinbot.handle(
            Tap(
                conversation,
                tap.content,
                message,
                platform_admin=self._admin_lookup(as_group),
                chat_kind_known=False,
            ),
            SILENT,
        )
        # A tap carried out is counted when recorded (a repeated delivery is not), the others
        # as they come.
        if tapped is None or tapped.command is None:
            metrics.update_received(PLATFORM, "tap")
        if tapped is None:
            return {"toast": {"type": "info", "content": "This button does nothing any more."}}
        if tapped.command is not None:
            direct = tapped.conversation.kind is ChatKind.DIRECT
            chat_type = "p2p" if direct else "group"
            await self._record(
                dataclasses.replace(tap, chat_type=chat_type, content=tapped.command)
            )
        kind = "info" if tapped.command is not None else "warning"
        return {"toast": {"type": kind, "content": tapped.notice}}

    def on_event(self, data: Any) -> None:
        """lark-oapi's callback: during a webhook request, collect the event for it to record;
        from the long connection (on its own thread), hand it to the bot's loop and return."""
        if self._for_another_app(data):
            return
        event = message_of(data)
        received = _RECEIVED.get()
        if received is not None:
            received.append(event)
            return
        loop = self._loop
        if loop is None:
            log.error("event %s arrived before the bot started; dropped", event.event_id)
            return
        loop.call_soon_threadsafe(self._spawn, event)

    def on_bot_removed(self, data: Any) -> None:
        """lark-oapi's callback for the bot removed from a group (`im.chat.member.bot.
        deleted_v1`): the core logs and counts it, on the bot's loop; nothing is answered."""
        if self._for_another_app(data):
            return
        event = data.event
        chat = getattr(event, "chat_id", None)
        by = getattr(getattr(event, "operator_id", None), "open_id", None) or ""
        loop = self._loop
        if chat and loop is not None:
            removed = BotRemoved(Conversation(PLATFORM, ChatKind.GROUP, chat, by))
            loop.call_soon_threadsafe(self._spawn_removed, removed)

    def _for_another_app(self, data: Any) -> bool:
        """Whether an event (or card action) names another app than feishu.app_id in its
        header: such an event is not acted on, and the first one from each app is logged. Its
        webhook request is still answered 200: it passed the token (and signature) check, so
        it is no forgery, and any other answer makes Feishu deliver it again for hours."""
        # Every schema 2.0 event and callback carries header.app_id; one without it is taken
        # as ours (it names no other app, and lark-oapi has checked its token or signature).
        app_id = getattr(getattr(data, "header", None), "app_id", None)
        if not app_id or not self.config.app_id or app_id == self.config.app_id:
            return False
        if app_id not in self._other_apps and len(self._other_apps) < MAX_OTHER_APPS_LOGGED:
            self._other_apps.add(app_id)
            header = data.header
            log.warning(
                "ignored a Feishu %s event for app %s (this bot is feishu.app_id %s); further "
                "events for that app are ignored without a log line",
                getattr(header, "event_type", None) or "unknown",
                app_id,
                self.config.app_id,
            )
        return True

    def _spawn_removed(self, removed: BotRemoved) -> None:
        task = asyncio.get_running_loop().create_task(self.pinbot.handle(removed, SILENT))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn(self, event: FeishuMessage) -> None:
        task = asyncio.get_running_loop().create_task(self._record_logged(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record_logged(self, event: FeishuMessage) -> None:
        try:
            await self._record(event)
        except Exception:
            log.exception("could not record Feishu event %s", event.event_id)

    async def _record(self, event: FeishuMessage) -> bool:
        """Record an event to be processed in its chat's order, counted (bot.metrics) once:
        whether it was recorded (False for a repeated delivery, or one without an id). A
        message is known by its message_id, a card tap by its event id."""
        # Feishu may deliver one message again under a new event id; a tap's message_id is
        # the tapped card's, the same for every tap on it.
        tap = event.message_type == CARD_ACTION
        identity = event.event_id if tap else event.message_id
        if not identity:
            log.warning("a Feishu event without an event or message id was ignored")
            return False
        recorded = await self.inbox.receive(
            PLATFORM,
            identity,
            chat=delivery_chat(PLATFORM, event.chat_id or event.message_id),
            position=0,  # Feishu has no delivery sequence: arrival order it is
            payload=event.to_json(),
        )
        if recorded:
            metrics.update_received(PLATFORM, "tap" if tap else "message")
        return recorded

    async def _process_recorded(self, pending: PendingUpdate) -> list[Reply]:
        """Work out an event's answer, for the inbox to send (Unavailable, and nothing to send,
        when its processing could not be recorded)."""
        return await from_inbox(self._process(FeishuMessage.from_json(pending.payload)))

    async def _send_recorded(self, pending: PendingUpdate, replies: Sequence[Reply]) -> None:
        """Send a recorded event's answer: replies to its message, each under a uuid of its own
        that stays the same however often it is sent (Feishu shows it once)."""
        event = FeishuMessage.from_json(pending.payload)
        for number, reply in enumerate(replies):
            await self._reply(event, reply, number)

    async def _process(self, event: FeishuMessage) -> None:
        """Hand a recorded event to the core: a message, answered with a reply to it, or a card
        tap carried out (its outcome shows in the card: no reply)."""
        surface: Surface
        if event.message_type == CARD_ACTION:
            conversation = event.conversation()
            incoming = Incoming(
                conversation,
                event.content,
                mentioned=True,
                platform_admin=self._admin_lookup(conversation),
                redelivered=in_inbox(),
            )
            surface = SILENT
        else:
            raw = event.raw_text()  # None for images, audio, stickers, files: text only is read
            text, mentioned = resolve_mentions(raw or "", event.mentions, self.bot_open_id)
            conversation = event.conversation()
            incoming = Incoming(
                conversation,
                text if raw is not None else None,
                mentioned=mentioned,
                replied=self._replied_lookup(event.parent_id),
                platform_admin=self._admin_lookup(conversation),
                redelivered=in_inbox(),
                # A Feishu command cannot name its bot (no /pin@bot), and groups hold several.
                commands_for_bot=False,
                mentioned_users=mentioned_users(event.mentions, self.bot_open_id),
            )
            surface = ReplySurface(after_commit(functools.partial(self._reply, event)))
        await self.pinbot.handle(incoming, surface)

    def _admin_lookup(
        self, conversation: Conversation
    ) -> Callable[[], Awaitable[bool | None]] | None:
        """How the core asks whether the sender is the group's owner or one of its managers
        (None outside groups)."""
        chat = conversation.chat_id
        if conversation.kind is not ChatKind.GROUP or not chat or not conversation.sender_id:
            return None

        async def is_admin() -> bool | None:
            admins = await self._group_admins(chat)
            if admins is None:
                return None
            return any(sender in admins for sender in conversation.sender_ids)

        return is_admin

    async def _group_admins(self, chat_id: str) -> frozenset[str] | None:
        """A group's owner and managers, asked of Feishu (`GET im/v1/chats/:chat_id`) and
        trusted for `feishu.admin_cache_ttl_s`; None (logged, not kept) when Feishu cannot say."""
        now = self._monotonic()
        cached = self._admins.get(chat_id)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            chat = await self.api.chat(chat_id)
        except (FeishuApiError, httpx.HTTPError) as error:
            log.warning(
                "reading the owner and managers of Feishu chat %s failed (%s); %s",
                *(chat_id, error, ADMIN_PERMISSION_HINT),
            )
            return None
        admins = chat_admins(chat)
        if admins is None:
            log.warning(
                "Feishu did not name the owner and managers of chat %s (is the bot in it?)",
                chat_id,
            )
            return None
        if len(self._admins) >= MAX_ADMIN_CHATS:  # forget what is no longer trusted anyway
            self._admins = {k: v for k, v in self._admins.items() if v[1] > now}
        self._admins[chat_id] = (admins, now + self.config.admin_cache_ttl_s)
        return admins

    def _replied_lookup(self, parent_id: str | None) -> QuotedLookup | None:
        """The message an event replies to, fetched by its id only when a command needs it."""
        if not parent_id:
            return None

        async def lookup() -> Quoted:
            try:
                parent = await self.api.message(parent_id)
            except (FeishuApiError, httpx.HTTPError) as error:
                log.warning("reading Feishu message %s failed: %s", parent_id, error)
                return Quoted(None, parent_id, None, problem=unreadable_parent(error))
            return quoted_of(parent_id, parent)

        return lookup

    async def _reply(self, event: FeishuMessage, reply: Reply, number: int = 0) -> None:
        """Send reply (the number-th of the event's answer) as a reply to its message; what
        cannot go after the retries is logged and counted as lost."""
        key = f"{event.message_id}/{number}".encode()
        once = hashlib.sha1(key, usedforsecurity=False).hexdigest()
        try:
            await self.api.reply(event.message_id, self._shown(reply), once=once)
        except (FeishuApiError, httpx.HTTPError) as error:
            log.error(
                "the answer to Feishu message %s in chat %s (%d characters) was lost: %s",
                *(event.message_id, event.chat_id, len(reply.text), error),
            )
            metrics.reply_lost(PLATFORM)

    def _shown(self, reply: Reply) -> Reply:
        """The reply as Feishu shows it: the model's Markdown only with reply_format markdown."""
        if reply.formatted and self.config.reply_format != "markdown":
            return Reply(reply.text, reply.outcome)
        return reply

    async def send(self, chat: str, reply: Reply) -> Sent | None:
        """Post reply in a chat (its chat_id), split like any reply."""
        return await self.api.send(chat, self._shown(reply))

    async def edit(self, sent: Sent, reply: Reply) -> bool:
        """Replace the text of a message the bot sent."""
        return await self.api.edit(sent, self._shown(reply))

"""Feishu's OpenAPI as the bot uses it: one pooled async HTTP client with the tenant access token
fetched and refreshed on the event loop, replies as `post` messages (literal text, or the
model's Markdown built from styled text, link and code block elements, bot/adapters/
feishu_format.py, with a literal fallback), sending and editing messages. Calls that fail for a
reason that may pass are tried again; a message posted again carries the same `uuid`, which
Feishu takes as the same message (for an hour), so a retried post never shows twice."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import httpx

from bot.adapters.feishu_format import card_content, formatted_posts, post_content
from bot.adapters.kit import Reachability, Sent, formatted_or_plain
from bot.config import FeishuConfig
from bot.core.entry import Document, Reply, split_message

log = logging.getLogger(__name__)
Poster = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

# Feishu allows far longer texts; shorter parts stay readable on phones.
MESSAGE_LIMIT = 8000
TOKEN_REFRESH_MARGIN_S = 300
_EXPIRED_TOKEN_CODES = {99991661, 99991663, 99991668}  # Feishu's 'token invalid/expired'
DEFAULT_TOKEN_LIFETIME_S = 7200  # what Feishu grants when an answer leaves it out

# A call failing for a reason that may pass (a 5xx, 429, a dropped connection, a gateway's HTML
# page) is tried this many times in all, waiting RETRY_FIRST_S, then twice as long each time;
# a 429 waits what Feishu's x-ogw-ratelimit-reset says, up to RETRY_LONGEST_S.
CALL_ATTEMPTS = 4
RETRY_FIRST_S = 0.5
RETRY_LONGEST_S = 30.0
TOO_MANY_REQUESTS = 429

# Refusals about the chat (bot not in it, no permission, chat gone): plain text would not help.
CHAT_PROBLEM_CODES = {230002, 230006, 230013, 230017, 230027, 230035}


class FeishuApi:
    """The few OpenAPI calls the bot makes, over one pooled async HTTP client, with the tenant
    access token fetched and refreshed on the event loop without blocking it."""

    def __init__(
        self,
        config: FeishuConfig,
        app_secret: str,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._config = config
        self._app_secret = app_secret
        self._monotonic = monotonic
        self._sleep = sleep
        self._client = httpx.AsyncClient(
            base_url=config.base_url.rstrip("/"), timeout=config.request_timeout_s
        )
        self._token: str | None = None
        self._token_expires = 0.0
        self._token_lock = asyncio.Lock()
        self.reach = Reachability(monotonic)  # whether Feishu answers these calls

    @property
    def app_secret(self) -> str:
        """The app secret (for lark-oapi's long-connection client)."""
        return self._app_secret

    async def close(self) -> None:
        """Close the pooled connections."""
        await self._client.aclose()

    async def _tenant_token(self, *, force: bool = False) -> str:
        async with self._token_lock:
            if not force and self._token and self._monotonic() < self._token_expires:
                return self._token
            response = await self._request(
                "POST",
                "/open-apis/auth/v3/tenant_access_token/internal",
                json={"app_id": self._config.app_id, "app_secret": self._app_secret},
            )
            try:
                body = response.json()
            except ValueError:  # a gateway's HTML error page: worth another try later
                raise FeishuTransientError(
                    f"tenant token: HTTP {response.status_code} without a JSON answer"
                ) from None
            if response.status_code >= httpx.codes.INTERNAL_SERVER_ERROR:
                raise FeishuTransientError(f"tenant token: HTTP {response.status_code}")
            if body.get("code") != 0:
                raise FeishuCredentialsError(
                    f"Feishu refused the app credentials (code {body.get('code')}: "
                    f"{body.get('msg', '')}); check feishu.app_id and "
                    f"${self._config.app_secret_env}"
                )
            self._token = str(body["tenant_access_token"])
            expire = float(body.get("expire", DEFAULT_TOKEN_LIFETIME_S))
            self._token_expires = self._monotonic() + max(expire - TOKEN_REFRESH_MARGIN_S, 60)
            return self._token

    async def _request(self, method: str, path: str, **options: Any) -> httpx.Response:
        """One HTTP request to the OpenAPI, noted in reach: answered, or not (a network error,
        a timeout, a 5xx)."""
        try:
            response = await self._client.request(method, path, **options)
        except httpx.TransportError:  # timeouts included
            self.reach.failed()
            raise
        if response.status_code >= httpx.codes.INTERNAL_SERVER_ERROR:
            self.reach.failed()
        else:
            self.reach.answered()
        return response

    async def call(
        self,
        method: str,
        path: str,
        payload: dict[str, Any] | None = None,
        *,
        files: dict[str, tuple[str, bytes]] | None = None,
    ) -> dict[str, Any]:
        """One authorised call (payload as JSON, or with files as a multipart form), tried
        again (bounded, with backoff) while it fails for a reason that may pass; the last such
        failure is a FeishuTransientError."""
        for attempt in range(1, CALL_ATTEMPTS + 1):
            try:
                return await self._call_once(method, path, payload, files)
            except (FeishuTransientError, httpx.TransportError) as error:
                if attempt == CALL_ATTEMPTS:
                    raise FeishuTransientError(f"{error} ({attempt} attempts)") from error
                wait = getattr(error, "wait_s", None) or RETRY_FIRST_S * 2 ** (attempt - 1)
                log.warning(
                    "Feishu %s %s failed (%s); trying again in %.1f s",
                    *(method, path.split("?")[0], error or type(error).__name__, wait),
                )
                await self._sleep(min(wait, RETRY_LONGEST_S))
        raise AssertionError("unreachable")

    async def _call_once(
        self,
        method: str,
        path: str,
        payload: dict[str, Any] | None,
        files: dict[str, tuple[str, bytes]] | None = None,
    ) -> dict[str, Any]:
        """One authorised call; retried once with a fresh token if Feishu says it expired."""
        sending: dict[str, Any] = {"data": payload, "files": files} if files else {"json": payload}
        for attempt in (1, 2):
            token = await self._tenant_token(force=attempt == 2)
            response = await self._request(
                method, path, headers={"Authorization": f"Bearer {token}"}, **sending
            )
            failed = f"{method} {path.split('?')[0]}: HTTP {response.status_code}"
            if response.status_code == TOO_MANY_REQUESTS:
                reset = response.headers.get("x-ogw-ratelimit-reset", "")
                raise FeishuTransientError(failed, wait_s=float(reset) if reset.isdigit() else None)
            try:
                body = response.json()
            except ValueError:
                raise FeishuTransientError(f"{failed} without a JSON answer") from None
            code = body.get("code")
            if code == 0:
                return dict(body)
            if response.status_code >= httpx.codes.INTERNAL_SERVER_ERROR:
                raise FeishuTransientError(f"{failed}, code {code} {body.get('msg', '')}".strip())
            if code not in _EXPIRED_TOKEN_CODES:
                break
        raise FeishuApiError(f"{method} {path}: code {code} {body.get('msg', '')}".strip(), code)

    async def bot_open_id(self) -> str | None:
        """This app's bot open_id."""
        body = await self.call("GET", "/open-apis/bot/v3/info")
        bot = body.get("bot") or {}
        return bot.get("open_id") if isinstance(bot, dict) else None

    async def message(self, message_id: str) -> dict[str, Any]:
        """One message by its id, as `data.items[0]` of `GET im/v1/messages/:message_id`."""
        body = await self.call("GET", f"/open-apis/im/v1/messages/{message_id}")
        items = (body.get("data") or {}).get("items") or []
        if not items or not isinstance(items[0], dict):
            raise FeishuApiError(f"GET message {message_id}: no such message", None)
        return dict(items[0])

    async def chat(self, chat_id: str) -> dict[str, Any]:
        """A chat's information as `data` of `GET im/v1/chats/:chat_id`, people named by
        open_id (its owner_id and user_manager_id_list among them)."""
        path = f"/open-apis/im/v1/chats/{quote(chat_id, safe='')}?user_id_type=open_id"
        body = await self.call("GET", path)
        data = body.get("data")
        return dict(data) if isinstance(data, dict) else {}

    async def reply(self, message_id: str, reply: Reply, *, once: str) -> None:
        """Reply to a message, split into parts under the size limit, in order (a reply with
        buttons as one card; a document as a file message after the text). once names this
        reply (at most 40 characters): posted again with the same once, within the hour, no
        part shows twice."""
        path = f"/open-apis/im/v1/messages/{message_id}/reply"
        if reply.buttons is not None:  # one card, its buttons under its text
            card = {"msg_type": "interactive", "content": card_content(reply)}
            await self._poster(path, f"{once}-card")(card)
        else:
            for number, content in enumerate(self._contents(reply)):
                await content(self._poster(path, f"{once}-{number}"))
        if reply.document is not None:  # a file message has no caption: after the text
            file_key = await self.upload(reply.document)
            post = self._poster(path, f"{once}-file")
            await post({"msg_type": "file", "content": json.dumps({"file_key": file_key})})

    async def upload(self, document: Document) -> str:
        """Upload a file for a file message; its file_key."""
        answer = await self.call(
            "POST",
            "/open-apis/im/v1/files",
            {"file_type": "stream", "file_name": document.name},
            files={"file": (document.name, document.data)},
        )
        file_key = (answer.get("data") or {}).get("file_key")
        if not file_key:
            raise FeishuApiError("upload: no file_key in Feishu's answer", None)
        return str(file_key)

    async def send(self, chat_id: str, reply: Reply) -> Sent | None:
        """Post a reply in a chat (one card when it has buttons); the first message sent."""
        path = "/open-apis/im/v1/messages?receive_id_type=chat_id"
        once = uuid.uuid4().hex
        if reply.buttons is not None:
            body = {"msg_type": "interactive", "content": card_content(reply)}
            answer = await self.call("POST", path, {**body, "receive_id": chat_id, "uuid": once})
            message_id = str((answer.get("data") or {}).get("message_id") or "")
            return Sent(chat_id, message_id) if message_id else None
        first: str | None = None
        for number, content in enumerate(self._contents(reply)):
            answer = await content(self._poster(path, f"{once}-{number}", receive_id=chat_id))
            first = first or str((answer.get("data") or {}).get("message_id") or "")
        return Sent(chat_id, first) if first else None

    def _poster(self, path: str, once: str, **fields: str) -> Poster:
        """Posts a message body to path with fields and Feishu's `uuid` once added (the same
        message posted again shows once): a part's formatted form and its literal fallback carry
        the same one, as only one of them can have been posted."""

        async def post(body: dict[str, Any]) -> dict[str, Any]:
            return await self.call("POST", path, {**body, **fields, "uuid": once})

        return post

    async def edit(self, sent: Sent, reply: Reply) -> bool:
        """Replace a sent message's content with the reply's first part."""
        path = f"/open-apis/im/v1/messages/{sent.message_id}"
        if reply.buttons is not None:  # a card: changed with PATCH, for everyone in the chat
            try:
                await self.call("PATCH", path, {"content": card_content(reply)})
            except (FeishuApiError, httpx.HTTPError) as error:
                log.warning("updating Feishu card %s failed: %s", sent.message_id, error)
                return False
            return True
        contents = self._contents(reply)
        if not contents:
            return False
        try:
            await contents[0](lambda body: self.call("PUT", path, body))
        except (FeishuApiError, httpx.HTTPError) as error:
            log.warning("editing Feishu message %s failed: %s", sent.message_id, error)
            return False
        return True

    def _contents(self, reply: Reply) -> list[Callable[[Poster], Awaitable[dict[str, Any]]]]:
        """Each part of a reply as a function that posts it with the poster given: literal text,
        or (formatted) a styled post sent again as literal text if Feishu refuses it."""

        def literal(part: str) -> Callable[[Poster], Awaitable[dict[str, Any]]]:
            return lambda post: post({"msg_type": "post", "content": post_content(part)})

        def formatted(content: str, plain: str) -> Callable[[Poster], Awaitable[dict[str, Any]]]:
            async def send(post: Poster) -> dict[str, Any]:
                return await formatted_or_plain(
                    lambda: post({"msg_type": "post", "content": content}),
                    lambda: literal(plain)(post),
                    refused_formatting=_refused_formatting,
                    where="a Feishu reply",
                )

            return send

        if reply.formatted:
            return [formatted(*post) for post in formatted_posts(reply.text, MESSAGE_LIMIT)]
        return [literal(part) for part in split_message(reply.text, MESSAGE_LIMIT) if part.strip()]


def _refused_formatting(error: Exception) -> bool:
    """Whether Feishu refused a formatted post for its content (not the chat, not a passing
    fault): then it goes again as literal text."""
    return (
        isinstance(error, FeishuApiError)
        and not isinstance(error, FeishuTransientError)
        and error.code not in CHAT_PROBLEM_CODES
    )


class FeishuApiError(Exception):
    """Feishu refused a call; the message carries its code, never a secret."""

    def __init__(self, message: str, code: object = None) -> None:
        super().__init__(message)
        self.code = code


class FeishuCredentialsError(FeishuApiError):
    """Feishu refused the app id and secret: waiting will not help."""


class FeishuTransientError(FeishuApiError):
    """Feishu (or a gateway before it) failed in a way that waiting may fix; wait_s: how long
    Feishu asked to wait, if it said."""

    def __init__(self, message: str, code: object = None, *, wait_s: float | None = None) -> None:
        super().__init__(message, code)
        self.wait_s = wait_s

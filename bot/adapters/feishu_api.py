"""Feishu's OpenAPI as the bot uses it: one pooled async HTTP client with the tenant access token
fetched and refreshed on the event loop, replies as `post` messages (literal text, or the
model's Markdown built from styled text, link and code block elements, bot/adapters/
feishu_format.py, with a literal fallback), sending and editing messages."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from bot.adapters.feishu_format import card_content, formatted_posts, post_content
from bot.adapters.kit import Reachability, Sent, formatted_or_plain
from bot.config import FeishuConfig
from bot.core.entry import Reply, split_message

log = logging.getLogger(__name__)
Poster = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

# Feishu allows far longer texts; shorter parts stay readable on phones.
MESSAGE_LIMIT = 8000
TOKEN_REFRESH_MARGIN_S = 300
_EXPIRED_TOKEN_CODES = {99991661, 99991663, 99991668}  # Feishu's 'token invalid/expired'
DEFAULT_TOKEN_LIFETIME_S = 7200  # what Feishu grants when an answer leaves it out

# Refusals about the chat (bot not in it, no permission, chat gone): plain text would not help.
CHAT_PROBLEM_CODES = {230002, 230006, 230013, 230017, 230027, 230035}


class FeishuApi:
    """The few OpenAPI calls the bot makes, over one pooled async HTTP client, with the tenant
    access token fetched and refreshed on the event loop without blocking it."""

    def __init__(
        self, config: FeishuConfig, app_secret: str, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._config = config
        self._app_secret = app_secret
        self._monotonic = monotonic
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
        self, method: str, path: str, payload: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One authorised call; retried once with a fresh token if Feishu says it expired."""
        for attempt in (1, 2):
            token = await self._tenant_token(force=attempt == 2)
            response = await self._request(
                method, path, json=payload, headers={"Authorization": f"Bearer {token}"}
            )
            try:
                body = response.json()
            except ValueError:
                raise FeishuTransientError(
                    f"{method} {path}: HTTP {response.status_code} without a JSON answer"
                ) from None
            code = body.get("code")
            if code == 0:
                return dict(body)
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

    async def reply(self, message_id: str, reply: Reply) -> None:
        """Reply to a message, split into parts under the size limit, in order."""
        path = f"/open-apis/im/v1/messages/{message_id}/reply"
        for content in self._contents(reply):
            await content(lambda body: self.call("POST", path, body))

    async def send(self, chat_id: str, reply: Reply) -> Sent | None:
        """Post a reply in a chat (one card when it has buttons); the first message sent."""
        path = "/open-apis/im/v1/messages?receive_id_type=chat_id"
        if reply.buttons is not None:
            body = {"msg_type": "interactive", "content": card_content(reply)}
            answer = await self.call("POST", path, {**body, "receive_id": chat_id})
            message_id = str((answer.get("data") or {}).get("message_id") or "")
            return Sent(chat_id, message_id) if message_id else None
        first: str | None = None
        for content in self._contents(reply):
            answer = await content(
                lambda body: self.call("POST", path, {**body, "receive_id": chat_id})
            )
            first = first or str((answer.get("data") or {}).get("message_id") or "")
        return Sent(chat_id, first) if first else None

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
    """Feishu (or a gateway before it) failed in a way that waiting may fix."""

"""A fake Feishu OpenAPI server on 127.0.0.1 (tenant token, bot info, messages, chats) that records
every call, and builders of real-format `im.message.receive_v1` event payloads."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import os
from collections.abc import Callable
from typing import Any

from aiohttp import web
from Crypto.Cipher import AES

from tests.fakes.http import serve

APP_ID = "cli_test_app"
APP_SECRET = "feishu-app-secret-value"
VERIFICATION_TOKEN = "verify-token-value"
BOT_OPEN_ID = "ou_bot_0001"


class FakeFeishu:
    """Serves the OpenAPI paths the bot uses; `replies` holds each reply call received."""

    def __init__(self) -> None:
        self.token_requests: list[dict[str, Any]] = []
        self.replies: list[dict[str, Any]] = []
        self.posted: list[dict[str, Any]] = []  # messages sent to a chat, not as a reply
        self.edits: list[dict[str, Any]] = []
        self.card_updates: list[dict[str, Any]] = []  # PATCH im/v1/messages/:id (cards)
        self.auth_headers: list[str] = []
        self.reply_errors: list[dict[str, Any]] = []  # Feishu's refusals (HTTP 200), in order
        # Replies that fail as a gateway or Feishu does (status, body: JSON, or a page of HTML
        # text), in order; landed: the reply was posted before the failure came back.
        self.reply_failures: list[tuple[int, dict[str, Any] | str, bool]] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # file_key → (file_name, bytes) uploaded
        self.uuids: dict[str, str] = {}  # Feishu's uuid of a message posted → its message_id
        # Called with each call's path as it arrives and again once it is answered (a crash
        # test kills the bot there); True as it arrives: the call is dropped, never carried out.
        self.on_call: Callable[[str], bool] | None = None
        self.tokens = itertools.count(1)
        self.current_token = ""
        self.token_failures: list[int] = []  # statuses to answer with an HTML page, in order
        self.messages: dict[str, dict[str, Any]] = {}  # what GET im/v1/messages/:id finds
        self.denied_reads: set[str] = set()  # message ids read as without permission
        self.post_failures: list[int] = []  # statuses to answer posts to a chat with, in order
        self.slept: list[float] = []  # what a frontend under test waited, for its tests to read
        self.down = False  # every call answered 502 Bad Gateway (an outage) while set
        # What GET im/v1/chats/:chat_id finds: chat_id → (owner's open_id, managers' open_ids).
        self.chats: dict[str, tuple[str, list[str]]] = {}
        self.chat_reads: list[str] = []  # the chat_id of each such call, in order
        self.denied_chats: set[str] = set()  # read as by an app without im:chat:readonly
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.token_requests.append(body)
        if self.token_failures:
            status = self.token_failures.pop(0)
            page = f"<html><body><h1>{status} Bad Gateway</h1></body></html>"
            return web.Response(text=page, status=status, content_type="text/html")
        if body != {"app_id": APP_ID, "app_secret": APP_SECRET}:
            return web.json_response({"code": 10014, "msg": "app secret invalid"})
        self.current_token = f"t-token-{next(self.tokens)}"
        return web.json_response(
            {"code": 0, "msg": "ok", "expire": 7200, "tenant_access_token": self.current_token}
        )

    def _authorised(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        self.auth_headers.append(header)
        return header == f"Bearer {self.current_token}"

    async def _bot_info(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"code": 99991663, "msg": "invalid token"})
        return web.json_response(
            {
                "code": 0,
                "msg": "ok",
                "bot": {"activate_status": 2, "app_name": "pinbot", "open_id": BOT_OPEN_ID},
            }
        )

    async def _reply(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"code": 99991663, "msg": "invalid access token"})
        body = await request.json()
        if self.reply_errors:
            return web.json_response(self.reply_errors.pop(0))
        failure = self.reply_failures.pop(0) if self.reply_failures else None
        if failure is None or failure[2]:
            to = {"message_id": request.match_info["message_id"]}
            sent = self._posted_once(self.replies, {**to, **body}, "om_reply")
            async with self._changed:
                self._changed.notify_all()
        if failure is not None:
            status, answer, _ = failure
            if isinstance(answer, str):
                return web.Response(status=status, text=answer, content_type="text/html")
            return web.json_response(answer, status=status)
        return web.json_response({"code": 0, "msg": "success", "data": {"message_id": sent}})

    def _posted_once(self, into: list[dict[str, Any]], body: dict[str, Any], prefix: str) -> str:
        """Post a message (append it to into): its message_id. Unless one with the same uuid
        was posted: Feishu then answers with that one's id and posts nothing (its deduplication
        of the `uuid` field, for an hour)."""
        once = body.get("uuid")
        if once and once in self.uuids:
            return self.uuids[once]
        into.append(body)
        message_id = f"{prefix}_{len(into)}"
        if once:
            self.uuids[once] = message_id
        return message_id

    async def _post(self, request: web.Request) -> web.Response:
        """im/v1/messages: a message sent to a chat (receive_id_type=chat_id)."""
        if not self._authorised(request):
            return web.json_response({"code": 99991663, "msg": "invalid access token"})
        if request.query.get("receive_id_type") != "chat_id":
            return web.json_response({"code": 99992402, "msg": "field validation failed"})
        if self.post_failures:
            status = self.post_failures.pop(0)
            return web.json_response({"code": 1, "msg": "internal error"}, status=status)
        message_id = self._posted_once(self.posted, await request.json(), "om_sent")
        return web.json_response({"code": 0, "msg": "success", "data": {"message_id": message_id}})

    async def _upload(self, request: web.Request) -> web.Response:
        """im/v1/files: a file uploaded (multipart: file_type, file_name, file) for a file
        message."""
        if not self._authorised(request):
            return web.json_response({"code": 99991663, "msg": "invalid access token"})
        form = await request.post()
        upload = form.get("file")
        if form.get("file_type") != "stream" or not isinstance(upload, web.FileField):
            return web.json_response({"code": 234001, "msg": "invalid request param"})
        file_key = f"file_v2_{len(self.files) + 1}"
        self.files[file_key] = (str(form.get("file_name")), upload.file.read())
        return web.json_response({"code": 0, "msg": "success", "data": {"file_key": file_key}})

    async def _edit(self, request: web.Request) -> web.Response:
        """im/v1/messages/:message_id (PUT): a sent text or post message edited."""
        if not self._authorised(request):
            return web.json_response({"code": 99991663, "msg": "invalid access token"})
        self.edits.append({"message_id": request.match_info["message_id"], **await request.json()})
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    def add_message(
        self,
        message_id: str,
        text: str,
        *,
        sender: str = "ou_user2",
        msg_type: str = "text",
        mentions: list[dict[str, Any]] | None = None,
    ) -> None:
        """A message in a chat that the bot can fetch by its id (text, or post content given
        as its JSON)."""
        content = json.dumps({"text": text}, ensure_ascii=False) if msg_type == "text" else text
        self.messages[message_id] = {
            "message_id": message_id,
            "msg_type": msg_type,
            "create_time": "1767225600000",
            "deleted": False,
            "chat_id": "oc_group1",
            "sender": {"id": sender, "id_type": "open_id", "sender_type": "user"},
            "body": {"content": content},
            "mentions": [
                {"key": m["key"], "id": m["id"]["open_id"], "id_type": "open_id", "name": m["name"]}
                for m in mentions or []
            ],
        }

    async def _message(self, request: web.Request) -> web.Response:
        """im/v1/messages/:message_id (GET): one message, as `data.items`."""
        if not self._authorised(request):
            return web.json_response({"code": 99991663, "msg": "invalid access token"})
        message_id = request.match_info["message_id"]
        if message_id in self.denied_reads:
            return web.json_response(
                {"code": 230027, "msg": "Lack of necessary permissions"}, status=400
            )
        if message_id not in self.messages:
            return web.json_response({"code": 230001, "msg": "message not found"}, status=400)
        return web.json_response(
            {"code": 0, "msg": "success", "data": {"items": [self.messages[message_id]]}}
        )

    def add_chat(self, chat_id: str, owner: str, managers: list[str] | None = None) -> None:
        """A group the bot is in, with its owner and its managers (open_ids)."""
        self.chats[chat_id] = (owner, list(managers or []))

    async def _chat(self, request: web.Request) -> web.Response:
        """im/v1/chats/:chat_id (GET): a chat's information, people named by the
        user_id_type asked (open_id by default; the only one this fake knows). A chat it does
        not know is one the bot is not in: then only its name, avatar and counts, as Feishu
        answers an app outside a chat."""
        if not self._authorised(request):
            return web.json_response({"code": 99991663, "msg": "invalid access token"})
        chat_id = request.match_info["chat_id"]
        self.chat_reads.append(chat_id)
        if request.query.get("user_id_type", "open_id") != "open_id":
            return web.json_response(
                {"code": 99992402, "msg": "field validation failed"}, status=400
            )
        if chat_id in self.denied_chats:
            scopes = "[im:chat:readonly, im:chat, im:chat:read]"
            return web.json_response(
                {
                    "code": 99991672,
                    "msg": f"Access denied. One of the following scopes is required: {scopes}.",
                    "error": {"log_id": "2026120600000000000000000000000000"},
                },
                status=400,
            )
        data: dict[str, Any] = {
            "avatar": "https://s1-imfile.feishucdn.com/static-resource/v1/default-avatar",
            "name": "Team",
            "user_count": "3",
            "bot_count": "1",
            "chat_status": "normal",
        }
        if chat_id in self.chats:
            owner, managers = self.chats[chat_id]
            data |= {
                "description": "",
                "i18n_names": {"zh_cn": "", "en_us": "", "ja_jp": ""},
                "add_member_permission": "all_members",
                "share_card_permission": "allowed",
                "at_all_permission": "all_members",
                "edit_permission": "all_members",
                "owner_id_type": "open_id",
                "owner_id": owner,
                "user_manager_id_list": managers,
                "bot_manager_id_list": [],
                "chat_mode": "group",
                "chat_type": "private",
                "chat_tag": "inner",
                "join_message_visibility": "all_members",
                "leave_message_visibility": "all_members",
                "membership_approval": "no_approval_required",
                "moderation_permission": "all_members",
                "external": False,
                "tenant_key": "tenant_1",
                "urgent_setting": "all_members",
                "video_conference_setting": "all_members",
                "pin_manage_setting": "all_members",
                "hide_member_count_setting": "all_members",
            }
        return web.json_response({"code": 0, "msg": "success", "data": data})

    async def _patch(self, request: web.Request) -> web.Response:
        """im/v1/messages/:message_id (PATCH): a sent card updated for everyone."""
        if not self._authorised(request):
            return web.json_response({"code": 99991663, "msg": "invalid access token"})
        body = await request.json()
        self.card_updates.append({"message_id": request.match_info["message_id"], **body})
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 10) -> None:
        """Wait until condition holds after some reply (a safety timeout only, never a pause)."""

        async def waiter() -> None:
            async with self._changed:
                await self._changed.wait_for(condition)

        await asyncio.wait_for(waiter(), timeout)

    async def wait_for_replies(self, count: int, timeout: float = 10) -> None:
        async def waiter() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.replies) >= count)

        await asyncio.wait_for(waiter(), timeout)

    def texts(self, messages: list[dict[str, Any]] | None = None) -> list[str]:
        """Each reply's text (or each of messages'), read back from its post content."""
        result = []
        for reply in self.replies if messages is None else messages:
            if reply.get("msg_type") == "file":
                continue  # a file message (files holds the file): no text
            if reply.get("msg_type") == "interactive":
                result.append(card_text(reply["content"]))
                continue
            post = json.loads(reply["content"])["zh_cn"]["content"]
            result.append("\n".join("".join(e["text"] for e in line) for line in post))
        return result

    @web.middleware
    async def _outage(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.down:
            return web.Response(status=502, text="<html>Bad Gateway</html>")
        if self.on_call is not None and self.on_call(request.path):
            return web.Response(status=502, text="<html>Bad Gateway</html>")
        response: web.StreamResponse = await handler(request)
        if self.on_call is not None:
            self.on_call(request.path)
        return response

    async def start(self) -> FakeFeishu:
        app = web.Application(middlewares=[self._outage])
        app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        app.router.add_get("/open-apis/bot/v3/info", self._bot_info)
        app.router.add_post("/open-apis/im/v1/messages/{message_id}/reply", self._reply)
        app.router.add_post("/open-apis/im/v1/messages", self._post)
        app.router.add_post("/open-apis/im/v1/files", self._upload)
        app.router.add_put("/open-apis/im/v1/messages/{message_id}", self._edit)
        app.router.add_get("/open-apis/im/v1/messages/{message_id}", self._message)
        app.router.add_patch("/open-apis/im/v1/messages/{message_id}", self._patch)
        app.router.add_get("/open-apis/im/v1/chats/{chat_id}", self._chat)
        self._runner, self.port = await serve(app)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


_ids = itertools.count(1)


def receive_event(
    text: str | None,
    *,
    chat_type: str = "p2p",
    chat_id: str = "oc_chat1",
    open_id: str | None = "ou_user1",
    user_id: str = "u_user1",
    union_id: str = "on_user1",
    mentions: list[dict[str, Any]] | None = None,
    thread_id: str = "",
    root_id: str = "",
    parent_id: str | None = None,
    event_id: str | None = None,
    token: str = VERIFICATION_TOKEN,
    message_type: str = "text",
    content: str | None = None,
) -> dict[str, Any]:
    """An `im.message.receive_v1` event as Feishu POSTs it (schema 2.0)."""
    number = next(_ids)
    sender_id = {"union_id": union_id, "user_id": user_id, "open_id": open_id}
    if open_id is None:
        del sender_id["open_id"]
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or f"ev_{number}",
            "token": token,
            "create_time": "1767225600000",
            "event_type": "im.message.receive_v1",
            "tenant_key": "tenant_1",
            "app_id": APP_ID,
        },
        "event": {
            "sender": {"sender_id": sender_id, "sender_type": "user", "tenant_key": "tenant_1"},
            "message": {
                "message_id": f"om_{number}",
                "root_id": root_id,
                "parent_id": root_id if parent_id is None else parent_id,
                "create_time": "1767225600000",
                "update_time": "1767225600000",
                "chat_id": chat_id,
                "thread_id": thread_id,
                "chat_type": chat_type,
                "message_type": message_type,
                "content": content
                if content is not None
                else json.dumps({"text": text}, ensure_ascii=False),
                "mentions": mentions or [],
                "user_agent": "Mozilla/5.0",
            },
        },
    }


def card_action(
    value: dict[str, Any],
    *,
    open_id: str,
    user_id: str = "",
    chat_id: str = "oc_group",
    message_id: str = "om_card",
    event_id: str | None = None,
    token: str = VERIFICATION_TOKEN,
) -> dict[str, Any]:
    """A `card.action.trigger` callback as Feishu POSTs it when a card button is tapped."""
    number = next(_ids)
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or f"ev_card_{number}",
            "token": token,
            "create_time": "1767225600000",
            "event_type": "card.action.trigger",
            "tenant_key": "tenant_1",
            "app_id": APP_ID,
        },
        "event": {
            "operator": {"tenant_key": "tenant_1", "user_id": user_id, "open_id": open_id},
            "token": f"c-{number}",
            "action": {"value": value, "tag": "button"},
            "host": "im_message",
            "context": {"open_message_id": message_id, "open_chat_id": chat_id},
        },
    }


def card_text(content: str) -> str:
    """The text of a card the bot sent (its first element)."""
    return str(json.loads(content)["elements"][0]["text"]["content"])


def mention(key: str, open_id: str, name: str) -> dict[str, Any]:
    return {
        "key": key,
        "id": {"union_id": f"on_{name}", "user_id": f"u_{name}", "open_id": open_id},
        "name": name,
        "tenant_key": "tenant_1",
    }


def url_verification(
    token: str = VERIFICATION_TOKEN, challenge: str = "challenge-code-123"
) -> dict[str, Any]:
    return {"challenge": challenge, "token": token, "type": "url_verification"}


def encrypt(payload: dict[str, Any], key: str) -> dict[str, str]:
    """The `{"encrypt": …}` body Feishu sends when an encrypt key is set (AES-256-CBC)."""
    plain = json.dumps(payload).encode()
    pad = AES.block_size - len(plain) % AES.block_size
    iv = os.urandom(AES.block_size)
    cipher = AES.new(hashlib.sha256(key.encode()).digest(), AES.MODE_CBC, iv)
    data = iv + cipher.encrypt(plain + bytes([pad]) * pad)
    return {"encrypt": base64.b64encode(data).decode()}


def signature_headers(
    body: bytes, key: str, timestamp: str = "1767225600", nonce: str = "n0nce"
) -> dict[str, str]:
    digest = hashlib.sha256((timestamp + nonce + key).encode() + body).hexdigest()
    return {
        "X-Lark-Request-Timestamp": timestamp,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": digest,
    }

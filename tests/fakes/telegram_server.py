"""A fake Telegram Bot API server on 127.0.0.1 that speaks the real wire format (form-encoded
requests with JSON-encoded values, `{"ok": …, "result": …}` answers) and records every call."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.fakes.http import serve

BOT_USER = {
    "id": 999,
    "is_bot": True,
    "first_name": "Pin",
    "username": "pin_bot",
    "can_join_groups": True,
    "can_read_all_group_messages": False,
    "supports_inline_queries": False,
}
TOKEN = "123456:TEST-TOKEN-SECRET"
ADMIN_RIGHTS = {
    name: True
    for name in (
        "can_be_edited",
        "can_manage_chat",
        "can_delete_messages",
        "can_manage_video_chats",
        "can_restrict_members",
        "can_promote_members",
        "can_change_info",
        "can_invite_users",
        "can_post_stories",
        "can_edit_stories",
        "can_delete_stories",
    )
}


class FakeTelegram:
    """Serves /bot<token>/<method>. Queue updates with `push`; read calls from `calls`."""

    def __init__(self) -> None:
        self.pinned: dict[int, dict[str, Any] | None] = {}  # getChat's pinned_message
        self.pinned_all: dict[int, list[dict[str, Any]]] = {}  # pin_message's, per chat
        self.calls: list[tuple[str, dict[str, Any]]] = []  # answered successfully
        self.arrived: list[float] = []  # when each of calls arrived, by clock
        self.clock: Callable[[], float] = time.perf_counter  # a test may set its fake one
        self.returned: list[tuple[str, dict[str, Any], Any]] = []  # each call and its result
        self.failed: list[tuple[str, dict[str, Any]]] = []
        self.updates: list[dict[str, Any]] = []
        self.chat_types: dict[int, str] = {}
        self.admins: set[tuple[int, int]] = set()  # (chat, user): getChatMember's administrators
        self.owners: set[tuple[int, int]] = set()  # (chat, user): getChatMember's creator
        self.failures: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.hold: dict[str, asyncio.Event] = {}
        self.first_sent_at: dict[int, float] = {}  # chat id → when the first reply arrived
        self.pushed_at: dict[int, float] = {}  # chat id → when /_control/push queued its update
        self.confirmed = 0  # the highest update_id the bot has confirmed receiving
        self.one_way_s = 0.0  # network delay each way of every call but getUpdates (benchmark)
        # Called with each call's method as it is answered (a crash test kills the bot there).
        self.on_call: Callable[[str], object] | None = None
        self._ids = itertools.count(1)
        self._update_ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self._stopping = False  # set by stop: a long poll still waiting is answered at once
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates; assigns its update_id."""
        update = {"update_id": next(self._update_ids), **update}
        for key in ("message", "edited_message", "channel_post"):
            if key in update:
                chat = update[key]["chat"]
                self.chat_types[chat["id"]] = chat["type"]
        self.updates.append(update)
        asyncio.get_running_loop().create_task(self._notify())
        return update

    def pin_message(self, update: dict[str, Any]) -> dict[str, Any]:
        """A pinned_message service update as Telegram posts it when someone pins a message in a
        group (several may stand pinned at once): getChat names the most recent pinned message
        "by sending date" from then on. Returns update, to push."""
        pinned = update["message"]["pinned_message"]
        chat = pinned["chat"]["id"]
        standing = [
            m for m in self.pinned_all.get(chat, []) if m["message_id"] != pinned["message_id"]
        ]
        self._pinned_now(chat, [*standing, pinned])
        return update

    def unpin_message(self, chat: int, message_id: int | None = None) -> None:
        """Someone unpins one message (None: all of them); Telegram posts no update for it."""
        standing = self.pinned_all.get(chat, [])
        self._pinned_now(
            chat, [m for m in standing if message_id is not None and m["message_id"] != message_id]
        )

    def _pinned_now(self, chat: int, standing: list[dict[str, Any]]) -> None:
        self.pinned_all[chat] = standing
        newest = max(standing, key=lambda m: (m["date"], m["message_id"]), default=None)
        self.pinned[chat] = newest

    def fail(self, method: str, status: int, description: str, **parameters: Any) -> None:
        """Make the next call of method fail with this Bot API error."""
        body = {"ok": False, "error_code": status, "description": description}
        if parameters:
            body["parameters"] = parameters
        self.failures.setdefault(method, []).append((status, body))

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def sent(self, chat_id: int | None = None) -> list[dict[str, Any]]:
        """Every sendMessage call (to chat_id, if given), in order."""
        return [
            params
            for method, params in self.calls
            if method == "sendMessage" and (chat_id is None or params.get("chat_id") == chat_id)
        ]

    def results(self, method: str) -> list[tuple[dict[str, Any], Any]]:
        """(params, result) of each successful call of method, in order."""
        return [(params, result) for name, params, result in self.returned if name == method]

    def called(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 10) -> None:
        """Wait until condition holds after some call (a safety timeout only, never a pause)."""

        async def waiter() -> None:
            async with self._changed:
                await self._changed.wait_for(condition)

        await asyncio.wait_for(waiter(), timeout)

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            loaded = await request.json()
            return dict(loaded) if isinstance(loaded, dict) else {}
        form = await request.post()
        params: dict[str, Any] = {}
        for key, value in form.items():
            if isinstance(value, web.FileField):  # an uploaded file: its name and bytes
                params[key] = {"filename": value.filename, "data": value.file.read()}
                continue
            try:
                params[key] = json.loads(str(value))
            except json.JSONDecodeError:
                params[key] = str(value)
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != TOKEN:
            return web.json_response(
                {"ok": False, "error_code": 404, "description": "Not Found"}, status=404
            )
        method = request.match_info["method"]
        params = await self._params(request)
        delayed = self.one_way_s if method != "getUpdates" else 0.0
        if delayed:  # the request's way to Telegram; the answer's way back is below
            await asyncio.sleep(delayed)
        if method in self.hold:
            await self.hold[method].wait()
        if self.failures.get(method):
            status, body = self.failures[method].pop(0)
            self.failed.append((method, params))
            return web.json_response(body, status=status)
        if method != "getUpdates":
            self.calls.append((method, params))
            self.arrived.append(self.clock())
            if method == "sendMessage":
                self.first_sent_at.setdefault(int(params["chat_id"]), time.perf_counter())
            await self._notify()
        result = await self._result(method, params)
        if method != "getUpdates":
            self.returned.append((method, params, result))
        if self.on_call is not None:
            self.on_call(method)
        if delayed:
            await asyncio.sleep(delayed)
        return web.json_response({"ok": True, "result": result})

    async def _result(self, method: str, params: dict[str, Any]) -> Any:
        if method == "getMe":
            return BOT_USER
        if method == "getUpdates":
            return await self._get_updates(params)
        if method in ("sendMessage", "editMessageText"):
            chat_id = int(params["chat_id"])
            return {
                "message_id": next(self._ids),
                "date": 0,
                "from": BOT_USER,
                "chat": {"id": chat_id, "type": self.chat_types.get(chat_id, "private")},
                "text": params.get("text", ""),
            }
        if method == "sendDocument":
            chat_id = int(params["chat_id"])
            upload = params.get("document") or {}
            return {
                "message_id": next(self._ids),
                "date": 0,
                "from": BOT_USER,
                "chat": {"id": chat_id, "type": self.chat_types.get(chat_id, "private")},
                "caption": params.get("caption", ""),
                "document": {
                    "file_id": f"doc{chat_id}",
                    "file_unique_id": f"doc{chat_id}",
                    "file_name": upload.get("filename") if isinstance(upload, dict) else None,
                },
            }
        if method == "getChat":
            chat_id = int(params["chat_id"])
            full: dict[str, Any] = {
                "id": chat_id,
                "type": self.chat_types.get(chat_id, "supergroup"),
                "title": "Group",
                "accent_color_id": 0,
                "max_reaction_count": 11,
                "accepted_gift_types": {
                    "unlimited_gifts": False,
                    "limited_gifts": False,
                    "unique_gifts": False,
                    "premium_subscription": False,
                    "gifts_from_channels": False,
                },
            }
            if self.pinned.get(chat_id) is not None:
                full["pinned_message"] = self.pinned[chat_id]
            return full
        if method == "getChatMember":
            chat_id, user_id = int(params["chat_id"]), int(params["user_id"])
            user = {"id": user_id, "is_bot": False, "first_name": "U"}
            if (chat_id, user_id) in self.owners:
                return {"status": "creator", "user": user, "is_anonymous": False}
            if (chat_id, user_id) in self.admins:
                return {
                    "status": "administrator",
                    "user": user,
                    "is_anonymous": False,
                    **ADMIN_RIGHTS,
                }
            return {"status": "member", "user": user}
        return True

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        self.confirmed = max(self.confirmed, offset - 1)
        await self._notify()

        limit = int(params.get("limit") or 100)  # Telegram hands out at most 100 at once

        def pending() -> list[dict[str, Any]]:
            return [u for u in self.updates if u["update_id"] >= offset][:limit]

        if not pending() and float(params.get("timeout") or 0) > 0:
            # Answer early when nothing comes: Telegram may, and it keeps shutdowns quick. A
            # poll still waiting when the server stops (its client gone) is answered then, or
            # stopping would wait for it.
            async with self._changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._changed.wait_for(lambda: bool(pending()) or self._stopping), 0.2
                    )
        return pending()

    async def _control_push(self, request: web.Request) -> web.Response:
        """Queue the POSTed updates (for a benchmark driving this server from another process)."""
        for update in await request.json():
            pushed = self.push(update)
            chat = next(iter(v for k, v in pushed.items() if k != "update_id"))["chat"]["id"]
            self.pushed_at.setdefault(int(chat), time.perf_counter())
        return web.json_response({"ok": True})

    async def _control_counts(self, request: web.Request) -> web.Response:
        """How many successful calls of each Bot API method arrived."""
        counts: dict[str, int] = {}
        for method, _ in self.calls:
            counts[method] = counts.get(method, 0) + 1
        return web.json_response(counts)

    async def _control_calls(self, request: web.Request) -> web.Response:
        """The successful calls but getUpdates from number `since` on, in order: method,
        parameters and arrival time (perf_counter, the system's monotonic clock: comparable
        across processes)."""
        since = int(request.query.get("since", "0"))
        return web.json_response(
            [
                {"method": method, "params": params, "at": at}
                for (method, params), at in zip(
                    self.calls[since:], self.arrived[since:], strict=True
                )
            ]
        )

    async def _control_times(self, request: web.Request) -> web.Response:
        """For each chat: when its first update was pushed and its first reply arrived."""
        return web.json_response(
            {
                str(chat): [self.pushed_at.get(chat), sent]
                for chat, sent in self.first_sent_at.items()
            }
        )

    async def start(self, port: int = 0) -> FakeTelegram:
        app = web.Application()
        app.router.add_post("/_control/push", self._control_push)
        app.router.add_get("/_control/times", self._control_times)
        app.router.add_get("/_control/counts", self._control_counts)
        app.router.add_get("/_control/calls", self._control_calls)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        self._stopping = False
        self._runner, self.port = await serve(app, port)
        return self

    async def stop(self) -> None:
        self._stopping = True
        await self._notify()
        if self._runner is not None:
            await self._runner.cleanup()


# --- real-format updates ------------------------------------------------------------------------


def user(uid: int, name: str = "User") -> dict[str, Any]:
    return {"id": uid, "is_bot": False, "first_name": name}


def private_chat(uid: int) -> dict[str, Any]:
    return {"id": uid, "type": "private", "first_name": "User"}


def group_chat(chat_id: int, kind: str = "supergroup", forum: bool = False) -> dict[str, Any]:
    chat: dict[str, Any] = {"id": chat_id, "type": kind, "title": "Group"}
    if forum:
        chat["is_forum"] = True
    return chat


_message_ids = itertools.count(1000)


def _utf16(text: str) -> int:
    """text's length as Telegram counts entity offsets: in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _entities(text: str, mentions: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    entities = []
    if text.startswith("/"):
        entities.append({"type": "bot_command", "offset": 0, "length": len(text.split()[0])})
    position = 0
    for word in text.split(" "):
        if word.startswith("@") and len(word) > 1:
            entities.append({"type": "mention", "offset": position, "length": len(word)})
        position += len(word) + 1
    for shown, person in (mentions or {}).items():  # text mentions: the user rides along
        start = text.index(shown)
        entities.append(
            {
                "type": "text_mention",
                "offset": _utf16(text[:start]),
                "length": _utf16(shown),
                "user": person,
            }
        )
    return entities


def service(chat: dict[str, Any], sender: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
    """An update carrying a service message (no text), e.g. migrate_to_chat_id."""
    body: dict[str, Any] = {
        "message_id": next(_message_ids),
        "date": 1767225600,
        "chat": chat,
        **fields,
    }
    if sender is not None:
        body["from"] = sender
    return {"message": body}


def message(
    chat: dict[str, Any],
    text: str,
    sender: dict[str, Any] | None,
    *,
    kind: str = "message",
    thread_id: int | None = None,
    reply_to: dict[str, Any] | None = None,
    sender_chat: dict[str, Any] | None = None,
    mentions: dict[str, dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An update carrying one text message, with bot_command and mention entities filled in,
    and a text_mention entity for each of mentions (its text in the message → the user)."""
    body: dict[str, Any] = {
        "message_id": next(_message_ids),
        "date": 1767225600,
        "chat": chat,
        "text": text,
        **extra,
    }
    if sender is not None:
        body["from"] = sender
    if sender_chat is not None:
        body["sender_chat"] = sender_chat
    if entities := _entities(text, mentions):
        body["entities"] = entities
    if thread_id is not None:
        body["message_thread_id"] = thread_id
        body["is_topic_message"] = True
    if reply_to is not None:
        body["reply_to_message"] = reply_to
    return {kind: body}


def tap(chat: dict[str, Any], tapper: dict[str, Any], posted: dict[str, Any], data: str) -> Any:
    """A callback_query update: tapper taps the button with data under the bot's message posted
    (its message_id and text)."""
    message = {
        "message_id": posted["message_id"],
        "date": 0,
        "chat": chat,
        "from": BOT_USER,
        "text": posted["text"],
    }
    query = {"id": f"q{data}{tapper['id']}", "from": tapper, "chat_instance": "ci", "data": data}
    return {"callback_query": {**query, "message": message}}


async def _serve_forever(one_way_s: float) -> None:
    server = await FakeTelegram().start()
    server.one_way_s = one_way_s
    print(server.port, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":  # a standalone fake for benchmarks: prints its port, serves until killed
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.fakes.telegram_server")
    parser.add_argument("--one-way-ms", type=float, default=0.0, help="network delay each way")
    asyncio.run(_serve_forever(parser.parse_args().one_way_ms / 1000))

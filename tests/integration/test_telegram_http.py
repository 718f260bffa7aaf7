"""python-telegram-bot's requests over aiohttp (bot/adapters/telegram_http.py) against servers on
127.0.0.1: what a request sends, what it answers, and the errors python-telegram-bot expects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.web_request import FileField
from telegram import InputFile
from telegram.error import NetworkError, TimedOut
from telegram.request import RequestData
from telegram.request._requestparameter import RequestParameter

from bot.adapters import telegram_http
from bot.adapters.telegram_http import AiohttpRequest
from tests.fakes.http import free_port, serve


class Recorder:
    """A server that records each request's method, path, host, user agent and form, and
    answers it as the Bot API does."""

    def __init__(self) -> None:
        self.hold = asyncio.Event()  # set: requests to /slow are answered
        self.seen: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        if request.path == "/slow":
            await self.hold.wait()
        seen: dict[str, Any] = {
            "method": request.method,
            "path": request.path,
            "host": request.host,
            "agent": request.headers.get("User-Agent", ""),
        }
        form = await request.post()
        seen["form"] = {
            name: (value.filename, value.file.read()) if isinstance(value, FileField) else value
            for name, value in form.items()
        }
        self.seen.append(seen)
        return web.json_response({"ok": True, "result": True}, status=200)


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[Recorder, str]]:
    found = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", found.handle)
    runner, port = await serve(app)
    try:
        yield found, f"http://127.0.0.1:{port}"
    finally:
        found.hold.set()
        await runner.cleanup()


@pytest.fixture
async def request_() -> AsyncIterator[AiohttpRequest]:
    made = AiohttpRequest(2)
    await made.initialize()
    try:
        yield made
    finally:
        await made.shutdown()


async def test_a_request_posts_its_parameters_as_a_form_and_returns_the_answer(
    recorder: tuple[Recorder, str], request_: AiohttpRequest
) -> None:
    server, base = recorder
    data = RequestData(
        [RequestParameter.from_input("chat_id", 5), RequestParameter.from_input("text", "héllo")]
    )
    status, body = await request_.do_request(f"{base}/botT/sendMessage", "POST", data)
    assert (status, json.loads(body)) == (200, {"ok": True, "result": True})
    [seen] = server.seen
    # As python-telegram-bot's own HTTPXRequest sends them: a form of JSON-encoded values.
    assert seen["path"] == "/botT/sendMessage"
    assert seen["form"] == {"chat_id": "5", "text": "héllo"}
    assert seen["agent"] == AiohttpRequest.USER_AGENT


async def test_a_file_goes_as_multipart_form_data(
    recorder: tuple[Recorder, str], request_: AiohttpRequest
) -> None:
    server, base = recorder
    document = InputFile(b"pinned\n", filename="pins.txt")
    data = RequestData(
        [
            RequestParameter.from_input("chat_id", 5),
            RequestParameter.from_input("document", document),
        ]
    )
    status, _ = await request_.do_request(f"{base}/botT/sendDocument", "POST", data)
    assert status == 200
    [seen] = server.seen
    assert seen["form"]["chat_id"] == "5"
    [attached] = [value for name, value in seen["form"].items() if name != "chat_id"]
    assert attached == ("pins.txt", b"pinned\n")


async def test_an_answer_slower_than_the_read_timeout_raises_timed_out(
    recorder: tuple[Recorder, str], request_: AiohttpRequest
) -> None:
    _, base = recorder
    with pytest.raises(TimedOut):
        await request_.do_request(f"{base}/slow", "POST", read_timeout=0.05)


async def test_a_refused_connection_raises_network_error(request_: AiohttpRequest) -> None:
    with pytest.raises(NetworkError):
        await request_.do_request(f"http://127.0.0.1:{free_port()}/botT/getMe", "POST")


async def test_requests_go_through_the_proxy_the_environment_names(
    recorder: tuple[Recorder, str], request_: AiohttpRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, proxy = recorder
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    telegram_http._proxy.cache_clear()  # read once per origin
    try:
        status, _ = await request_.do_request("http://api.telegram.test/botT/getMe", "POST")
    finally:
        telegram_http._proxy.cache_clear()
    assert status == 200
    [seen] = server.seen
    assert (seen["host"], seen["path"]) == ("api.telegram.test", "/botT/getMe")


async def test_a_request_before_initialize_or_after_shutdown_is_refused() -> None:
    made = AiohttpRequest(1)
    with pytest.raises(RuntimeError):
        await made.do_request("http://127.0.0.1:1/x", "POST")
    await made.initialize()
    await made.shutdown()
    with pytest.raises(RuntimeError):
        await made.do_request("http://127.0.0.1:1/x", "POST")
    await made.initialize()  # opened again
    with pytest.raises(NetworkError):
        await made.do_request(f"http://127.0.0.1:{free_port()}/x", "POST")
    await made.shutdown()

"""Failed sign-ins to the web page and lock-outs are logged with the address they came from,
never with the token tried (issue 50 item 4)."""

from __future__ import annotations

import logging

import aiohttp
import pytest

from bot.serving import serve_app
from bot.web.app import WebPage
from tests.conftest import BotFactory
from tests.fakes.clock import FakeClock

TOKEN = "web-token-for-the-sign-in-log-0123456789"
GUESS = "a-wrong-guess-that-must-never-be-logged"


async def test_failed_sign_ins_and_a_lock_out_are_logged_without_the_token(
    make_bot: BotFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    bot = make_bot()
    app = WebPage(bot.store, bot.config, TOKEN, clock=clock)
    runner, port = await serve_app(app.app(), host="127.0.0.1", port=0, port_setting="p")
    statuses = []
    try:
        with caplog.at_level(logging.WARNING, logger="bot.web"):
            async with aiohttp.ClientSession() as session:
                for _ in range(12):
                    url = f"http://127.0.0.1:{port}/signin"
                    async with session.post(url, data={"token": GUESS}) as answer:
                        statuses.append(answer.status)
    finally:
        await runner.cleanup()
    assert statuses[0] == 401 and statuses[-1] == 429
    messages = [record.getMessage() for record in caplog.records]
    failed = [m for m in messages if m.startswith("web sign-in failed from 127.0.0.1")]
    locked = [m for m in messages if m.startswith("web sign-in refused from 127.0.0.1")]
    assert len(failed) == statuses.count(401) and len(locked) == statuses.count(429)
    assert "too many attempts, locked for" in locked[0]
    assert not any(GUESS in m or TOKEN in m for m in messages)

"""Head-of-line: /pin list latency in some chats while many other chats wait on a slow model,
through the Telegram adapter against a fake Bot API server running in its own process (as the
real one would), which timestamps both the updates it hands out and the replies it receives."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.stats import percentile
from bot.adapters.telegram import TelegramFrontend
from bot.config import parse_config
from bot.core.entry.pinbot import Pinbot
from bot.llm.base import ModelReply, ModelRequest, Progress, TextSink
from storage import Store
from tests.fakes.telegram_server import TOKEN, message, private_chat, user

LIST_CHATS_START = 10_001


class SlowModel:
    """A model that takes `delay` seconds to answer."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.waiting = 0
        self.all_waiting = asyncio.Event()
        self.expected = 0

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: TextSink | None = None,
        on_progress: Progress | None = None,
    ) -> ModelReply:
        self.waiting += 1
        if self.waiting >= self.expected:
            self.all_waiting.set()
        await asyncio.sleep(self.delay)
        self.waiting -= 1
        return ModelReply("slow answer")

    async def close(self) -> None:
        """Nothing to release."""


async def measure(base: str, slow_chats: int, list_chats: int, delay: float) -> dict[str, Any]:
    """p50/p99 milliseconds from an update being handed out to the bot's reply arriving."""
    async with httpx.AsyncClient(base_url=base) as control:
        with tempfile.TemporaryDirectory() as folder:
            store = await Store.open(Path(folder) / "hol.sqlite3")
            config = parse_config({"telegram": {"base_url": f"{base}/bot", "poll_timeout_s": 1}})
            model = SlowModel(delay)
            model.expected = slow_chats
            frontend = TelegramFrontend(Pinbot(config, store, model), config.telegram, TOKEN)
            await frontend.start()
            try:
                slow = [
                    message(private_chat(c), "please think", user(c))
                    for c in range(1, slow_chats + 1)
                ]
                if slow:  # first the slow chats, until each waits on the model, typing shown
                    await control.post("/_control/push", json=slow)
                    await asyncio.wait_for(model.all_waiting.wait(), delay)
                    for _ in range(100):
                        counts = (await control.get("/_control/counts")).json()
                        if counts.get("sendChatAction", 0) >= slow_chats:
                            break
                        await asyncio.sleep(0.005)
                    await asyncio.sleep(delay / 5)  # let the typing replies settle: all wait
                lists = [
                    message(private_chat(c), "/pin list", user(c))
                    for c in range(LIST_CHATS_START, LIST_CHATS_START + list_chats)
                ]
                await control.post("/_control/push", json=lists)
                times: dict[str, list[float]] = {}
                for _ in range(int((delay + 30) * 20)):
                    times = (await control.get("/_control/times")).json()
                    if len(times) >= slow_chats + list_chats:
                        break
                    await asyncio.sleep(0.05)
            finally:
                await frontend.stop()
                await store.close()
    list_ms = [
        (sent - pushed) * 1000
        for chat, (pushed, sent) in times.items()
        if int(chat) >= LIST_CHATS_START
    ]
    slow_ms = [
        (sent - pushed) * 1000
        for chat, (pushed, sent) in times.items()
        if int(chat) < LIST_CHATS_START
    ]
    return {
        "p50_ms": round(percentile(list_ms, 0.5), 1),
        "p99_ms": round(percentile(list_ms, 0.99), 1),
        "slow_chats_answered": len(slow_ms),
        "slow_chat_p50_ms": round(percentile(slow_ms, 0.5), 1) if slow_ms else 0.0,
    }


def run(slow_chats: int, list_chats: int, delay: float) -> dict[str, Any]:
    """Start the fake Bot API server in its own process, then measure() against it."""
    root = Path(__file__).resolve().parent.parent
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.telegram_server"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        return asyncio.run(measure(f"http://127.0.0.1:{port}", slow_chats, list_chats, delay))
    finally:
        server.terminate()
        server.wait()

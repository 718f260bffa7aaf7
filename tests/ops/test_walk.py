"""The walk of one Telegram text, from the update's arrival to the model's call and the reply
sent, as the code runs it: which modules of bot/ and storage/ it passes through, and whether a
module is entered from one below it. docs/design.md ("One message's walk") shows the result;
`python -m tests.ops.test_walk` prints it."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from bot.adapters.telegram import TelegramFrontend
from bot.core.entry import Pinbot
from bot.llm.openai_backend import OpenAIChatModel
from storage import Store
from tests.conftest import TEST_KEY_ENV, agent_llm, make_config
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import TOKEN, FakeTelegram, message, private_chat, user
from tests.ops.test_layers import ROOT, layer_of

# The modules one text may pass through at most (bot/ and storage/): 36, and the inbox polling
# records each update in before Telegram is told it arrived (inbox, delivery, the dialect's
# base). The one call up a layer it may make: the entry calling what the adapter handed it (the
# surface's indicator, streamed text and send; the inbox's handler and sender).
MOST_MODULES = 32
SURFACE_CALL = ("bot.core.entry.", "bot.adapters.")
# Periodic jobs run on the same loop while a message is handled; they are not its walk.
NOT_THE_WALK = "bot/core/entry/jobs.py"


def ours(filename: str) -> str | None:
    """The dotted module of a file of bot/ or storage/ (None for any other file)."""
    path = Path(filename)
    if not path.is_relative_to(ROOT):
        return None
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[0] not in ("bot", "storage"):
        return None
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass
class Walk:
    """What one message ran: the modules in the order first entered, and the calls that went
    up a layer (caller module, callee module, function)."""

    modules: list[str] = field(default_factory=list)
    up: list[tuple[str, str, str]] = field(default_factory=list)

    def entered(self, frame: FrameType) -> None:
        module = ours(frame.f_code.co_filename)
        if module is None or _under_a_job(frame):
            return
        if module not in self.modules:
            self.modules.append(module)
        caller = ours(frame.f_back.f_code.co_filename) if frame.f_back else None
        if caller is None or caller == module:
            return
        below, above = layer_of(caller), layer_of(module)
        if below is not None and above is not None and above > below:
            self.up.append((caller, module, frame.f_code.co_name))


def _under_a_job(frame: FrameType) -> bool:
    seen: FrameType | None = frame
    while seen is not None:
        if seen.f_code.co_filename.endswith(NOT_THE_WALK):
            return True
        seen = seen.f_back
    return False


@contextmanager
def walking() -> Iterator[Walk]:
    """Record the walk of what runs inside the block."""
    walk = Walk()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            walk.entered(frame)

    sys.setprofile(profile)
    try:
        yield walk
    finally:
        sys.setprofile(None)


async def walk_of_one_text() -> Walk:
    """A DM text answered by the model through the real Telegram frontend (polling) and the
    real openai client, against the fake servers; the walk of the third message (a first text and
    a command warm what is done once)."""
    telegram, model_server = await FakeTelegram().start(), await FakeOpenAI().start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            async with await Store.open(Path(folder) / "pins.sqlite3") as store:
                config = make_config(
                    telegram={"base_url": telegram.base_url, "poll_timeout_s": 1},
                    llm=agent_llm(model_server.base_url),
                )
                model = OpenAIChatModel.from_config(config.llm)
                frontend = TelegramFrontend(
                    Pinbot(config, store, model, clock=FakeClock()), config.telegram, TOKEN
                )
                await frontend.start()
                try:
                    await _answered(telegram, "Hello.", 1)
                    await _answered(telegram, "/pin add tone Be brief.", 2)
                    with walking() as walk:
                        await _answered(telegram, "What is new?", 3)
                finally:
                    await frontend.stop()
                    await model.close()
    finally:
        await telegram.stop()
        await model_server.stop()
    return walk


async def _answered(telegram: FakeTelegram, text: str, message_id: int) -> None:
    update = message(private_chat(42), text, user(42), message_id=message_id)
    telegram.push(update)
    await telegram.wait_for(
        lambda: any(
            sent.get("reply_parameters", {}).get("message_id") == message_id
            for sent in telegram.sent()
        )
    )


@pytest.fixture
def model_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_KEY_ENV, "sk-test")


@pytest.mark.usefixtures("model_key")
async def test_one_text_passes_few_modules_and_goes_up_only_to_its_surface() -> None:
    walk = await walk_of_one_text()
    assert "bot.llm.openai_backend" in walk.modules  # the model was called
    assert len(walk.modules) <= MOST_MODULES, walk.modules
    assert all(
        caller.startswith(SURFACE_CALL[0]) and callee.startswith(SURFACE_CALL[1])
        for caller, callee, _ in walk.up
    ), walk.up


if __name__ == "__main__":
    import os

    os.environ.setdefault(TEST_KEY_ENV, "sk-test")
    shown = asyncio.run(walk_of_one_text())
    print(f"{len(shown.modules)} modules, in the order first entered:")
    print("\n".join(f"  {module}" for module in shown.modules))
    print("calls up a layer:", sorted(set(shown.up)))

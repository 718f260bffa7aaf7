"""Turn overhead (the real core path up to the model call) and its baselines, on the same data."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite

from bench.data import scope_of
from bench.stats import summary_us
from bot.config import parse_config
from bot.llm.offline import OfflineChatModel
from storage import open_store
from storage.models import Block, Level, State
from storage.rows import BLOCK_COLUMNS, block_from_row

# This harness also measures earlier trees (bench.history.call_in), whose core was flat.
try:
    from bot.core.conversation.render import ScopedBlock, injected, render
    from bot.core.entry import Pinbot
    from bot.core.people import ChatKind, Conversation, MessageContext
except ImportError:
    from bot.core.bot import Pinbot  # type: ignore[no-redef,import-not-found,attr-defined,unused-ignore]
    from bot.core.context import MessageContext  # type: ignore[no-redef,import-not-found,attr-defined,unused-ignore]
    from bot.core.render import ScopedBlock, injected, render  # type: ignore[no-redef,import-not-found,attr-defined,unused-ignore]

    from bot.core.conversation import ChatKind, Conversation  # type: ignore[no-redef,import-not-found,attr-defined,unused-ignore]

TEXT = "What should I do next?"
# The store's own columns, so block_from_row reads them in any tree (a release's or this one).
SELECT = f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE scope = ?"


def _picks(scopes: int, count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(scopes) for _ in range(count)]


def _rendered(blocks: list[Block]) -> str:
    rendered = render([ScopedBlock(b, "personal") for b in injected(blocks)], TEXT)
    return rendered.strong + rendered.context


def _render_rows(rows: list[Any]) -> str:
    """The floor's rendering: rows to blocks (as the store does), then pinbot's own render."""
    return _rendered([block_from_row(row) for row in rows])


def _render_json(slots: dict[str, dict[str, Any]]) -> str:
    return _rendered(
        [
            Block(
                id=i,
                scope="s",
                label=label,
                content=str(slot["content"]),
                level=Level(slot["level"]),
                state=State(slot["state"]),
                priority=int(slot["priority"]),
                created_at=datetime.fromtimestamp(float(slot["created"]), UTC),
                updated_at=datetime.fromtimestamp(float(slot["updated"]), UTC),
            )
            for i, (label, slot) in enumerate(slots.items())
        ]
    )


async def ours(
    path: Path, scopes: int, turns: int, seed: int, url: str | None = None
) -> dict[str, float]:
    """pinbot's blocks path of a turn: conversation → resolved context → scopes → counting and
    cleanup → render."""
    store = await open_store(path=str(path), url=url)
    config = parse_config({})
    bot = Pinbot(config, store, OfflineChatModel())
    samples = []
    try:
        for index in _picks(scopes, turns, seed):
            conversation = Conversation("bench", ChatKind.DIRECT, str(index), str(index))
            start = time.perf_counter_ns()
            context = MessageContext.resolve(conversation, config.pins, None)
            rendered = await bot.chat.rendered_blocks(context, TEXT)
            samples.append(time.perf_counter_ns() - start)
            assert rendered.strong and rendered.context
    finally:
        await store.close()
    return summary_us(samples)


def floor_sqlite3(path: Path, scopes: int, turns: int, seed: int) -> dict[str, float]:
    """(a) plain sqlite3 indexed select of the scope's rows, plus rendering."""
    db = sqlite3.connect(path)
    samples = []
    for index in _picks(scopes, turns, seed):
        start = time.perf_counter_ns()
        _render_rows(db.execute(SELECT, (scope_of(index),)).fetchall())
        samples.append(time.perf_counter_ns() - start)
    db.close()
    return summary_us(samples)


async def single_aiosqlite(path: Path, scopes: int, turns: int, seed: int) -> dict[str, float]:
    """(b) one aiosqlite query of the scope's rows (no rendering)."""
    samples = []
    async with aiosqlite.connect(path) as db:
        for index in _picks(scopes, turns, seed):
            start = time.perf_counter_ns()
            await db.execute_fetchall(SELECT, (scope_of(index),))
            samples.append(time.perf_counter_ns() - start)
    return summary_us(samples)


def json_single(path: Path, scopes: int, turns: int, seed: int) -> dict[str, float]:
    """(c) the seed's approach: one JSON file of every scope, read and parsed per turn."""
    samples = []
    for index in _picks(scopes, turns, seed):
        start = time.perf_counter_ns()
        store = json.loads(path.read_text(encoding="utf-8"))
        _render_json(store[scope_of(index)]["slots"])
        samples.append(time.perf_counter_ns() - start)
    return summary_us(samples)


def json_per_scope(folder: Path, scopes: int, turns: int, seed: int) -> dict[str, float]:
    """(d) one JSON file per scope, read and parsed per turn."""
    samples = []
    for index in _picks(scopes, turns, seed):
        start = time.perf_counter_ns()
        data = json.loads((folder / f"{index}.json").read_text(encoding="utf-8"))
        _render_json(data["slots"])
        samples.append(time.perf_counter_ns() - start)
    return summary_us(samples)


def run_ours(
    path: Path, scopes: int, turns: int, seed: int, url: str | None = None
) -> dict[str, float]:
    """ours() on a fresh event loop."""
    return asyncio.run(ours(path, scopes, turns, seed, url))


def run_single_aiosqlite(path: Path, scopes: int, turns: int, seed: int) -> dict[str, float]:
    """single_aiosqlite() on a fresh event loop."""
    return asyncio.run(single_aiosqlite(path, scopes, turns, seed))

"""Committed /pin add, edit and remove per second through the real command path, against plain
sqlite3 committing the same writes."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from bench.data import scope_of
from bot.config import parse_config
from bot.core.replies import Reply, Result
from bot.llm.offline import OfflineChatModel
from storage import Store, open_store
from storage.models import label_key

# This harness also measures earlier trees (bench.history.call_in), whose core was flat.
try:
    from bot.core.entry import SILENT, Incoming, Pinbot
    from bot.core.people import ChatKind, Conversation
except ImportError:
    from bot.core.bot import Pinbot  # type: ignore[no-redef,import-not-found,attr-defined,unused-ignore]

    from bot.core.conversation import ChatKind, Conversation  # type: ignore[no-redef,import-not-found,attr-defined,unused-ignore]

    try:
        from bot.core.incoming import SILENT, Incoming  # type: ignore[no-redef,import-not-found,attr-defined,unused-ignore]
    except ImportError:  # earlier still: Pinbot.handle(conversation, text)
        Incoming = None  # type: ignore[assignment,misc]


async def handle(bot: Pinbot, conversation: Conversation, text: str) -> Reply | None:
    """bot's answer to text in conversation, through the entry this tree's Pinbot has."""
    if Incoming is None:
        return await bot.handle(conversation, text)  # type: ignore[call-overload,no-any-return]
    return await bot.handle(Incoming(conversation, text), SILENT)


CONTENT = "Keep answers short and cite the source of every figure you give, please. " * 2
EDITED = CONTENT.replace("short", "brief")  # an edit that changes the content


def _work(count: int, scopes: int) -> list[tuple[int, str]]:
    """(user, label) pairs spread over scopes, each used for one add, edit and remove."""
    return [(i % scopes, f"bench{i}") for i in range(count)]


async def pinbot(path: Path, url: str | None) -> tuple[Pinbot, Store]:
    """A Pinbot on the store at path (or the PostgreSQL database at url), room for every block."""
    store = await open_store(path=str(path), url=url)
    config = parse_config({"pins": {"max_blocks_per_session": 1000}})
    return Pinbot(config, store, OfflineChatModel()), store


def _conversations(work: list[tuple[int, str]]) -> dict[int, Conversation]:
    """Each user's DM."""
    return {u: Conversation("bench", ChatKind.DIRECT, str(u), str(u)) for u, _ in work}


async def _catch_up_search(store: Store) -> None:
    """Bring the search index up to date, in a tree that has one. bench/history.py runs this
    module on an earlier commit's packages too, where `bench.data` is that commit's own."""
    catch_up = getattr(store, "catch_up_search", None)
    if catch_up is not None:
        await catch_up()


async def _send_each(
    bot: Pinbot,
    conversations: dict[int, Conversation],
    work: list[tuple[int, str]],
    verb: str,
    content: str,
) -> None:
    """`/pin <verb> <label> [content]` for each (user, label) of work, each committed."""
    for user, label in work:
        text = f"/pin {verb} {label}" + ("" if verb == "remove" else f" {content}")
        reply = await handle(bot, conversations[user], text)
        assert reply is not None and reply.outcome is Result.DONE, reply


async def ours(path: Path, count: int, scopes: int, url: str | None = None) -> float:
    """Commands per second: /pin add, then /pin edit, then /pin remove of each block (on the
    PostgreSQL database at url when given). The edit sends the content the block already has,
    as the earlier releases' benchmark did, so that it compares with them: it commits nothing."""
    bot, store = await pinbot(path, url)
    work = _work(count, scopes)
    conversations = _conversations(work)
    start = time.perf_counter()
    try:
        for verb in ("add", "edit", "remove"):
            await _send_each(bot, conversations, work, verb, CONTENT)
        await _catch_up_search(store)  # the indexing the commands caused (SQLite batches it)
    finally:
        await store.close()
    return 3 * count / (time.perf_counter() - start)


async def each_verb(
    path: Path, count: int, scopes: int, url: str | None = None
) -> dict[str, dict[str, float]]:
    """Per verb, committed commands per second and this process's CPU milliseconds per command:
    /pin add of each block, then /pin edit to new content, then /pin remove."""
    bot, store = await pinbot(path, url)
    work = _work(count, scopes)
    conversations = _conversations(work)
    figures = {}
    try:
        for verb, content in (("add", CONTENT), ("edit", EDITED), ("remove", "")):
            wall, cpu = time.perf_counter(), time.process_time()
            await _send_each(bot, conversations, work, verb, content)
            await _catch_up_search(store)  # the indexing they caused (SQLite batches it)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            figures[verb] = {"per_s": count / wall, "cpu_ms": 1000 * cpu / count}
    finally:
        await store.close()
    return figures


def plain_sqlite3(path: Path, count: int, scopes: int) -> float:
    """The same inserts, updates and deletes, each committed, with plain sqlite3 (WAL)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    work = _work(count, scopes)
    now = time.time()
    start = time.perf_counter()
    for user, label in work:
        db.execute(
            "INSERT INTO blocks (scope, label, label_key, content, level, state, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, 'strong', 'active', ?, ?)",
            (scope_of(user), label, label_key(label), CONTENT, now, now),
        )
    for user, label in work:
        db.execute(
            "UPDATE blocks SET content = ?, updated_at = ?, rev = rev + 1 "
            "WHERE scope = ? AND label_key = ?",
            (CONTENT, now, scope_of(user), label_key(label)),
        )
    for user, label in work:
        db.execute(
            "DELETE FROM blocks WHERE scope = ? AND label_key = ?",
            (scope_of(user), label_key(label)),
        )
    elapsed = time.perf_counter() - start
    db.close()
    return 3 * count / elapsed


def run_ours(path: Path, count: int, scopes: int, url: str | None = None) -> float:
    """ours() on a fresh event loop."""
    return asyncio.run(ours(path, count, scopes, url))


def run_each_verb(
    path: Path, count: int, scopes: int, url: str | None = None
) -> dict[str, dict[str, float]]:
    """each_verb() on a fresh event loop."""
    return asyncio.run(each_verb(path, count, scopes, url))

"""Webhook workers: committed `/pin add` per second through the whole webhook path (posted
update → recorded → processed in its chat's order → reply received by a fake Bot API), with
SQLite in one process and PostgreSQL with 1 and 2 worker processes, and the PostgreSQL
transactions each message costs."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import yaml

from storage import Store
from tests.fakes.http import free_port
from tests.fakes.telegram_server import TOKEN, FakeTelegram, message, private_chat, user
from tests.workers import Cluster, Worker

SECRET = "bench-webhook-secret"
HEADERS = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
DB_ENV = "PINBOT_BENCH_DB"
WAIT_S = 300


async def _transactions(url: str) -> int:
    """Transactions committed in the database so far (stats are final once backends exit)."""
    connection = await asyncpg.connect(url)
    try:
        value = await connection.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await connection.close()
    return int(value)


async def _run(
    folder: Path, name: str, processes: int, chats: int, adds: int, url: str | None
) -> dict[str, Any]:
    telegram = await FakeTelegram().start()
    storage = {"url_env": DB_ENV} if url else {"path": str(folder / f"{name}.sqlite3")}
    workers = []
    for index in range(processes):
        port = free_port()
        settings = {
            "storage": storage,
            "telegram": {
                "base_url": telegram.base_url,
                "mode": "webhook",
                "webhook_port": port,
                "webhook_path": "/hook",
                "webhook_url": "https://bench.example.test/hook",
            },
            "pins": {"max_blocks_per_session": 1000},
            # Limits on but never reached: their cost is part of every message.
            "limits": {"pin_commands_per_minute": 10_000},
        }
        config = folder / f"{name}-{index}.yaml"
        config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        env = {DB_ENV: url or "", "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_WEBHOOK_SECRET": SECRET}
        workers.append(Worker(["telegram", "--config", str(config)], env, port, "/hook"))
    for worker in workers:  # started one after the other: the first applies migrations
        await worker.start()
    cluster = Cluster(workers)
    cluster.session = aiohttp.ClientSession()
    update_ids = itertools.count(1)

    async def chat(uid: int) -> None:
        for n in range(adds):
            update = message(private_chat(uid), f"/pin add note{n} bench text {n}", user(uid))
            assert await cluster.post({"update_id": next(update_ids), **update}, HEADERS) == 200

    before = await _transactions(url) if url else 0
    total = chats * adds
    cpu_before = sum(worker.cpu_seconds() for worker in workers)
    started = time.perf_counter()
    try:
        await asyncio.gather(*(chat(1000 + c) for c in range(chats)))
        await telegram.wait_for(lambda: len(telegram.sent()) >= total, WAIT_S)
        elapsed = time.perf_counter() - started
        cpu = sum(worker.cpu_seconds() for worker in workers) - cpu_before
    finally:
        for worker in workers:
            await worker.stop()
        await cluster.session.close()
        await telegram.stop()
    async with await Store.open(folder / f"{name}.sqlite3", url=url) as store:
        scopes = [f"telegram:direct:{1000 + c}" for c in range(chats)]
        saved = len(await store.blocks(scopes))
    assert saved == total, f"{saved} of {total} adds saved"
    result: dict[str, Any] = {
        "adds_per_s": round(total / elapsed),
        "worker_cpu_ms_per_message": round(cpu * 1000 / total, 2),
    }
    if url:
        result["transactions_per_message"] = round((await _transactions(url) - before) / total, 1)
    return result


def run(
    folder: Path, chats: int, adds: int, databases: tuple[str, str]
) -> dict[str, dict[str, Any]]:
    """The three set-ups, one after the other, on fresh stores (databases: two empty
    PostgreSQL URLs)."""
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "sqlite_1_process": asyncio.run(_run(folder, "sqlite", 1, chats, adds, None)),
        "postgres_1_worker": asyncio.run(_run(folder, "pg1", 1, chats, adds, databases[0])),
        "postgres_2_workers": asyncio.run(_run(folder, "pg2", 2, chats, adds, databases[1])),
    }

"""Real `pinbot telegram` processes under load: `/pin add` commands or chat turns from many DM
chats, answered through the whole path (a fake Bot API and a fake model in the benchmark's
process), in polling mode or as webhook workers behind a round-robin balancer, on SQLite or on
PostgreSQL. Each run reports messages answered per second, the bot processes' own CPU time per
message (utime + stime over the run, startup excluded) and, on PostgreSQL, the transactions each
message costs. A run can use an earlier commit's tree (bench.baseline), can put the bot on one
core and everything else on the other, which steadies CPU figures on a shared machine, and can
turn the bot's metrics on (scraped every SCRAPE_S meanwhile, as Prometheus would)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
import asyncpg
import yaml

from bench.cores import BOT_CORE, OTHERS_CORE, on_core, pinned
from tests.fakes.http import free_port
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import TOKEN, FakeTelegram, message, private_chat, user
from tests.workers import Cluster, Worker

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-webhook-secret"
HEADERS = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
DB_ENV = "PINBOT_BENCH_DB"
MODEL_KEY_ENV = "PINBOT_BENCH_MODEL_KEY"
WAIT_S = 300
FIRST_CHAT = 1000
SCRAPE_S = 1.0  # metrics on: the bot's /metrics is read this often (Prometheus: 15 s to 1 min)
PUBLISH_S = 1.2  # PostgreSQL publishes a session's statistics at most once a second
# Runs any tree's CLI: that tree's packages come first on the path (PYTHONPATH; -P keeps the
# current folder off it).
_CLI = "import sys; from bot.cli import main; sys.exit(main())"


@dataclass(frozen=True)
class Setup:
    """What one run measures: how updates arrive, what the messages are, how many bot
    processes (webhook only), which database (a PostgreSQL URL, else SQLite), which tree, and
    whether the processes are pinned to cores."""

    mode: Literal["polling", "webhook"] = "webhook"
    kind: Literal["pin", "chat"] = "pin"
    processes: int = 1
    url: str | None = None
    tree: Path = ROOT
    pinned: bool = False
    metrics: bool = False


def text_of(kind: str, n: int) -> str:
    """The n-th message a chat sends: a `/pin add` of a new label, or a line for the model."""
    return f"/pin add note{n} bench text {n}" if kind == "pin" else f"hello {n}, what is new?"


def _settings(setup: Setup, folder: Path, telegram: str, model: str | None) -> dict[str, Any]:
    storage = {"url_env": DB_ENV} if setup.url else {"path": str(folder / "bot.sqlite3")}
    settings: dict[str, Any] = {
        "storage": storage,
        "telegram": {"base_url": telegram, "mode": setup.mode, "poll_timeout_s": 1},
        "pins": {"max_blocks_per_session": 1000},
        # Limits on but never reached: their cost is part of every message.
        "limits": {"pin_commands_per_minute": 10_000, "model_turns_per_minute": 10_000},
    }
    if model is not None:
        settings["llm"] = {
            "backend": "openai",
            "base_url": model,
            "model": "fake-model",
            "api_key_env": MODEL_KEY_ENV,
            "max_retries": 0,
        }
    return settings


def _workers(
    setup: Setup, folder: Path, telegram: str, model: str | None
) -> tuple[list[Worker], list[str]]:
    """The bot processes, and their /metrics URLs when metrics are on."""
    env = {
        DB_ENV: setup.url or "",
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_WEBHOOK_SECRET": SECRET,
        MODEL_KEY_ENV: "bench-model-key",
        "PYTHONPATH": str(setup.tree),
    }
    pin = pinned(BOT_CORE, setup.pinned)
    workers, scraped = [], []
    for index in range(setup.processes if setup.mode == "webhook" else 1):
        settings = _settings(setup, folder, telegram, model)
        if setup.metrics:
            listen = f"127.0.0.1:{free_port()}"
            settings["metrics"] = {"listen": listen}
            scraped.append(f"http://{listen}/metrics")
        port = free_port()
        if setup.mode == "webhook":
            settings["telegram"] |= {
                "webhook_port": port,
                "webhook_path": "/hook",
                "webhook_url": "https://bench.example.test/hook",
            }
        config = folder / f"bot-{index}.yaml"
        config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        program = [*pin, sys.executable, "-P", "-c", _CLI]
        args = ["telegram", "--config", str(config)]
        workers.append(Worker(args, env, port, "/hook", program))
    return workers, scraped


async def _scrape(session: aiohttp.ClientSession, urls: list[str], stop: asyncio.Event) -> int:
    """Read every URL every SCRAPE_S until stop is set; how many reads were made."""
    reads = 0
    while not stop.is_set():
        for url in urls:
            async with session.get(url) as response:
                assert response.status == 200, await response.text()
                await response.read()
            reads += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SCRAPE_S)
    return reads


class Transactions:
    """Reads of the transactions other sessions committed in a database. PostgreSQL 15
    publishes a session's counts at most once a second, once idle, and when it ends; these
    reads' own transactions are published at once (pg_stat_force_next_flush) and left out."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._own = 0  # this object's reads published so far

    async def read(self, *, alone: bool) -> int:
        """With alone (the bot has stopped): the count once no other session is connected and
        it has settled. Else the count once the others have been idle long enough to publish
        what they did so far (their periodic checks go on, and count towards the run as part of
        its cost, so it never settles)."""
        if not alone:
            await asyncio.sleep(PUBLISH_S)
        connection = await asyncpg.connect(self._url)
        try:
            last = -1
            while True:
                row = await connection.fetchrow(
                    "SELECT (SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid != pg_backend_pid()), "
                    "(SELECT xact_commit FROM pg_stat_database "
                    "WHERE datname = current_database()), pg_stat_force_next_flush()"
                )
                assert row is not None
                others, value = row[0], int(row[1]) - self._own
                self._own += 1
                if not alone or (not others and value == last):
                    return value
                last = value
                await asyncio.sleep(PUBLISH_S)
        finally:
            await connection.close()


async def _post_in_order(cluster: Cluster, kind: str, chats: int, per_chat: int) -> None:
    """Each chat posts its messages one after the other, the next once the previous is
    acknowledged, as Telegram delivers them."""
    update_ids = itertools.count(1)

    async def chat(uid: int) -> None:
        for n in range(per_chat):
            update = message(private_chat(uid), text_of(kind, n), user(uid))
            assert await cluster.post({"update_id": next(update_ids), **update}, HEADERS) == 200

    await asyncio.gather(*(chat(FIRST_CHAT + c) for c in range(chats)))


async def _run(setup: Setup, folder: Path, chats: int, per_chat: int) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    telegram = await FakeTelegram().start()
    model = await FakeOpenAI().start() if setup.kind == "chat" else None
    workers, scraped = _workers(setup, folder, telegram.base_url, model.base_url if model else None)
    cluster = Cluster(workers)
    total = chats * per_chat
    done = asyncio.Event()
    scraper: asyncio.Task[int] | None = None
    try:
        for worker in workers:  # one after the other: the first applies migrations
            await worker.start()
        cluster.session = aiohttp.ClientSession()
        counter = Transactions(setup.url) if setup.url else None
        before = await counter.read(alone=False) if counter else 0
        cpu_before = sum(worker.cpu_seconds() for worker in workers)
        scraper = asyncio.create_task(_scrape(cluster.session, scraped, done))
        started = time.perf_counter()
        if setup.mode == "webhook":
            await _post_in_order(cluster, setup.kind, chats, per_chat)
        else:  # every message waits for the bot's next poll, as Telegram keeps them
            for n, c in itertools.product(range(per_chat), range(chats)):
                uid = FIRST_CHAT + c
                telegram.push(message(private_chat(uid), text_of(setup.kind, n), user(uid)))
        await telegram.wait_for(lambda: len(telegram.sent()) >= total, WAIT_S)
        elapsed = time.perf_counter() - started
        cpu = sum(worker.cpu_seconds() for worker in workers) - cpu_before
        done.set()
        scrapes = await scraper
    finally:
        if scraper is not None and not scraper.done():
            scraper.cancel()
        for worker in workers:
            if worker.process is not None:
                await worker.stop()
        if cluster.session is not None:
            await cluster.session.close()
        await telegram.stop()
        if model is not None:
            await model.stop()
    expected = "Saved " if setup.kind == "pin" else "reply "
    answered = sum(params["text"].startswith(expected) for params in telegram.sent())
    assert answered == total, f"{answered} of {total} messages answered as expected"
    result: dict[str, Any] = {
        "messages_per_s": round(total / elapsed),
        "worker_cpu_ms_per_message": round(cpu * 1000 / total, 3),
    }
    if setup.metrics:
        result["scrapes"] = scrapes
    if counter is not None:
        result["transactions_per_message"] = round(
            (await counter.read(alone=True) - before) / total, 2
        )
    return result


def measure(setup: Setup, folder: Path, chats: int, per_chat: int) -> dict[str, Any]:
    """One run of setup on a fresh store: chats DM chats send per_chat messages each."""
    with on_core(OTHERS_CORE, setup.pinned):
        return asyncio.run(_run(setup, folder, chats, per_chat))

"""The web page on a big store: p50/p95 milliseconds of each page, asked over HTTP by a local
client, on a SQLite store of group chats (a shared scope and nine members' scopes per group, ten
blocks each), with an audit log and a month of usage."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench import data
from bench.stats import percentile
from bot.config import parse_config
from bot.serving import serve_app
from bot.web.app import WebPage
from storage import Store

TOKEN = "bench-web-token-0123456789"
AUDIT_PER_GROUP = 10
USAGE_DAYS = 30
USAGE_USERS = 2_000


def _fill_history(path: Path, scopes: int) -> None:
    """Audit entries for every group and a month of usage for USAGE_USERS users."""
    rng = random.Random(11)
    now = time.time()
    groups = scopes // 10
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO shared_audit (group_scope, at, actor, channel, kind, detail, label, "
            "old_content, new_content) VALUES (?, ?, ?, 'command', ?, ?, ?, ?, ?)",
            (
                (
                    data.group_scope_of(g * 10),
                    now - rng.random() * 86400 * 30,
                    str(g % 97),
                    *rng.choice((("add", "strong"), ("edit", ""), ("remove", ""))),
                    f"block{n}",
                    None,
                    "text",
                )
                for g in range(groups)
                for n in range(AUDIT_PER_GROUP)
            ),
        )
        days = [time.strftime("%Y-%m-%d", time.gmtime(now - d * 86400)) for d in range(USAGE_DAYS)]
        db.executemany(
            "INSERT INTO usage (platform, sender, day, group_key, model, calls, prompt_tokens, "
            "cached_tokens, completion_tokens, estimated_calls, cost, priced_calls) VALUES "
            "('telegram', ?, ?, ?, 'bench-model', 3, 2400, 1200, 300, 0, 0.0009, 3)",
            (
                (str(user), day, data.group_scope_of((user % max(groups, 1)) * 10))
                for user in range(USAGE_USERS)
                for day in days
            ),
        )


async def _measure(path: Path, requests: int) -> dict[str, dict[str, float]]:
    store = await Store.open(path)
    runner, port = await serve_app(
        WebPage(store, parse_config({}), TOKEN).app(),
        host="127.0.0.1",
        port=0,
        port_setting="bench",
    )
    base = f"http://127.0.0.1:{port}"
    group = data.group_scope_of(10 * 1234)
    pages = {
        "overview": "/",
        "overview_page_2": None,  # the cursor the first page links to
        "group": f"/scope/{group}",
        "audit": "/audit",
        "audit_by_group": f"/audit?group={group}",
        "audit_by_who": "/audit?who=42&kind=edit",
        "usage": "/usage?days=30",
        "usage_of_a_group": f"/usage?days=30&group={group}",
        "search_rare": "/search?q=block7+nothing",  # in no block
        "search_common": "/search?q=project",
    }
    figures: dict[str, dict[str, float]] = {}
    try:
        # unsafe: the cookie jar must keep a cookie from an IP address (127.0.0.1)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            async with session.post(f"{base}/signin", data={"token": TOKEN}) as signed:
                assert signed.status == 200, signed.status
            async with session.get(f"{base}/") as first:
                text = await first.text()
            marker = 'href="/?after='
            pages["overview_page_2"] = "/?after=" + text.split(marker, 1)[1].split('"', 1)[0]
            for name, path_query in pages.items():
                assert path_query is not None
                count = requests if not name.startswith("search") else max(requests // 10, 5)
                times = []
                for _ in range(count):
                    started = time.perf_counter()
                    async with session.get(base + path_query) as response:
                        await response.read()
                        assert response.status == 200, (name, response.status)
                    times.append((time.perf_counter() - started) * 1000)
                times.sort()
                figures[name] = {
                    "p50_ms": round(percentile(times, 0.50), 1),
                    "p95_ms": round(percentile(times, 0.95), 1),
                }
    finally:
        await runner.cleanup()
        await store.close()
    return figures


async def _summed(path: Path) -> None:
    store = await Store.open(path)
    try:
        await data.usage_summed(store)  # the usage rows were written straight into the table
    finally:
        await store.close()


def run(folder: Path, scopes: int, requests: int, runs: int) -> list[dict[str, Any]]:
    """Build the store once (scopes scopes of 10 blocks), then time each page in each run."""
    path = folder / f"web-{scopes}.sqlite3"
    data.build_sqlite(path, scopes, data.group_scope_of)
    _fill_history(path, scopes)
    asyncio.run(_summed(path))
    size = {"scopes": scopes, "blocks": scopes * data.BLOCKS_PER_SCOPE}
    return [{**size, **asyncio.run(_measure(path, requests))} for _ in range(runs)]

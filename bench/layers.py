"""The turn path's one query (a scope's blocks with its model-call count) through each way the
store could be written: the driver alone, our dialect layer (storage.dialect), and SQLAlchemy
Core 2 in async mode with the same drivers (a text() statement, and a select() built per call as
code on SQLAlchemy would). Same database, same scopes, same number of calls."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from bench.data import scope_of
from bench.stats import percentile
from storage import Store

SQL = (
    "SELECT id, scope, label, content, level, state, priority, created_at, updated_at, "
    "idle_since, idle_calls, rev, (SELECT calls FROM scope_calls c WHERE c.scope = blocks.scope) "
    "FROM blocks WHERE scope IN ({marks})"
)
Query = Callable[[list[str]], Awaitable[Any]]


def _core_select() -> Callable[[list[str]], sa.Select[Any]]:
    blocks = sa.table(
        "blocks",
        *(
            sa.column(name)
            for name in [
                "id",
                "scope",
                "label",
                "content",
                "level",
                "state",
                "priority",
                "created_at",
                "updated_at",
                "idle_since",
                "idle_calls",
                "rev",
            ]
        ),
    )
    calls = sa.table("scope_calls", sa.column("scope"), sa.column("calls"))
    count = sa.select(calls.c.calls).where(calls.c.scope == blocks.c.scope).scalar_subquery()

    def build(scopes: list[str]) -> sa.Select[Any]:
        return sa.select(*blocks.c, count).where(blocks.c.scope.in_(scopes))

    return build


async def _timed(query: Query, picks: list[list[str]]) -> dict[str, float]:
    for scopes in picks[:50]:  # warm statement caches
        await query(scopes)
    samples = []
    for scopes in picks:
        start = time.perf_counter_ns()
        await query(scopes)
        samples.append((time.perf_counter_ns() - start) / 1000)
    return {
        "p50_us": round(percentile(samples, 0.5), 1),
        "p95_us": round(percentile(samples, 0.95), 1),
    }


async def _sqlalchemy(url: str, picks: list[list[str]]) -> dict[str, Any]:
    engine = create_async_engine(url)
    build = _core_select()
    try:
        async with engine.connect() as connection:
            text = sa.text(SQL.format(marks="?").replace("IN (?)", "IN :s"))

            async def with_text(scopes: list[str]) -> Any:
                return (await _execute(connection, text, {"s": tuple(scopes)})).all()

            async def with_core(scopes: list[str]) -> Any:
                return (await connection.execute(build(scopes))).all()

            return {
                "sqlalchemy_text": await _timed(with_text, picks),
                "sqlalchemy_core": await _timed(with_core, picks),
            }
    finally:
        await engine.dispose()


async def _execute(connection: AsyncConnection, text: sa.TextClause, values: Any) -> Any:
    return await connection.execute(text.bindparams(sa.bindparam("s", expanding=True)), values)


async def _measure(path: Path, url: str | None, scopes: int, calls: int) -> dict[str, Any]:
    rng = random.Random(5)
    picks = [[scope_of(rng.randrange(scopes))] for _ in range(calls)]
    results: dict[str, Any] = {}
    if url is None:
        async with aiosqlite.connect(path) as db:
            sql = SQL.format(marks="?")
            results["driver"] = await _timed(lambda s: db.execute_fetchall(sql, s), picks)
        alchemy_url = f"sqlite+aiosqlite:///{path}"
    else:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
        try:
            sql = SQL.format(marks="$1").replace("IN ($1)", "= ANY($1::text[])")
            results["driver"] = await _timed(lambda s: pool.fetch(sql, s), picks)
        finally:
            await pool.close()
        alchemy_url = url.replace("postgresql://", "postgresql+asyncpg://")
    store = await Store.open(path, url=url)
    try:
        results["ours"] = await _timed(store.start_model_call, picks)
    finally:
        await store.close()
    results.update(await _sqlalchemy(alchemy_url, picks))
    return results


def run(path: Path, url: str, scopes: int, calls: int) -> dict[str, Any]:
    """Each way's p50 and p95 in microseconds, on the SQLite file at path and on PostgreSQL at
    url (both already holding `scopes` scopes of blocks)."""
    return {
        "sqlite": asyncio.run(_measure(path, None, scopes, calls)),
        "postgres": asyncio.run(_measure(path, url, scopes, calls)),
    }

"""Pages that stay fast as the data grows (issue 31 item 4), on SQLite and PostgreSQL, each
beside the query the page ran before (the scan), in the same run:

- the usage page's queries (everyone's usage per day and the top 50 users and groups) for the
  1-, 7- and 30-day windows at 600,000 usage rows, in two shapes: 2,000 users over 300 days and
  20,000 users over 30 days; also what the first view of a window costs (its sums made) and the
  first view after the day changes (the window moved by a day);
- search (what the page asks: groups' scopes, at most 100 results) on 1,000,000 blocks for a
  term in no block, a common term, a term in 0.5% of the blocks, a two-character term and a
  term in almost no block made of common trigrams;
- committed `/pin add` per second through the real command path, with the search index and on
  the same store with the index dropped, alternating runs (SQLite's includes the batched
  indexing its changes cause)."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import asyncpg

from bench import commands, data
from bench.stats import percentile
from bot.core.entry.incoming import SILENT, Incoming
from bot.core.people import ChatKind, Conversation
from bot.core.replies import Result
from bot.web import views
from storage import Store
from storage.rows import BLOCK_COLUMNS
from storage.usage_sums import COUNTS, SUMS

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
GROUPS = 10_000
WINDOWS = (1, 7, 30)
MARKER = "zqxmarker"  # the medium term: put into MARKED_SHARE of the blocks
MARKED_SHARE = 0.005
TERMS = {
    "rare": "block7 nothing",
    "common": "project",
    "medium": MARKER,
    "two_chars": "pr",
    # In almost no block, but each of its trigrams is in most: the index cannot narrow it down.
    "common_trigrams": "note rule note rule note rule",
}
SLOW_ASKS = 5  # times the last term is asked: a scan of every block, each time
CONTENT = "Keep answers short and cite the source of every figure you give, please. " * 2
# The queries the pages ran before this change, as they were: the per-day chart summed every
# usage row of the window; search scanned every block, leaving DM scopes out by pattern.
OLD_PER_DAY = f"SELECT day, {SUMS} FROM usage WHERE day >= ? GROUP BY day ORDER BY day"
OLD_SEARCH = (
    f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE (label {{like}} ? ESCAPE '\\' "
    "OR content {like} ? ESCAPE '\\') AND (CAST(? AS TEXT) IS NULL OR scope NOT LIKE ?) "
    "ORDER BY scope, created_at, id LIMIT ?"
)


def _ms(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(samples, 0.50) * 1000, 2),
        "p95_ms": round(percentile(samples, 0.95) * 1000, 2),
    }


async def _timed(requests: int, ask: Callable[[], Awaitable[Any]]) -> tuple[dict[str, float], Any]:
    """p50/p95 of asking requests times in a row (after one unmeasured warm-up ask)."""
    answer = await ask()
    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        await ask()
        samples.append(time.perf_counter() - started)
    return _ms(samples), answer


def _with_ratio(new: dict[str, float], old: dict[str, float]) -> dict[str, Any]:
    return {
        "new": new,
        "old": old,
        "old_over_new_p95": round(old["p95_ms"] / new["p95_ms"], 1) if new["p95_ms"] else 0.0,
    }


# --- usage ------------------------------------------------------------------------------------


def _usage_rows(users: int, days: int) -> list[tuple[Any, ...]]:
    rng = random.Random(31)
    out = []
    for day_number in range(days):
        day = (NOW - timedelta(days=day_number)).date().isoformat()
        for user in range(users):
            prompt = 1_000 + rng.randrange(3_000)
            group = data.group_scope_of((user % GROUPS) * 10)
            row = ("telegram", str(user), day, group, "m", 3, prompt, prompt // 2, 300, 0)
            out.append((*row, round(prompt * 2e-6, 6), 3))
    return out


async def _fill_usage(store: Store, rows: list[tuple[Any, ...]], url: str | None) -> None:
    columns = ["platform", "sender", "day", "group_key", "model", *COUNTS]
    if url is None:
        path = store._db.path  # type: ignore[attr-defined]
        with sqlite3.connect(path) as raw:
            marks = ", ".join("?" * len(columns))
            raw.executemany(f"INSERT INTO usage ({', '.join(columns)}) VALUES ({marks})", rows)
    else:
        connection = await asyncpg.connect(url)
        try:
            await connection.copy_records_to_table("usage", records=rows, columns=columns)
            await connection.execute("ANALYZE usage")
        finally:
            await connection.close()
    await data.usage_summed(store)


async def _old_usage_view(store: Store, first_day: str) -> None:
    """The usage page's queries before kept sums: both sum every row of the window."""
    await store._db.fetch(OLD_PER_DAY, first_day)
    await store.usage_report(first_day, views.TOP_ROWS)


async def _usage_on(
    store: Store, url: str | None, shape: tuple[int, int], requests: int
) -> dict[str, Any]:
    users, days = shape
    await _fill_usage(store, _usage_rows(users, days), url)
    figures: dict[str, Any] = {"users": users, "days": days, "rows": users * days}
    for window in WINDOWS:
        first_day = (NOW - timedelta(days=window - 1)).date().isoformat()
        started = time.perf_counter()
        await views.usage_view(store, NOW, window)  # the window's sums made
        made = time.perf_counter() - started
        yesterday = NOW - timedelta(days=1)
        await views.usage_view(store, yesterday, window)
        started = time.perf_counter()
        await views.usage_view(store, NOW, window)  # the window moved by a day
        moved = time.perf_counter() - started
        new, answer = await _timed(requests, partial(views.usage_view, store, NOW, window))
        old, _ = await _timed(max(requests // 4, 3), partial(_old_usage_view, store, first_day))
        summed = await store.usage_report(first_day, views.TOP_ROWS)
        assert [r.key for r in answer.users] == [r.key for r in summed[0]], "not the same top"
        figures[f"{window}_days"] = {
            **_with_ratio(new, old),
            "first_view_ms": round(made * 1000, 1),
            "next_day_first_view_ms": round(moved * 1000, 1),
        }
    return figures


# --- search -----------------------------------------------------------------------------------


def _mark(rng: random.Random, ids: list[int]) -> list[tuple[int]]:
    return [(block_id,) for block_id in rng.sample(ids, int(len(ids) * MARKED_SHARE))]


async def _mark_blocks(store: Store, url: str | None) -> None:
    """Put MARKER into a share of the blocks, through the store's own SQL (the index follows)."""
    ids = [row[0] for row in await store._db.fetch("SELECT id FROM blocks")]
    await store._db.executemany(
        f"UPDATE blocks SET content = content || ' {MARKER}' WHERE id = ?",
        _mark(random.Random(5), ids),
    )
    await store.catch_up_search()
    if url is not None:
        await store._db.execute("ANALYZE blocks")


async def _old_search(store: Store, sql: str, args: tuple[Any, ...]) -> list[Any]:
    """The search query as the page ran it, planned as before the index: PostgreSQL reads a GIN
    index through bitmap scans only, so without them it plans as if there were none."""
    async with store._db.transaction() as tx:
        if store.kind == "PostgreSQL":
            await tx.execute("SELECT set_config('enable_bitmapscan', 'off', true)")
        return await tx.fetch(sql, *args)


async def _search_on(store: Store, url: str | None, requests: int) -> dict[str, Any]:
    await _mark_blocks(store, url)
    like = store._db.ilike
    old_sql = OLD_SEARCH.format(like=like)
    figures: dict[str, Any] = {}
    for name, term in TERMS.items():
        escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = f"%{escaped}%"
        old_args = (pattern, pattern, "%:direct:%", "%:direct:%", views.SEARCH_RESULTS)
        asks = requests if name != "common_trigrams" else SLOW_ASKS  # seconds an ask at 1M
        new, found = await _timed(asks, partial(views.search, store, term, show_direct=False))
        old, rows = await _timed(max(asks // 4, 3), partial(_old_search, store, old_sql, old_args))
        assert [b.id for b in found] == [row[0] for row in rows], f"not the same for {name}"
        figures[name] = {"term": term, "results": len(found), **_with_ratio(new, old)}
    return figures


# --- /pin add with and without the search index -------------------------------------------


def _postgres_cpu_s(cluster_data: Path) -> float:
    """utime + stime of every process of the PostgreSQL server, in seconds."""
    postmaster = int((cluster_data / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(entry.name))
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def _adds(
    where: Path | str, count: int, run: int, cluster_data: Path | None
) -> dict[str, float]:
    """count committed /pin add (new labels, 100 DM chats), then the SQLite index brought up to
    date: per second, and CPU per add of this process (and of the PostgreSQL server)."""
    url = where if isinstance(where, str) else None
    bot, store = await commands.pinbot(where if isinstance(where, Path) else Path(), url)
    # New chats each run: ten commands a chat stay under the rate limit, which PostgreSQL keeps
    # in the database from run to run.
    users = [f"{run}-{u}" for u in range(100)]
    chats = [Conversation("bench", ChatKind.DIRECT, u, u) for u in users]
    server_before = _postgres_cpu_s(cluster_data) if cluster_data else 0.0
    cpu_before, started = time.process_time(), time.perf_counter()
    try:
        for n in range(count):
            reply = await bot.handle(
                Incoming(chats[n % 100], f"/pin add r{run}n{n} {CONTENT}"), SILENT
            )
            assert reply is not None and reply.outcome is Result.DONE, reply
        await store.catch_up_search()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_before
    finally:
        await store.close()
    server = (_postgres_cpu_s(cluster_data) - server_before) if cluster_data else 0.0
    return {"adds_per_s": count / wall, "cpu_ms_per_add": 1000 * (cpu + server) / count}


async def _drop_index(where: Path | str) -> None:
    """The same store without the search index (and, on SQLite, without noting changes)."""
    if isinstance(where, str):
        connection = await asyncpg.connect(where)
        try:
            await connection.execute("DROP INDEX blocks_search")
        finally:
            await connection.close()
        return
    with sqlite3.connect(where) as raw:
        for trigger in ("added", "changed", "removed"):
            raw.execute(f"DROP TRIGGER blocks_search_{trigger}")
        raw.execute("DROP TABLE blocks_search_noted")
        raw.execute("DROP TABLE blocks_search")


def _adds_with_and_without(
    indexed: Path | str, bare: Path | str, count: int, runs: int, cluster_data: Path | None
) -> dict[str, Any]:
    """Alternating runs on the store with the index and the one without; medians."""
    with_index, without = [], []
    for run in range(runs):
        with_index.append(asyncio.run(_adds(indexed, count, run, cluster_data)))
        without.append(asyncio.run(_adds(bare, count, run, cluster_data)))
    result: dict[str, Any] = {"runs": runs, "adds": count}
    for name, samples in (("with_index", with_index), ("without_index", without)):
        result[name] = {
            key: round(statistics.median(s[key] for s in samples), 3) for key in samples[0]
        }
    rate = result["with_index"]["adds_per_s"] / result["without_index"]["adds_per_s"]
    cpu = result["with_index"]["cpu_ms_per_add"] / result["without_index"]["cpu_ms_per_add"]
    result["with_over_without_per_s"] = round(rate, 3)
    result["cost_pct"] = round((1 / rate - 1) * 100, 1)
    result["cpu_with_over_without"] = round(cpu, 3)
    return result


# --- the run ----------------------------------------------------------------------------------


async def _measure(
    where: Path | str, usage_where: list[Path | str], settings: dict[str, Any]
) -> dict[str, Any]:
    url = where if isinstance(where, str) else None
    figures: dict[str, Any] = {}
    store = await Store.open(where if isinstance(where, Path) else "", url=url)
    try:
        figures["search"] = await _search_on(store, url, settings["requests"])
    finally:
        await store.close()
    for shape, usage_at in zip(settings["usage_shapes"], usage_where, strict=True):
        usage_url = usage_at if isinstance(usage_at, str) else None
        store = await Store.open(usage_at if isinstance(usage_at, Path) else "", url=usage_url)
        try:
            key = f"usage_{shape[0]}_users_{shape[1]}_days"
            figures[key] = await _usage_on(store, usage_url, shape, settings["requests"])
        finally:
            await store.close()
    return figures


def run(
    folder: Path, settings: dict[str, Any], database: Callable[[str], str], cluster_data: Path
) -> dict[str, Any]:
    """Every figure above on SQLite and on PostgreSQL (database(name) makes an empty one)."""
    scopes = settings["scopes"]
    report: dict[str, Any] = {"blocks": scopes * data.BLOCKS_PER_SCOPE}
    sqlite_path = folder / f"pages-{scopes}.sqlite3"
    data.build_sqlite(sqlite_path, scopes, data.group_scope_of)
    postgres_url = database("pages_blocks")
    data.build_postgres(postgres_url, scopes, data.group_scope_of)
    shapes = settings["usage_shapes"]
    report["sqlite"] = asyncio.run(
        _measure(
            sqlite_path,
            [folder / f"usage-{n}.sqlite3" for n in range(len(shapes))],
            settings,
        )
    )
    report["postgres"] = asyncio.run(
        _measure(postgres_url, [database(f"pages_usage_{n}") for n in range(len(shapes))], settings)
    )
    adds, runs, add_scopes = settings["adds"], settings["add_runs"], settings["add_scopes"]
    indexed, bare = folder / "adds-indexed.sqlite3", folder / "adds-bare.sqlite3"
    data.build_sqlite(indexed, add_scopes)
    shutil.copy(indexed, bare)
    asyncio.run(_drop_index(bare))
    report["sqlite"]["pin_add"] = _adds_with_and_without(indexed, bare, adds, runs, None)
    indexed_url, bare_url = database("adds_indexed"), database("adds_bare")
    for url in (indexed_url, bare_url):
        data.build_postgres(url, add_scopes)
    asyncio.run(_drop_index(bare_url))
    report["postgres"]["pin_add"] = _adds_with_and_without(
        indexed_url, bare_url, adds, runs, cluster_data
    )
    return report


def targets(pages: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Issue 31 item 4's targets: each name, whether met, and the figure."""
    found = []
    for backend, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        figures = pages[backend]
        for key, shape in figures.items():
            if not key.startswith("usage_"):
                continue
            for window in WINDOWS:
                p95 = shape[f"{window}_days"]["new"]["p95_ms"]
                found.append(
                    (
                        f"usage page queries p95 <= 20 ms, {window}-day window, {shape['rows']:,} "
                        f"rows ({shape['users']:,} users x {shape['days']} days), {name}",
                        p95 <= 20,
                        f"{p95} ms",
                    )
                )
        for term in ("rare", "common"):
            p95 = figures["search"][term]["new"]["p95_ms"]
            found.append(
                (
                    f"search p95 <= 50 ms, {term} term, {pages['blocks']:,} blocks, {name}",
                    p95 <= 50,
                    f"{p95} ms",
                )
            )
        cost = figures["pin_add"]["cost_pct"]
        found.append((f"/pin add cost of the search index <= 15%, {name}", cost <= 15, f"{cost}%"))
    return found


def print_table(pages: dict[str, Any]) -> None:
    """The figures as plain text."""
    print("\nPages that stay fast (p50 / p95 ms, new against the query before, old/new at p95)")
    for backend, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        figures = pages[backend]
        for key, shape in figures.items():
            if not key.startswith("usage_"):
                continue
            cells = []
            for window in WINDOWS:
                f = shape[f"{window}_days"]
                cells.append(
                    f"{window}d {f['new']['p50_ms']}/{f['new']['p95_ms']} against "
                    f"{f['old']['p50_ms']}/{f['old']['p95_ms']} ({f['old_over_new_p95']}x; "
                    f"first view {f['first_view_ms']}, next day {f['next_day_first_view_ms']})"
                )
            print(
                f"  {name} usage page, {shape['rows']:,} rows ({shape['users']:,} users x "
                f"{shape['days']} days): " + "; ".join(cells)
            )
        cells = [
            f"{term} {f['new']['p50_ms']}/{f['new']['p95_ms']} against "
            f"{f['old']['p50_ms']}/{f['old']['p95_ms']} ({f['old_over_new_p95']}x, "
            f"{f['results']} results)"
            for term, f in figures["search"].items()
        ]
        print(f"  {name} search, {pages['blocks']:,} blocks: " + "; ".join(cells))
        adds = figures["pin_add"]
        print(
            f"  {name} /pin add: {adds['with_index']['adds_per_s']:,.0f}/s with the index, "
            f"{adds['without_index']['adds_per_s']:,.0f}/s without (cost {adds['cost_pct']}%); "
            f"CPU {adds['with_index']['cpu_ms_per_add']} against "
            f"{adds['without_index']['cpu_ms_per_add']} ms an add "
            f"({adds['cpu_with_over_without']}x; median of {adds['runs']} alternating runs)"
        )


def main(argv: list[str] | None = None) -> int:
    """Run just these figures (`python -m bench.pages [--quick]`), print them with their
    targets and save them: the whole bench takes long, and this part alone is what it reports."""
    import argparse
    import json
    import tempfile

    from bench.__main__ import _database, _settings
    from tests.pg import PgCluster

    parser = argparse.ArgumentParser(prog="python -m bench.pages", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--json", default="bench-pages.json", help="where to write figures")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pinbot-bench-") as name:
        cluster = PgCluster().start()
        try:
            report = run(
                Path(name),
                _settings(args.quick)["pages"],
                partial(_database, cluster),
                cluster.data,
            )
        finally:
            cluster.stop()
    report["seconds"] = round(time.perf_counter() - started, 1)
    print_table(report)
    print("\nTargets")
    for target, met, figure in targets(report):
        print(f"  [{'met' if met else 'MISSED'}] {target}: {figure}")
    Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"\nFigures written to {args.json} ({report['seconds']} s)")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())

"""`python -m bench [--quick] [--runs N] [--json FILE]`: one run that builds synthetic stores and
measures pinbot's own cost per message next to the floor and the seeds' approach, with ratios."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from bench import (
    baseline,
    commands,
    cores,
    data,
    headofline,
    history,
    layers,
    memory,
    metrics,
    pages,
    prefix,
    road,
    streaming,
    triggered,
    turn,
    web,
    workers,
)
from bench import compaction as compaction_cost
from bench import secrets as secret_recognisers
from bench.stats import median_of
from tests.pg import PgCluster


def _settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "scopes": [100, 1_000],
            "turns": 300,
            "json_single_turns": 20,
            "commands": 200,
            "workers": (20, 10),
            "cpu": (10, 5),
            "web": (1_000, 10),
            "hol": (10, 5, 0.2),
            "memory_turns": 200,
            "baseline_runs": 1,
            "pages": {
                "scopes": 1_000,
                "usage_shapes": [(100, 30), (300, 10)],
                "requests": 5,
                "adds": 100,
                "add_runs": 1,
                "add_scopes": 100,
            },
            "streaming": streaming.QUICK,
            "history_edit_scopes": 100,
            "history_runs": 1,
        }
    return {
        "scopes": [1_000, 10_000, 100_000],
        "turns": 3_000,
        "json_single_turns": 5,
        "commands": 1_000,
        "workers": (50, 20),
        "cpu": (200, 10),
        "web": (100_000, 40),
        "hol": (50, 20, 1.0),
        "memory_turns": 2_000,
        "baseline_runs": 5,
        "pages": {
            "scopes": 100_000,
            "usage_shapes": [(2_000, 300), (20_000, 30)],
            "requests": 40,
            "adds": 1_000,
            "add_runs": 5,
            "add_scopes": 10_000,
        },
        "streaming": streaming.FULL,
        "history_edit_scopes": 1_000,
        "history_runs": 7,
    }


def _ratio(ours: float, other: float) -> float:
    return round(ours / other, 6) if other else 0.0


def _shown(ratio: float) -> str:
    """A ratio for the table: 2.5x, or 1/14,786x when ours is that many times smaller."""
    if ratio and ratio < 0.1:
        return f"1/{1 / ratio:,.0f}x"
    return f"{ratio:.2f}x"


def _database(cluster: PgCluster, name: str, template: str | None = None) -> str:
    """A new database in the benchmark's PostgreSQL server: empty, or a copy of template."""
    import asyncio

    import asyncpg

    copy = f" TEMPLATE {template}" if template else ""

    async def create() -> None:
        connection = await asyncpg.connect(cluster.url())
        try:
            await connection.execute(f"CREATE DATABASE {name}{copy}")
        finally:
            await connection.close()

    asyncio.run(create())
    return cluster.url(name)


def measure_turns(
    folder: Path, scopes: int, settings: dict[str, Any], runs: int, cluster: PgCluster
) -> dict[str, Any]:
    """Turn overhead (SQLite and PostgreSQL) and the four baselines at one store size."""
    db = folder / f"store-{scopes}.sqlite3"
    single = folder / f"single-{scopes}.json"
    per_scope = folder / f"per-scope-{scopes}"
    data.build_sqlite(db, scopes)
    data.build_json_single(single, scopes)
    data.build_json_per_scope(per_scope, scopes)
    url = _database(cluster, f"turns_{scopes}")
    data.build_postgres(url, scopes)
    n = settings["turns"]
    results: dict[str, list[dict[str, float]]] = {
        "ours": [],
        "ours_postgres": [],
        "a_sqlite3_floor": [],
        "b_single_aiosqlite": [],
        "c_json_single_file": [],
        "d_json_per_scope": [],
    }
    for run in range(runs):
        seed = 100 + run
        # Warm the OS page cache for every contender alike before timing anything.
        turn.floor_sqlite3(db, scopes, min(n, scopes), seed + 50)
        results["ours"].append(turn.run_ours(db, scopes, n, seed))
        results["ours_postgres"].append(turn.run_ours(db, scopes, n, seed, url))
        results["a_sqlite3_floor"].append(turn.floor_sqlite3(db, scopes, n, seed))
        results["b_single_aiosqlite"].append(turn.run_single_aiosqlite(db, scopes, n, seed))
        results["c_json_single_file"].append(
            turn.json_single(single, scopes, settings["json_single_turns"], seed)
        )
        results["d_json_per_scope"].append(turn.json_per_scope(per_scope, scopes, n, seed))
    figures = {name: median_of(samples) for name, samples in results.items()}
    if scopes == settings["scopes"][-1]:
        figures["layers"] = layers.run(db, url, scopes, n)
    ours = figures["ours"]["p50_us"]
    ratios = {
        f"ours_p50_over_{name}": _ratio(ours, fig["p50_us"])
        for name, fig in figures.items()
        if name not in ("ours", "layers")
    }
    return {"blocks": scopes * data.BLOCKS_PER_SCOPE, "scopes": scopes, **figures, "ratios": ratios}


WEB_LIST_PAGES = (
    "overview",
    "overview_page_2",
    "group",
    "audit",
    "audit_by_group",
    "audit_by_who",
)  # usage and search pages are measured too, and beside their targets in bench/pages.py


def median_of_pages(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each page's figures as medians over runs."""
    first = results[0]
    pages = {k: median_of([r[k] for r in results]) for k, v in first.items() if isinstance(v, dict)}
    worst = max(pages[name]["p95_ms"] for name in WEB_LIST_PAGES)
    return {"scopes": first["scopes"], "blocks": first["blocks"], **pages, "list_p95_ms": worst}


def measure_workers(
    folder: Path, settings: dict[str, Any], runs: int, cluster: PgCluster
) -> dict[str, Any]:
    """Messages answered per second through the webhook path, worker CPU and PostgreSQL
    transactions per message: `/pin add` on SQLite in one process and on PostgreSQL with 1 and 2
    workers, and chat turns on PostgreSQL with 1 worker (one worker on a core of its own where
    the machine has two)."""
    chats, per_chat = settings["workers"]
    one_core = cores.can_pin()

    def setup(name: str, run: int) -> workers.Setup:
        database = None if name.startswith("sqlite") else _database(cluster, f"{name}_{run}")
        two = name == "postgres_2_workers"
        kind: Literal["pin", "chat"] = "chat" if name.endswith("_chat") else "pin"
        pinned = one_core and not two
        return workers.Setup("webhook", kind, 2 if two else 1, database, pinned=pinned)

    names = (
        "sqlite_1_process",
        "postgres_1_worker",
        "postgres_2_workers",
        "postgres_1_worker_chat",
    )
    results = {
        name: [
            workers.measure(setup(name, run), folder / f"workers-{name}-{run}", chats, per_chat)
            for run in range(runs)
        ]
        for name in names
    }
    figures: dict[str, Any] = {name: median_of(found) for name, found in results.items()}
    sqlite_rate = figures["sqlite_1_process"]["messages_per_s"]
    one, two = (figures[f"postgres_{n}"]["messages_per_s"] for n in ("1_worker", "2_workers"))
    return {
        "chats": chats,
        "messages_per_chat": per_chat,
        **figures,
        "two_workers_over_one": round(_ratio(two, one), 2),
        "two_workers_over_sqlite": round(_ratio(two, sqlite_rate), 2),
    }


def measure_commands(
    folder: Path, settings: dict[str, Any], runs: int, cluster: PgCluster
) -> dict[str, Any]:
    """Committed /pin commands per second, ours (SQLite and PostgreSQL) and plain sqlite3, on
    fresh stores."""
    ours: list[float] = []
    postgres: list[float] = []
    plain: list[float] = []
    count = settings["commands"]
    for run in range(runs):
        for name, rates, runner in (
            ("ours", ours, commands.run_ours),
            ("plain", plain, commands.plain_sqlite3),
        ):
            db = folder / f"commands-{name}-{run}.sqlite3"
            data.build_sqlite(db, 0)
            rates.append(runner(db, count, 100))
        url = _database(cluster, f"commands_{run}")
        postgres.append(commands.run_ours(folder / "unused.sqlite3", count, 100, url))
    ours_rate, plain_rate = statistics.median(ours), statistics.median(plain)
    postgres_rate = statistics.median(postgres)
    return {
        "ours_per_s": round(ours_rate),
        "ours_postgres_per_s": round(postgres_rate),
        "plain_sqlite3_per_s": round(plain_rate),
        "plain_over_ours": round(_ratio(plain_rate, ours_rate), 2),
        "sqlite_over_postgres": round(_ratio(ours_rate, postgres_rate), 2),
    }


def measure_memory(folder: Path, scopes: int, settings: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS serving the largest store against serving an empty one."""
    empty = folder / "empty.sqlite3"
    data.build_sqlite(empty, 0)
    turns = settings["memory_turns"]
    empty_kib = memory.peak_rss_kib(empty, 0, turns)
    full_kib = memory.peak_rss_kib(folder / f"store-{scopes}.sqlite3", scopes, turns)
    return {
        "blocks": scopes * data.BLOCKS_PER_SCOPE,
        "empty_store_mib": round(empty_kib / 1024, 1),
        "full_store_mib": round(full_kib / 1024, 1),
        "growth_mib": round((full_kib - empty_kib) / 1024, 1),
    }


def measure_history(folder: Path, settings: dict[str, Any], cluster: PgCluster) -> dict[str, Any]:
    """Block history's figures (bench.history) on copies of the largest store of the turns."""
    scopes = settings["scopes"][-1]
    store = folder / "history-store.sqlite3"
    shutil.copyfile(folder / f"store-{scopes}.sqlite3", store)
    url = _database(cluster, "history_store", template=f"turns_{scopes}")
    return history.run(
        folder,
        settings,
        settings["history_runs"],
        (store, url),
        lambda name: _database(cluster, name),
    )


def _baseline_targets(report: dict[str, Any]) -> list[tuple[str, bool, str]]:
    versus = report["commands_vs_baseline"]
    if not versus["available"]:
        return []
    return [
        (
            f"committed commands/s on {name} within 10% of {versus['baseline']}'s",
            versus[key]["ours_over_baseline"] >= 0.9,
            f"{versus[key]['ours_over_baseline']}x",
        )
        for key, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL"))
    ]


def _message_targets(report: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Issue 31 items 1 and 2: CPU per `/pin add` against the baseline, PostgreSQL transactions
    per `/pin add`."""
    found = []
    versus = report["cpu_vs_baseline"]
    for mode in ("polling", "webhook") if versus["available"] else ():
        ratio = versus[f"{mode}_pin"]["ours_over_baseline"]
        found.append(
            (
                f"CPU per /pin add in {mode} mode <= 0.8x {versus['baseline']}'s",
                ratio <= 0.8,
                f"{ratio}x",
            )
        )
    transactions = report["workers"]["postgres_1_worker"]["transactions_per_message"]
    found.append(
        ("PostgreSQL transactions per /pin add <= 6", transactions <= 6, f"{transactions}")
    )
    return found


def _streaming_targets(report: dict[str, Any]) -> list[tuple[str, bool, str]]:
    ours = report["streaming"]["ours"]
    return [
        (
            "streamed on Telegram: first text p95 <= 300 ms after the first token",
            ours["first_p95_ms"] <= 300,
            f"{ours['first_p95_ms']} ms",
        ),
        (
            "streamed on Telegram: final message p95 <= 1.2 s after the last token",
            ours["final_p95_ms"] <= 1200,
            f"{ours['final_p95_ms']} ms",
        ),
        (
            "streamed on Telegram: no message written to faster than about once a second",
            ours["turns_writing_faster"] == 0,
            f"shortest gap {ours['min_write_gap_ms']} ms",
        ),
    ]


def _history_targets(report: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Issue 28: committed /pin add and /pin edit per second at least 80% of the commit
    before history's, and the turn's p50 unchanged (within 10%), on both backends."""
    figures = report["history"]
    if not figures["available"]:
        return []
    before = figures["before"]
    found = []
    for backend, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        for verb in ("add", "edit"):
            ratio = figures["commands"][backend][verb]["rate_ratio"]
            found.append(
                (
                    f"committed /pin {verb} per second on {name} >= 80% of {before}'s",
                    ratio >= 0.8,
                    f"{ratio:.0%}",
                )
            )
    for backend, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        ratio = figures["turns"][backend]["p50_ratio"]
        found.append(
            (
                f"turn p50 on {name} with history within 10% of {before}'s",
                ratio <= 1.1,
                f"{ratio:.2f}x",
            )
        )
    return found


def targets(report: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Each target of the benchmark issues: its name, whether it is met, and the figure."""
    largest, smallest = report["turns"][-1], report["turns"][0]
    hundred_k = next((t for t in report["turns"] if t["scopes"] == 100_000), largest)
    ours = largest["ours"]
    return [
        *_baseline_targets(report),
        *_message_targets(report),
        *road.targets(report["road"]),
        *metrics.targets(report["metrics"]),
        *_history_targets(report),
        (
            "turn p50 <= 2x single aiosqlite query (largest store)",
            ours["p50_us"] <= 2 * largest["b_single_aiosqlite"]["p50_us"],
            _shown(largest["ratios"]["ours_p50_over_b_single_aiosqlite"]),
        ),
        ("turn p99 <= 1 ms (largest store)", ours["p99_us"] <= 1000, f"{ours['p99_us']} us"),
        (
            "flat: p50 largest <= 1.5x p50 smallest",
            ours["p50_us"] <= 1.5 * smallest["ours"]["p50_us"],
            _shown(_ratio(ours["p50_us"], smallest["ours"]["p50_us"])),
        ),
        (
            ">= 50x faster than one JSON file (100,000 scopes)",
            hundred_k["c_json_single_file"]["p50_us"] >= 50 * hundred_k["ours"]["p50_us"],
            _shown(_ratio(hundred_k["c_json_single_file"]["p50_us"], hundred_k["ours"]["p50_us"])),
        ),
        (
            ">= 2,000 committed commands per second",
            report["commands"]["ours_per_s"] >= 2000,
            f"{report['commands']['ours_per_s']}/s",
        ),
        (
            "head-of-line p99 <= 50 ms",
            report["head_of_line"]["p99_ms"] <= 50,
            f"{report['head_of_line']['p99_ms']} ms",
        ),
        (
            "web list pages (overview, group, audit) p95 <= 100 ms",
            report["web"]["list_p95_ms"] <= 100,
            f"{report['web']['list_p95_ms']} ms at {report['web']['blocks']:,} blocks",
        ),
        *pages.targets(report["pages"]),
        (
            "RSS growth <= 50 MB",
            report["memory"]["growth_mib"] * 1.048576 <= 50,
            f"{report['memory']['growth_mib']} MiB",
        ),
        (
            "100% of the previous request (minus its newest user message) is a prefix, every turn",
            report["cache_prefix"]["ours"]["min_pct"] == 100.0,
            f"min {report['cache_prefix']['ours']['min_pct']}%",
        ),
        *_streaming_targets(report),
        *secret_recognisers.targets(report["secrets"]),
        *triggered.targets(report["triggered"]),
    ]


def print_history(figures: dict[str, Any]) -> None:
    """Block history's figures (issue 28)."""
    sizes = figures["sizes"]
    largest = sizes["largest"]
    for backend, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        edited, big = sizes[backend], largest[backend]
        print(
            f"History on {name}: {edited['bytes_per_version']:,.0f} bytes a version after one "
            f"/pin edit of each of {sizes['edited_blocks']:,} blocks (content "
            f"{edited['content_chars']:,.0f} chars + {edited['overhead_bytes_per_version']:,.0f}); "
            f"{big['total_bytes'] / 2**20:,.1f} MiB for {big['versions']:,} versions, one edit of "
            f"each block of the largest store ({big['bytes_per_version']:,.0f} bytes a version; "
            f"indexes {sum(big['index_bytes'].values()) / 2**20:,.1f} MiB)"
        )
    if not figures["available"]:
        print(f"History against {figures['before']}: not in this checkout (a shallow clone)")
        return
    for backend, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        verbs = figures["commands"][backend]
        turn = figures["turns"][backend]
        print(
            f"With history against {figures['before']} on {name} (median of {figures['runs']} "
            "alternating runs), committed per second (CPU ms a command): "
            + "; ".join(
                f"/pin {verb} {v['ours']['per_s']:,.0f} ({v['ours']['cpu_ms']:.3f}) against "
                f"{v['before']['per_s']:,.0f} ({v['before']['cpu_ms']:.3f}), {v['rate_ratio']:.0%}"
                for verb, v in verbs.items()
            )
            + f"; turn p50 {turn['ours']['p50_us']:,.0f} us against "
            f"{turn['before']['p50_us']:,.0f} us ({turn['p50_ratio']:.2f}x)"
        )


def print_table(report: dict[str, Any]) -> None:
    """The figures as a plain-text table."""
    print(
        f"pinbot benchmark ({'quick' if report['quick'] else 'full'}, "
        f"median of {report['runs']} run(s)) on {report['machine']}"
    )
    print("\nTurn overhead, p50 / p99 in microseconds")
    header = [
        "blocks",
        "ours",
        "ours (pg)",
        "(a) sqlite3",
        "(b) aiosqlite",
        "(c) one JSON",
        "(d) JSON/scope",
        "ours/pg",
        "ours/(a)",
        "ours/(b)",
        "ours/(c)",
        "ours/(d)",
    ]
    print(" | ".join(f"{h:>15}" for h in header))
    for row in report["turns"]:
        cells = [f"{row['blocks']:,}"]
        for name in (
            "ours",
            "ours_postgres",
            "a_sqlite3_floor",
            "b_single_aiosqlite",
            "c_json_single_file",
            "d_json_per_scope",
        ):
            cells.append(f"{row[name]['p50_us']:,.0f} / {row[name]['p99_us']:,.0f}")
        cells += [_shown(v) for v in row["ratios"].values()]
        print(" | ".join(f"{c:>15}" for c in cells))
    c = report["commands"]
    print(
        f"\nCommands: {c['ours_per_s']:,}/s committed (/pin add, edit, remove) on SQLite, "
        f"{c['ours_postgres_per_s']:,}/s on PostgreSQL; plain sqlite3 "
        f"{c['plain_sqlite3_per_s']:,}/s ({c['plain_over_ours']}x ours)"
    )
    ways = report["turns"][-1]["layers"]
    print(
        f"The turn's query at {report['turns'][-1]['blocks']:,} blocks, p50 us (driver alone / "
        "our dialect / SQLAlchemy text() / SQLAlchemy select()): "
        + "; ".join(
            f"{backend} "
            + " / ".join(
                f"{ways[backend][way]['p50_us']:,.0f}"
                for way in ("driver", "ours", "sqlalchemy_text", "sqlalchemy_core")
            )
            for backend in ("sqlite", "postgres")
        )
    )
    versus = report["commands_vs_baseline"]
    if versus["available"]:
        print(
            f"Against {versus['baseline']} (median of {versus['runs']} alternating runs): "
            + "; ".join(
                f"{name} {versus[key]['ours']:,.0f}/s against {versus[key]['baseline']:,.0f}/s "
                f"({versus[key]['ours_over_baseline']}x)"
                for key, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL"))
            )
        )
    else:
        print(f"Against {versus['baseline']}: not in this checkout (a shallow clone)")
    print_history(report["history"])
    w = report["workers"]
    pg_pin, pg_chat = w["postgres_1_worker"], w["postgres_1_worker_chat"]
    print(
        f"Webhook workers ({w['chats']} chats x {w['messages_per_chat']} messages, posted, "
        f"recorded, processed, replied), /pin add: SQLite 1 process "
        f"{w['sqlite_1_process']['messages_per_s']:,}/s; PostgreSQL 1 worker "
        f"{pg_pin['messages_per_s']:,}/s, 2 workers "
        f"{w['postgres_2_workers']['messages_per_s']:,}/s "
        f"({w['two_workers_over_one']}x one worker, {w['two_workers_over_sqlite']}x SQLite). "
        f"PostgreSQL transactions a message: {pg_pin['transactions_per_message']} (/pin add), "
        f"{pg_chat['transactions_per_message']} (chat turn); worker CPU a message "
        f"{w['sqlite_1_process']['worker_cpu_ms_per_message']} ms (/pin add, SQLite), "
        f"{pg_pin['worker_cpu_ms_per_message']} ms (/pin add, PostgreSQL), "
        f"{pg_chat['worker_cpu_ms_per_message']} ms (chat turn, PostgreSQL)"
    )
    cpu = report["cpu_vs_baseline"]
    if cpu["available"]:
        where = "the bot on a core of its own" if cpu["pinned"] else "unpinned"
        pairs = [
            (f"{mode} {what}", cpu[f"{mode}_{kind}"])
            for mode in ("polling", "webhook")
            for kind, what in (("pin", "/pin add"), ("chat", "chat turn"))
        ]
        print(
            f"Bot CPU per message in ms against {cpu['baseline']} (SQLite, median of "
            f"{cpu['runs']} alternating runs, {where}): "
            + "; ".join(
                f"{name} {f['ours']} against {f['baseline']} ({f['ours_over_baseline']}x)"
                for name, f in pairs
            )
        )
    print(metrics.describe(report["metrics"]))
    h = report["head_of_line"]
    print(
        f"Head-of-line: {h['list_chats']} simultaneous /pin list, p50 {h['p50_ms']} ms, "
        f"p99 {h['p99_ms']} ms while {h['slow_chats']} chats wait {h['model_delay_s']} s on "
        f"the model (with no chat waiting: p50 {h['without_waiting_chats']['p50_ms']} ms, "
        f"p99 {h['without_waiting_chats']['p99_ms']} ms)"
    )
    web_figures = report["web"]
    shown = ", ".join(
        f"{name} {figures['p50_ms']}/{figures['p95_ms']}"
        for name, figures in web_figures.items()
        if isinstance(figures, dict)
    )
    print(
        f"Web page on {web_figures['scopes']:,} scopes / {web_figures['blocks']:,} blocks, "
        f"p50/p95 ms: {shown}"
    )
    pages.print_table(report["pages"])
    m = report["memory"]
    print(
        f"Memory: peak RSS {m['empty_store_mib']} MiB empty, {m['full_store_mib']} MiB with "
        f"{m['blocks']:,} blocks (growth {m['growth_mib']} MiB)"
    )
    p = report["cache_prefix"]
    before = p["one_marker_per_request"]
    compaction = p["with_compaction"]
    print(
        f"Cacheable prefix over a {p['turns']}-turn DM (3 strong, 2 context blocks): the share of "
        f"the previous request minus its newest user message that is an exact prefix of the next: "
        f"mean {p['ours']['mean_pct']}%, min {p['ours']['min_pct']}% (one marker per request, "
        f"as before: mean {before['mean_pct']}%, min {before['min_pct']}%; "
        f"{_shown(_ratio(p['ours']['mean_pct'], before['mean_pct']))} more reusable). "
        f"With compaction at turns {compaction['compaction_at_turns']}: "
        f"{compaction['at_compaction_pct']}% at those turns, mean {compaction['mean_pct']}%"
    )
    print(compaction_cost.describe(report["compaction"]))
    s = report["streaming"]
    print(
        f"Streamed replies on Telegram ({s['ours']['turns']} turns, {s['concurrent_chats']} chats "
        f"at once, first token after {s['first_token_s']} s, a chunk every {s['token_s']} s, "
        f"{s['one_way_ms']} ms each way to the Bot API), ms: first text after the first token "
        f"p50/p95 {s['ours']['first_p50_ms']}/{s['ours']['first_p95_ms']}, final message after "
        f"the last token {s['ours']['final_p50_ms']}/{s['ours']['final_p95_ms']}, shortest gap "
        f"between writes to a message {s['ours']['min_write_gap_ms']}"
        + (
            f" ({s['baseline']}: {b['first_p50_ms']}/{b['first_p95_ms']}, "
            f"{b['final_p50_ms']}/{b['final_p95_ms']}, {b['min_write_gap_ms']})"
            if (b := s["baseline_figures"])
            else ""
        )
    )
    secret_recognisers.print_section(report["secrets"])
    print(triggered.describe(report["triggered"]))
    print("\nTargets")
    for name, met, figure in targets(report):
        print(f"  [{'met' if met else 'MISSED'}] {name}: {figure}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print and save its figures."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, under 30 s")
    parser.add_argument("--runs", type=int, help="repeat and report medians (default 3; 1 quick)")
    parser.add_argument("--json", default="bench-results.json", help="where to write figures")
    args = parser.parse_args(argv)
    settings = _settings(args.quick)
    runs = args.runs or (1 if args.quick else 3)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pinbot-bench-") as name:
        folder = Path(name)
        report: dict[str, Any] = {
            "quick": args.quick,
            "runs": runs,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, {platform.system()}",
        }
        cluster = PgCluster().start()
        try:
            report["turns"] = [
                measure_turns(folder, s, settings, runs, cluster) for s in settings["scopes"]
            ]
            report["commands"] = measure_commands(folder, settings, runs, cluster)
            report["workers"] = measure_workers(folder, settings, runs, cluster)
            report["commands_vs_baseline"] = baseline.commands_against(
                folder,
                settings["commands"],
                settings["baseline_runs"],
                lambda name: _database(cluster, name),
            )
            chats, per_chat = settings["cpu"]
            report["cpu_vs_baseline"] = baseline.cpu_against(
                folder, chats, per_chat, settings["baseline_runs"]
            )
            report["road"] = road.against(
                folder, chats, per_chat, settings["baseline_runs"], lambda n: _database(cluster, n)
            )
            report["metrics"] = metrics.against(folder, chats, per_chat, settings["baseline_runs"])
            report["pages"] = pages.run(
                folder, settings["pages"], lambda name: _database(cluster, name), cluster.data
            )
            report["history"] = measure_history(folder, settings, cluster)
            report["triggered"] = triggered.run(folder, args.quick)
        finally:
            cluster.stop()
        slow, lists, delay = settings["hol"]
        hol, alone = [], []
        for _ in range(runs):
            hol.append(headofline.run(slow, lists, delay))
            alone.append(headofline.run(0, lists, delay))
        report["head_of_line"] = {
            "slow_chats": slow,
            "list_chats": lists,
            "model_delay_s": delay,
            **median_of([{k: v for k, v in r.items() if k.endswith("_ms")} for r in hol]),
            "without_waiting_chats": median_of(
                [{k: v for k, v in r.items() if k in ("p50_ms", "p99_ms")} for r in alone]
            ),
        }
        report["memory"] = measure_memory(folder, settings["scopes"][-1], settings)
        scopes, requests = settings["web"]
        report["web"] = median_of_pages(web.run(folder, scopes, requests, runs))
        report["cache_prefix"] = prefix.run()
        report["compaction"] = compaction_cost.run()
        report["streaming"] = streaming.run(settings["streaming"])
        report["secrets"] = secret_recognisers.measure(args.quick)
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["targets"] = [{"target": t, "met": met, "figure": f} for t, met, f in targets(report)]
    print_table(report)
    Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"\nFigures written to {args.json} ({report['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

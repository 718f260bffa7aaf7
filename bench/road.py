"""Issue 35's figures: what one road for every block change (one change, one review, one write)
costs a `/pin add`, against the commit before it (1c7eede) in the same run: the bot process's CPU
per `/pin add` (`pinbot telegram`, SQLite, polling) and the PostgreSQL transactions and worker
CPU per `/pin add` through a webhook worker, the two trees alternating run by run.

`python -m bench.road [--runs N] [--quick] [--before COMMIT]` runs this part alone (against
another commit with --before); `python -m bench` runs it with everything else."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import baseline, cores, workers

BEFORE = "1c7eede"  # the last commit before one road


def against(
    folder: Path,
    chats: int,
    per_chat: int,
    runs: int,
    database: Callable[[str], str],
    before: str = BEFORE,
) -> dict[str, Any]:
    """This tree against the commit before (BEFORE unless named), alternating runs; medians
    and ratios (ours over before)."""
    with baseline.tree_of(before) as old:
        if old is None:
            return {"before": before, "available": False}
        pinned = cores.can_pin()
        found: dict[str, dict[str, list[float]]] = {}

        def record(name: str, tree: Path, value: float) -> None:
            side = "before" if tree == old else "ours"
            found.setdefault(name, {"ours": [], "before": []})[side].append(value)

        for run in range(runs):
            for tree in (baseline.ROOT, old):
                tag = "old" if tree == old else "ours"
                polling = workers.Setup("polling", "pin", tree=tree, pinned=pinned)
                figures = workers.measure(
                    polling, folder / f"road-poll-{tag}-{run}", chats, per_chat
                )
                record("polling_cpu_ms_per_pin_add", tree, figures["worker_cpu_ms_per_message"])
                url = database(f"road_{tag}_{run}")
                webhook = workers.Setup("webhook", "pin", 1, url, tree=tree, pinned=pinned)
                figures = workers.measure(
                    webhook, folder / f"road-hook-{tag}-{run}", chats, per_chat
                )
                record("postgres_cpu_ms_per_pin_add", tree, figures["worker_cpu_ms_per_message"])
                record(
                    "postgres_transactions_per_pin_add", tree, figures["transactions_per_message"]
                )
        report: dict[str, Any] = {"before": before, "available": True, "runs": runs}
        for name, sides in found.items():
            ours, then = statistics.median(sides["ours"]), statistics.median(sides["before"])
            report[name] = {
                "ours": round(ours, 3),
                "before": round(then, 3),
                "ours_over_before": round(ours / then, 3) if then else 0.0,
            }
        return report


def targets(report: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Issue 35: a `/pin add` costs no more CPU and no more PostgreSQL transactions than
    before one road, or than the commit the report was measured against (5% of run-to-run
    noise allowed on CPU)."""
    if not report.get("available"):
        return []
    before = report["before"]
    cpu = report["polling_cpu_ms_per_pin_add"]
    pg_cpu = report["postgres_cpu_ms_per_pin_add"]
    xacts = report["postgres_transactions_per_pin_add"]
    return [
        (
            f"CPU per /pin add (polling, SQLite) <= {before}'s",
            cpu["ours_over_before"] <= 1.05,
            f"{cpu['ours']} vs {cpu['before']} ms ({cpu['ours_over_before']}x)",
        ),
        (
            f"worker CPU per /pin add (webhook, PostgreSQL) <= {before}'s",
            pg_cpu["ours_over_before"] <= 1.05,
            f"{pg_cpu['ours']} vs {pg_cpu['before']} ms ({pg_cpu['ours_over_before']}x)",
        ),
        (
            f"PostgreSQL transactions per /pin add <= {before}'s",
            xacts["ours"] <= xacts["before"],
            f"{xacts['ours']} vs {xacts['before']}",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run issue 35's comparison alone and print it."""
    from bench.__main__ import _database
    from tests.pg import PgCluster

    parser = argparse.ArgumentParser(prog="python -m bench.road", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="alternating runs (medians)")
    parser.add_argument("--quick", action="store_true", help="few messages, one run")
    parser.add_argument("--chats", type=int, default=100, help="DM chats")
    parser.add_argument("--per-chat", type=int, default=10, help="/pin add per chat")
    parser.add_argument(
        "--before", default=BEFORE, help=f"the commit to measure against (default {BEFORE})"
    )
    args = parser.parse_args(argv)
    chats, per_chat, runs = args.chats, args.per_chat, args.runs
    if args.quick:
        chats, per_chat, runs = 10, 5, 1
    cluster = PgCluster().start()
    try:
        with tempfile.TemporaryDirectory(prefix="pinbot-road-") as name:
            report = against(
                Path(name), chats, per_chat, runs, lambda db: _database(cluster, db), args.before
            )
    finally:
        cluster.stop()
    print(json.dumps(report, indent=2))
    for target, met, figure in targets(report):
        print(f"{'met   ' if met else 'MISSED'} {target}: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 38's figure: what counting costs a `/pin add`. The bot process's CPU per `/pin add`
(`pinbot telegram`, SQLite, polling, as bench.road measures it) with metrics on
(`metrics.listen`, its /metrics read every second meanwhile, a harsher pace than Prometheus's
usual 15 s) against metrics off, in the same run, the two alternating run by run.

`python -m bench.metrics [--runs N] [--quick]` runs this part alone; `python -m bench` runs it
with everything else."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import cores, workers

TARGET = 1.05  # metrics on may cost at most 5% more CPU per /pin add than off


def against(folder: Path, chats: int, per_chat: int, runs: int) -> dict[str, Any]:
    """CPU per /pin add with metrics off and on, alternating (which goes first alternates
    too); medians and their ratio (on over off)."""
    pinned = cores.can_pin()
    found: dict[bool, list[float]] = {False: [], True: []}
    scrapes: list[int] = []
    for run in range(runs):
        for on in (False, True) if run % 2 == 0 else (True, False):
            setup = workers.Setup("polling", "pin", pinned=pinned, metrics=on)
            tag = "on" if on else "off"
            figures = workers.measure(setup, folder / f"metrics-{tag}-{run}", chats, per_chat)
            found[on].append(figures["worker_cpu_ms_per_message"])
            if on:
                scrapes.append(figures["scrapes"])
    off, with_metrics = statistics.median(found[False]), statistics.median(found[True])
    return {
        "runs": runs,
        "pinned": pinned,
        "pin_adds_per_run": chats * per_chat,
        "scrapes_per_run": statistics.median(scrapes),
        "off_cpu_ms_per_pin_add": round(off, 3),
        "on_cpu_ms_per_pin_add": round(with_metrics, 3),
        "on_over_off": round(with_metrics / off, 3) if off else 0.0,
        "samples": {"off": found[False], "on": found[True]},
    }


def targets(report: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Issue 38: with metrics on, CPU per /pin add within 5% of metrics off."""
    ratio = report["on_over_off"]
    return [
        (
            "CPU per /pin add (polling, SQLite) with metrics on within 5% of off",
            ratio <= TARGET,
            f"{report['on_cpu_ms_per_pin_add']} vs {report['off_cpu_ms_per_pin_add']} ms "
            f"({ratio}x)",
        )
    ]


def describe(report: dict[str, Any]) -> str:
    """The figures as one line of the benchmark's table."""
    where = "the bot on a core of its own" if report["pinned"] else "unpinned"
    return (
        f"Metrics on against off (polling /pin add, SQLite, median of {report['runs']} "
        f"alternating runs of {report['pin_adds_per_run']:,}, {where}, /metrics read every "
        f"{workers.SCRAPE_S:g} s): CPU {report['on_cpu_ms_per_pin_add']} ms against "
        f"{report['off_cpu_ms_per_pin_add']} ms a /pin add ({report['on_over_off']}x)"
    )


def main(argv: list[str] | None = None) -> int:
    """Run issue 38's comparison alone and print it."""
    parser = argparse.ArgumentParser(prog="python -m bench.metrics", description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="alternating runs (medians)")
    parser.add_argument("--quick", action="store_true", help="few messages, one run each")
    parser.add_argument("--chats", type=int, default=200, help="DM chats")
    parser.add_argument("--per-chat", type=int, default=10, help="/pin add per chat")
    args = parser.parse_args(argv)
    chats, per_chat, runs = args.chats, args.per_chat, args.runs
    if args.quick:
        chats, per_chat, runs = 10, 5, 1
    with tempfile.TemporaryDirectory(prefix="pinbot-metrics-") as name:
        report = against(Path(name), chats, per_chat, runs)
    print(json.dumps(report, indent=2))
    print(describe(report))
    for target, met, figure in targets(report):
        print(f"{'met   ' if met else 'MISSED'} {target}: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

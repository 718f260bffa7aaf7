"""An earlier commit measured beside this one in the same run: its tree is unpacked from git, and
each measurement runs in a fresh process on one tree or the other, the two alternating, so that
what the machine does meanwhile falls on both alike. Figures are medians of the runs."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import cores, workers

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "5d1093f"  # the release before the storage was written once (issue 24)
# Run in the measured tree's process: its own bench builds the store and measures commands.
_COMMANDS = """
import json, sys
from pathlib import Path
from bench import commands, data
path, count, url = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] or None
if url is None:
    data.build_sqlite(path, 0)
print(json.dumps(commands.run_ours(path, count, 100, url)))
"""


@contextlib.contextmanager
def tree_of(commit: str) -> Iterator[Path | None]:
    """The source tree of commit, unpacked in a temporary folder; None when this checkout does
    not have it (a shallow clone)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix=f"pinbot-{commit}-") as folder:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(folder, filter="data")
        yield Path(folder)


def run_in(tree: Path, program: str, *args: str) -> Any:
    """Run program (Python source printing one JSON value last) with tree's packages first on
    the path; returns that value."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", program, *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"measuring in {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def alternating(runs: int, measure: Callable[[Path, int], float], old: Path) -> dict[str, float]:
    """measure(tree, run) for this tree and old, alternating, runs times each; the medians and
    this tree's over the old one's."""
    ours, theirs = [], []
    for run in range(runs):
        ours.append(measure(ROOT, run))
        theirs.append(measure(old, run))
    median_ours, median_old = statistics.median(ours), statistics.median(theirs)
    return {
        "ours": round(median_ours, 3),
        "baseline": round(median_old, 3),
        "ours_over_baseline": round(median_ours / median_old, 3) if median_old else 0.0,
    }


def commands_against(
    folder: Path, count: int, runs: int, database: Callable[[str], str]
) -> dict[str, Any]:
    """Committed /pin add, edit, remove per second on SQLite and PostgreSQL, this tree against
    BASELINE, alternating runs (database(name) makes an empty PostgreSQL database)."""
    with tree_of(BASELINE) as old:
        if old is None:
            return {"baseline": BASELINE, "available": False}

        def sqlite(tree: Path, run: int) -> float:
            path = folder / f"vs-{tree.name}-{run}.sqlite3"
            return float(run_in(tree, _COMMANDS, str(path), str(count), ""))

        def postgres(tree: Path, run: int) -> float:
            url = database(f"vs_{abs(hash(str(tree))) % 10_000}_{run}")
            return float(run_in(tree, _COMMANDS, str(folder / "unused"), str(count), url))

        return {
            "baseline": BASELINE,
            "available": True,
            "runs": runs,
            "sqlite": alternating(runs, sqlite, old),
            "postgres": alternating(runs, postgres, old),
        }


def cpu_against(folder: Path, chats: int, per_chat: int, runs: int) -> dict[str, Any]:
    """The bot process's CPU milliseconds per message, this tree against BASELINE, alternating
    runs: `pinbot telegram` on SQLite in polling and in webhook mode, answering `/pin add` and
    chat turns (a fake model); the bot on one core and everything else on the other where the
    machine has two (bench.workers)."""
    with tree_of(BASELINE) as old:
        if old is None:
            return {"baseline": BASELINE, "available": False}
        pinned = cores.can_pin()
        figures: dict[str, Any] = {}
        for mode, kind in itertools.product(("polling", "webhook"), ("pin", "chat")):

            def cpu(tree: Path, run: int, mode: Any = mode, kind: Any = kind) -> float:
                setup = workers.Setup(mode, kind, tree=tree, pinned=pinned)
                place = folder / f"cpu-{mode}-{kind}-{'old' if tree == old else 'ours'}-{run}"
                figures = workers.measure(setup, place, chats, per_chat)
                return float(figures["worker_cpu_ms_per_message"])

            figures[f"{mode}_{kind}"] = alternating(runs, cpu, old)
        return {"baseline": BASELINE, "available": True, "runs": runs, "pinned": pinned, **figures}

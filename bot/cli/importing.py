"""`pinbot import`: blocks from a JSON file, checked with /pin's rules, all or nothing."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bot.cli.command import URL_ENV, Subcommand, load
from bot.cli.store import open_store
from bot.config import Config
from bot.core.blocks import BlockOps
from bot.core.clock import utc_now
from bot.core.policy import BlockPolicy
from bot.core.transfer import apply_import, describe_changes, plan_import, read_document


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the JSON file to import")
    parser.add_argument("--dry-run", action="store_true", help="report what would change")


async def _import(config: Config, file: str, dry_run: bool) -> int:
    try:
        document, repeated = read_document(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"pinbot: cannot read {file}: {error}", file=sys.stderr)
        return 1
    except RecursionError:
        print(f"pinbot: cannot read {file}: it is nested too deeply", file=sys.stderr)
        return 1
    policy = BlockPolicy(config.pins)
    plan = plan_import(document, policy, utc_now())
    problems = repeated or plan.problems
    if problems:
        for problem in problems:
            print(f"problem: {problem}")
        print(f"{len(problems)} problem(s); nothing was imported")
        return 1
    # A dry run against a SQLite file that does not exist yet compares with an empty store.
    async with await open_store(config, create=not dry_run) as store:
        for line in await describe_changes(store, plan) or ["no changes"]:
            print(line)
        if dry_run:
            print("dry run: nothing was written")
            return 0
        written = await apply_import(BlockOps(store, policy), plan)
    if plan.problems:
        for problem in plan.problems:
            print(f"problem: {problem}")
        print(f"{len(plan.problems)} problem(s); nothing was imported")
        return 1
    print(f"imported {written} block(s) in {len(plan.scopes)} scope(s)")
    return 0


def _run(args: argparse.Namespace) -> int:
    return asyncio.run(_import(load(args.config), args.file, args.dry_run))


COMMAND = Subcommand(
    "import",
    "load blocks from a JSON file (all or nothing)",
    URL_ENV,
    "pinbot import blocks.json --config config.yaml --dry-run",
    _arguments,
    _run,
)

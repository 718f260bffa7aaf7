"""`pinbot import`: blocks from a JSON file, checked with /pin's rules, all or nothing: a pinbot
export, or a Sticky Context file (`--scope` names the scope its slots go to)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from bot.cli.command import URL_ENV, Subcommand, load
from bot.cli.store import open_store
from bot.clock import utc_now
from bot.config import Config
from bot.core.blocks import (
    BlockOps,
    BlockPolicy,
    apply_import,
    apply_sticky,
    describe_changes,
    is_sticky_file,
    plan_import,
    plan_sticky,
    read_document,
)
from storage.models import Level

# An import is read whole into memory (several times its size once parsed): a file larger than
# any export of a real store is refused before it is read.
MAX_FILE_BYTES = 256 * 1024 * 1024


SUMMARY = "load blocks from a JSON file (all or nothing): a pinbot export or a Sticky Context file"
FORMS = """
A pinbot export (what pinbot export writes) names its scopes and levels itself:
  pinbot import blocks.json [--dry-run]

A Sticky Context file (sticky-context.json, version 1 or 2; only content is required, version 2
adds sensitive):
  {"version": 2, "slots": {"<key>": {"content": "...", "priority": 0, "pinned": false,
    "sensitive": false, "created": "2026-01-01T12:00:00Z", "updated": "2026-01-02T09:30:00Z"}}}
goes into the one scope --scope names, at --level (default: strong in a DM, context in a group):
  pinbot import sticky-context.json --scope telegram:direct:42 [--level strong|context] [--dry-run]
A key that is new adds a block; a key the scope holds updates its block where the file differs
(each a new version; /pin undo takes the whole import back); an unchanged slot stays as it is."""


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = SUMMARY + "\n" + FORMS
    parser.add_argument("file", help="the JSON file to import")
    parser.add_argument("--dry-run", action="store_true", help="report what would change")
    parser.add_argument(
        "--scope",
        help="a Sticky Context file's scope: the key its slots go to (e.g. telegram:direct:42)",
    )
    parser.add_argument(
        "--level",
        choices=[level.value for level in Level],
        help="a Sticky Context file's level (default: strong in a DM, context in a group)",
    )


def _refuse(problems: list[str], what: str = "imported") -> int:
    for problem in problems:
        print(f"problem: {problem}")
    print(f"{len(problems)} problem(s); nothing was {what}")
    return 1


async def _import_sticky(
    config: Config, document: object, scope: str | None, level: str | None, dry_run: bool
) -> int:
    """A Sticky Context file's slots brought into one scope, all or nothing: new keys added,
    the blocks of keys the scope holds updated where the file differs."""
    if scope is None:
        return _refuse(
            [
                "this is a Sticky Context file: name the scope its slots go to with --scope "
                "(e.g. --scope telegram:direct:42)"
            ]
        )
    policy = BlockPolicy(config.pins)
    plan = plan_sticky(document, scope, Level(level) if level else None, policy, utc_now())
    if plan.problems:
        return _refuse(plan.problems)
    async with await open_store(config, create=not dry_run) as store:
        written = await apply_sticky(BlockOps(store, policy), plan, dry_run=dry_run)
    if plan.problems:
        return _refuse(plan.problems)
    if not plan.added and not plan.changed:  # the scope holds the file already: said once
        print("no changes")
        return 0
    parts = [
        f"{name} {', '.join(labels)}"
        for name, labels in (("add", plan.added), ("change", plan.changed))
        if labels
    ]
    print(f"{plan.scope}: " + "; ".join(parts))
    if dry_run:
        print("dry run: nothing was written")
        return 0
    print(f"imported {written} slot(s) into {plan.scope}")
    return 0


# Per slot, besides its content: its key (a label, at most 64 characters) and the fields and
# times of the format, as JSON writes them with room to spare.
_SLOT_OVERHEAD_BYTES = 4096


def sticky_file_bytes(config: Config) -> int:
    """The largest Sticky Context file that could fit a scope: every block the scope may hold,
    each of the longest content, every character escaped as JSON may (`\\uXXXX`, 6 bytes)."""
    pins = config.pins
    return pins.max_blocks_per_session * (pins.max_content_length * 6 + _SLOT_OVERHEAD_BYTES)


async def _import(
    config: Config,
    file: str,
    dry_run: bool,
    scope: str | None = None,
    level: str | None = None,
) -> int:
    try:
        size = Path(file).stat().st_size
        if size > MAX_FILE_BYTES:
            print(
                f"pinbot: cannot read {file}: it is {size:,} bytes, over the {MAX_FILE_BYTES:,} "
                "an import reads; to copy a whole store, use pinbot transfer",
                file=sys.stderr,
            )
            return 1
        if scope is not None and size > (most := sticky_file_bytes(config)):
            # Only a Sticky Context file takes --scope; one that could not fit the scope's
            # limits is refused before it is read, however large.
            return _refuse(
                [
                    f"the file is {size:,} bytes; a Sticky Context file that fits "
                    f"{config.pins.max_blocks_per_session} blocks "
                    "(pins.max_blocks_per_session) of at most "
                    f"{config.pins.max_content_length:,} characters (pins.max_content_length) "
                    f"is at most {most:,} bytes"
                ]
            )
        document, repeated = read_document(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"pinbot: cannot read {file}: {error}", file=sys.stderr)
        return 1
    except RecursionError:
        print(f"pinbot: cannot read {file}: it is nested too deeply", file=sys.stderr)
        return 1
    if repeated:
        return _refuse(repeated)
    if is_sticky_file(document):
        return await _import_sticky(config, document, scope, level, dry_run)
    if scope is not None or level is not None:
        return _refuse(
            [
                "--scope and --level are for a Sticky Context file; a pinbot export names "
                "its scopes and levels itself"
            ]
        )
    return await _import_export(config, document, dry_run)


async def _import_export(config: Config, document: Any, dry_run: bool) -> int:
    """Import a pinbot export: what it changes, then (unless a dry run) the change."""
    policy = BlockPolicy(config.pins)
    plan = plan_import(document, policy, utc_now())
    if plan.problems:
        return _refuse(plan.problems)
    # A dry run against a SQLite file that does not exist yet compares with an empty store.
    async with await open_store(config, create=not dry_run) as store:
        lines = await describe_changes(store, plan)
        if not lines:  # the store holds the file already: said once, nothing written
            print("no changes")
            return 0
        for line in lines:
            print(line)
        if dry_run:
            print("dry run: nothing was written")
            return 0
        written = await apply_import(BlockOps(store, policy), plan)
    if plan.problems:
        return _refuse(plan.problems)
    print(f"imported {written} block(s) in {len(plan.scopes)} scope(s)")
    return 0


def _run(args: argparse.Namespace) -> int:
    return asyncio.run(_import(load(args.config), args.file, args.dry_run, args.scope, args.level))


COMMAND = Subcommand(
    "import",
    SUMMARY,
    URL_ENV,
    "pinbot import blocks.json --config config.yaml --dry-run",
    _arguments,
    _run,
)

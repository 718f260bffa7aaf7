"""`pinbot export`: every block of every scope as JSON, or (--user) everything held about one
person, as `/export me` gives it to them."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from bot.cli.command import URL_ENV, Subcommand, load
from bot.cli.person import add_user_argument, person_commands, person_of
from bot.cli.store import open_store, write_private
from bot.clock import utc_now
from bot.config import Config
from bot.core.blocks import export_document


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", help="file to write (default: standard output)")
    add_user_argument(parser, "everything held about")
    parser.add_argument(
        "--with-history",
        action="store_true",
        help="include every block's kept versions (an import restores them as they are)",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="write sensitive blocks as stored, not redacted (an export to import again)",
    )


async def _export(
    config: Config, output: str | None, *, with_history: bool, raw: bool = False
) -> int:
    async with await open_store(config, create=False) as store:
        document = await export_document(store, utc_now(), with_history=with_history, raw=raw)
    text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    if output:
        write_private(Path(output), text)
        print(f"exported to {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


async def _export_person(config: Config, user: str, output: str | None) -> int:
    platform, who = person_of(user)
    async with person_commands(config) as people:
        reply = await people.export_me(platform, who, True, "me")
    assert reply.document is not None  # asked as the person, in a direct chat: always one
    text = reply.document.data.decode()
    if output:
        write_private(Path(output), text)
        print(f"exported {user} to {output}", file=sys.stderr)
    else:
        sys.stdout.write(text + "\n")
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.user is not None:
        return asyncio.run(_export_person(load(args.config), args.user, args.output))
    return asyncio.run(
        _export(load(args.config), args.output, with_history=args.with_history, raw=args.raw)
    )


COMMAND = Subcommand(
    "export",
    "write every block of every scope as JSON (--user: everything held about one person)",
    URL_ENV,
    "pinbot export --config config.yaml -o blocks.json",
    _arguments,
    _run,
)

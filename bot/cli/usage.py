"""`pinbot usage`: model token usage per user and per group, with the cache hit ratio."""

from __future__ import annotations

import argparse
import asyncio
import json

from bot.cli.command import URL_ENV, Subcommand, load, positive
from bot.cli.store import open_store
from bot.clock import utc_now
from bot.config import Config
from bot.core.conversation import usage_document, usage_table


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--days", type=positive, default=30, help="the last N UTC days, today included (30)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


async def _usage(config: Config, days: int, *, as_json: bool) -> int:
    async with await open_store(config, create=False) as store:
        document = await usage_document(store, days, utc_now(), config.pricing.currency)
    print(json.dumps(document, ensure_ascii=False, indent=2) if as_json else usage_table(document))
    return 0


def _run(args: argparse.Namespace) -> int:
    return asyncio.run(_usage(load(args.config), args.days, as_json=args.json))


COMMAND = Subcommand(
    "usage",
    "model token usage per user and per group, with the cache hit ratio",
    URL_ENV,
    "pinbot usage --config config.yaml --days 7 --json",
    _arguments,
    _run,
)

"""`pinbot migrate`: apply pending schema steps to the configured store; print its version."""

from __future__ import annotations

import argparse
import asyncio

from bot.cli.command import URL_ENV, Subcommand, load, no_arguments
from bot.cli.store import open_store
from bot.config import Config


async def _migrate(config: Config) -> int:
    async with await open_store(config) as store:
        version = await store.schema_version()
    kind = "PostgreSQL" if config.storage.url_env else f"SQLite {config.storage.path}"
    print(f"{kind}: schema version {version}, up to date")
    return 0


def _run(args: argparse.Namespace) -> int:
    return asyncio.run(_migrate(load(args.config)))


COMMAND = Subcommand(
    "migrate",
    "apply pending schema migrations to the configured store and print its version",
    URL_ENV,
    "PINBOT_DATABASE_URL=postgresql://... pinbot migrate --config config.yaml",
    no_arguments,
    _run,
)

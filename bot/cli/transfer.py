"""`pinbot transfer`: copy everything from one store into another, empty one."""

from __future__ import annotations

import argparse
import asyncio

from bot.cli.command import Subcommand, load
from bot.cli.store import open_store
from bot.config import ConfigError


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from-config", required=True, help="the config of the store to copy")
    parser.add_argument("--to-config", required=True, help="the config of the empty target")


async def _transfer(source_file: str, target_file: str) -> int:
    source_config, target_config = load(source_file), load(target_file)
    async with await open_store(source_config, create=False) as source:
        dump = await source.dump()
    async with await open_store(target_config) as target:
        if not await target.is_empty():
            raise ConfigError(
                f"the store of {target_file} is not empty; transfer only fills an empty store"
            )
        await target.load(dump)
    counts = ", ".join(f"{len(rows)} {table}" for table, rows in dump.items())
    print(f"copied {counts}")
    return 0


def _run(args: argparse.Namespace) -> int:
    return asyncio.run(_transfer(args.from_config, args.to_config))


COMMAND = Subcommand(
    "transfer",
    "copy everything (blocks, audit log, usage, history, updates) to an empty store",
    "  the variables named by each config's storage.url_env, when set",
    "pinbot transfer --from-config sqlite.yaml --to-config postgres.yaml",
    _arguments,
    _run,
    config=False,
)

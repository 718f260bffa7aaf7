"""`pinbot transfer`: copy everything from one store into another, empty one. A raw copy of
every row (`Store.dump`, `Store.load`), blocks and versions too: it moves a database, changes no
block, so no change is reviewed or recorded (`pinbot import` is the reviewed way in)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from bot.cli.command import Subcommand, load
from bot.cli.store import database_url, open_store
from bot.config import Config, ConfigError


def _source_exists(config: Config, config_file: str) -> None:
    """ConfigError when the source is a SQLite file that is not there: a mistyped path would
    otherwise copy an empty store and say it succeeded."""
    path = config.storage.path
    if database_url(config) is None and path != ":memory:" and not Path(path).is_file():
        what = "is a directory, not a database file" if Path(path).is_dir() else "does not exist"
        raise ConfigError(
            f"storage.path of {config_file}: the SQLite database {path} {what}; "
            "nothing was copied (name the file to copy from)"
        )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from-config", required=True, help="the config of the store to copy")
    parser.add_argument("--to-config", required=True, help="the config of the empty target")


async def _transfer(source_file: str, target_file: str) -> int:
    source_config, target_config = load(source_file), load(target_file)
    _source_exists(source_config, source_file)
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

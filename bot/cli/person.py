"""What `pinbot export --user` and `pinbot forget --user` share: the person named on the command
line, and the same code the chat's `/export me` and `/forget me` run."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.cli.store import open_store
from bot.config import Config, ConfigError
from bot.core.blocks import BlockOps, BlockPolicy
from bot.core.commands import PersonCommands, PersonData


def add_user_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """The --user option: platform:id."""
    parser.add_argument(
        "--user",
        metavar="PLATFORM:ID",
        help=f"{what} one person: telegram:<user id>, feishu:<open_id> or console:<id>",
    )


def person_of(text: str) -> tuple[str, str]:
    """--user's platform and id; ConfigError saying the form when it is not one."""
    platform, _, user = text.partition(":")
    if platform not in ("telegram", "feishu", "console") or not user or ":" in user:
        raise ConfigError(
            f"--user {text!r} is not a person: write telegram:<user id>, feishu:<open_id> or "
            "console:<id> (as /whoami shows them)"
        )
    return platform, user


@asynccontextmanager
async def person_commands(config: Config) -> AsyncIterator[PersonCommands]:
    """The chat's person commands over the configured store."""
    async with await open_store(config, create=False) as store:
        ops = BlockOps(store, BlockPolicy(config.pins))
        yield PersonCommands(PersonData(store, ops))

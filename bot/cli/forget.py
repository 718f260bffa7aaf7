"""`pinbot forget --user`: remove everything held about one person, as `/forget me confirm` does
(without --yes, say what would go)."""

from __future__ import annotations

import argparse
import asyncio

from bot.cli.command import URL_ENV, Subcommand, load
from bot.cli.person import add_user_argument, person_commands, person_of
from bot.config import Config, ConfigError
from bot.core.entry import Reply


def _arguments(parser: argparse.ArgumentParser) -> None:
    add_user_argument(parser, "remove everything held about")
    parser.add_argument(
        "--yes", action="store_true", help="remove it (without: only say what would go)"
    )


async def _forget(config: Config, user: str, yes: bool) -> int:
    platform, who = person_of(user)
    async with person_commands(config) as people:
        reply: Reply = await people.forget_me(platform, who, True, "me confirm" if yes else "me")
    if yes:
        print(reply.text.replace("about you", f"about {user}"))
        return 0 if reply.outcome.value == "done" else 1
    print(
        reply.text.split(" To go ahead")[0].replace("about you", f"about {user}")
        + f" Run again with --yes to remove it: pinbot forget --user {user} --yes"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.user is None:
        raise ConfigError("say whose data to remove: pinbot forget --user PLATFORM:ID --yes")
    return asyncio.run(_forget(load(args.config), args.user, args.yes))


COMMAND = Subcommand(
    "forget",
    "remove everything held about one person (--user PLATFORM:ID --yes); cannot be undone",
    URL_ENV,
    "pinbot forget --config config.yaml --user telegram:42 --yes",
    _arguments,
    _run,
)

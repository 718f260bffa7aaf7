"""`pinbot console`: talk to the bot in this terminal, as any user, in a DM or a group."""

from __future__ import annotations

import argparse
import asyncio

from bot.cli.command import LLM_KEY, Subcommand, load
from bot.cli.runtime import running_core
from bot.cli.store import database_in_use
from bot.config import Config, ConfigError
from bot.core.people import console_id_ok


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user", required=True, help="your sender id")
    parser.add_argument("--group", help="speak in this group id instead of a DM")
    parser.add_argument("--topic", help="forum topic id inside --group")


def _run(args: argparse.Namespace) -> int:
    if args.topic and not args.group:
        raise ConfigError("--topic needs --group: topics exist only inside groups")
    for flag, value in (("--user", args.user), ("--group", args.group), ("--topic", args.topic)):
        if value is not None and not console_id_ok(value):
            raise ConfigError(
                f"{flag} {value!r}: ids are 1 to 128 characters without ':', spaces or control "
                "characters"
            )
    # The console shares the terminal with the conversation: only problems by default.
    config = load(args.config, quiet=True)
    return asyncio.run(_console(config, args))


async def _console(config: Config, args: argparse.Namespace) -> int:
    from bot.adapters.console import console_conversation, run_console

    async with running_core(config) as pinbot:
        conversation = console_conversation(args.user, args.group, args.topic)
        await run_console(pinbot, conversation, database=database_in_use(config))
    return 0


COMMAND = Subcommand(
    "console",
    "talk to the bot in this terminal, one message per line",
    LLM_KEY,
    "pinbot console --config config.yaml --user 42 [--group -100123]",
    _arguments,
    _run,
)

"""`pinbot`: the command line entry point."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from bot.config import Config, ConfigError, load_config
from bot.core.bot import Pinbot
from bot.llm import build_model
from storage.sqlite import Store

log = logging.getLogger("pinbot")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pinbot", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    console = commands.add_parser("console", help="talk to the bot in this terminal")
    console.add_argument("--config", help="YAML config file (default: embedded defaults)")
    console.add_argument("--user", required=True, help="your sender id")
    console.add_argument("--group", help="speak in this group id instead of a DM")
    console.add_argument("--topic", help="forum topic id inside --group")
    check = commands.add_parser("check-config", help="validate the config file")
    check.add_argument("--config", help="YAML config file (default: embedded defaults)")
    return parser


def setup_logging(config: Config) -> None:
    """Configure the root logger from `logging.*`, on stderr."""
    logging.basicConfig(
        level=config.logging.level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    # The HTTP libraries log request URLs at INFO, and Telegram's carry the bot token.
    for noisy in ("httpx", "httpcore", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def _console(config: Config, args: argparse.Namespace) -> int:
    from bot.adapters.console import console_conversation, run_console

    if args.topic and not args.group:
        raise ConfigError("--topic needs --group: topics exist only inside groups")
    model = build_model(config.llm)
    store = await Store.open(config.storage.path)
    try:
        bot = Pinbot(config, store, model)
        await run_console(bot, console_conversation(args.user, args.group, args.topic))
    finally:
        await store.close()
        await model.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run a pinbot subcommand; returns the process exit status."""
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
        setup_logging(config)
        if args.command == "check-config":
            build_model(config.llm)
            print(f"configuration ok ({args.config or 'embedded defaults'})")
            return 0
        return asyncio.run(_console(config, args))
    except ConfigError as error:
        print(f"pinbot: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

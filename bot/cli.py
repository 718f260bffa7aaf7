"""`pinbot`: the command line entry point."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Sequence

from bot.config import Config, ConfigError, load_config
from bot.core.bot import Pinbot
from bot.llm import ChatModel, build_model
from bot.logs import REDACTOR, setup_logging
from storage.sqlite import Store


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pinbot", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    console = commands.add_parser("console", help="talk to the bot in this terminal")
    console.add_argument("--user", required=True, help="your sender id")
    console.add_argument("--group", help="speak in this group id instead of a DM")
    console.add_argument("--topic", help="forum topic id inside --group")
    commands.add_parser("telegram", help="run the bot on Telegram")
    commands.add_parser("feishu", help="run the bot on Feishu (Lark)")
    commands.add_parser("check-config", help="validate the config file")
    for sub in commands.choices.values():
        sub.add_argument("--config", help="YAML config file (default: embedded defaults)")
    return parser


@contextlib.asynccontextmanager
async def _running_core(config: Config) -> AsyncIterator[Pinbot]:
    model: ChatModel = build_model(config.llm)
    try:
        store = await Store.open(config.storage.path)
        try:
            yield Pinbot(config, store, model)
        finally:
            await store.close()
    finally:
        await model.close()


async def _console(config: Config, args: argparse.Namespace) -> int:
    from bot.adapters.console import console_conversation, run_console

    if args.topic and not args.group:
        raise ConfigError("--topic needs --group: topics exist only inside groups")
    async with _running_core(config) as pinbot:
        await run_console(pinbot, console_conversation(args.user, args.group, args.topic))
    return 0


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM, for a graceful shutdown."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop


async def _telegram(config: Config) -> int:
    from bot.adapters.telegram import TelegramFrontend, run_telegram

    stop = _stop_on_signals()
    async with _running_core(config) as pinbot:
        frontend = TelegramFrontend.from_config(pinbot, config.telegram)
        await run_telegram(frontend, stop)
    return 0


async def _feishu(config: Config) -> int:
    from bot.adapters.feishu import FeishuFrontend, run_feishu

    stop = _stop_on_signals()
    async with _running_core(config) as pinbot:
        frontend = FeishuFrontend.from_config(pinbot, config.feishu)
        await run_feishu(frontend, stop)
    return 0


def _register_secrets(config: Config) -> None:
    import os

    feishu = config.feishu
    for variable in (config.llm.api_key_env, config.telegram.token_env,
                     config.telegram.webhook_secret_env, feishu.app_secret_env,
                     feishu.verification_token_env, feishu.encrypt_key_env):
        REDACTOR.add(os.environ.get(variable, ""))


def main(argv: Sequence[str] | None = None) -> int:
    """Run a pinbot subcommand; returns the process exit status."""
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
        setup_logging(config.logging)
        _register_secrets(config)
        if args.command == "check-config":
            build_model(config.llm)
            print(f"configuration ok ({args.config or 'embedded defaults'})")
            return 0
        if args.command == "telegram":
            return asyncio.run(_telegram(config))
        if args.command == "feishu":
            return asyncio.run(_feishu(config))
        return asyncio.run(_console(config, args))
    except ConfigError as error:
        print(f"pinbot: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""`pinbot telegram`: the bot on Telegram, polling or as a webhook worker."""

from __future__ import annotations

import argparse
import asyncio

from bot.cli.command import LLM_KEY, Subcommand, load, no_arguments
from bot.cli.runtime import running_core, serve, stop_on_signals
from bot.cli.store import database_in_use
from bot.config import Config
from bot.metrics.listener import Health, counting, serving


async def _telegram(config: Config) -> int:
    from bot.adapters.telegram import TelegramFrontend

    stop = stop_on_signals()
    with counting(config):
        async with running_core(config) as pinbot:
            frontend = TelegramFrontend.from_config(pinbot, config.telegram)
            webhook = config.telegram.mode == "webhook"
            health = pinbot.probe(
                lambda store, clock: Health(store, frontend.not_ready, inbox=webhook, clock=clock)
            )
            told: list[str] = []  # where metrics listen: said once it serves
            async with serving(config, health, told=told):
                await serve(frontend, stop, database=database_in_use(config), told=told)
    return 0


def _run(args: argparse.Namespace) -> int:
    return asyncio.run(_telegram(load(args.config, serves_metrics=True)))


COMMAND = Subcommand(
    "telegram",
    "run the bot on Telegram (polling, or webhook with telegram.mode: webhook)",
    "  TELEGRAM_BOT_TOKEN   the bot's token from @BotFather (telegram.token_env)\n"
    "  TELEGRAM_WEBHOOK_SECRET  webhook mode only (telegram.webhook_secret_env)\n" + LLM_KEY,
    "TELEGRAM_BOT_TOKEN=123456:ABC... pinbot telegram --config config.yaml",
    no_arguments,
    _run,
)

"""`pinbot feishu`: the bot on Feishu (Lark), by webhook or long connection."""

from __future__ import annotations

import argparse
import asyncio

from bot.cli.command import LLM_KEY, Subcommand, load, no_arguments
from bot.cli.runtime import running_core, serve, stop_on_signals
from bot.cli.store import database_in_use
from bot.config import Config
from bot.metrics.listener import Health, counting, serving


async def _feishu(config: Config) -> int:
    from bot.adapters.feishu import FeishuFrontend  # lark-oapi takes seconds to import

    stop = stop_on_signals()
    with counting(config):
        async with running_core(config) as pinbot:
            frontend = FeishuFrontend.from_config(pinbot, config.feishu)
            health = pinbot.probe(
                lambda store, clock: Health(store, frontend.not_ready, inbox=True, clock=clock)
            )
            told: list[str] = []  # where metrics listen: said once it serves
            async with serving(config, health, told=told):
                await serve(frontend, stop, database=database_in_use(config), told=told)
    return 0


def _run(args: argparse.Namespace) -> int:
    return asyncio.run(_feishu(load(args.config, serves_metrics=True)))


COMMAND = Subcommand(
    "feishu",
    "run the bot on Feishu (Lark): webhook or long connection",
    "  FEISHU_APP_SECRET    the app's secret (feishu.app_secret_env)\n"
    "  FEISHU_VERIFICATION_TOKEN  webhook mode only (feishu.verification_token_env)\n"
    "  the variable named by feishu.encrypt_key_env, if set\n" + LLM_KEY,
    "FEISHU_APP_SECRET=... FEISHU_VERIFICATION_TOKEN=... pinbot feishu --config config.yaml",
    no_arguments,
    _run,
)

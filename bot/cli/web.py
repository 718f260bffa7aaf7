"""`pinbot web`: the operator's web page, until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging

from bot.cli.command import URL_ENV, Subcommand, load, no_arguments
from bot.cli.runtime import stop_on_signals
from bot.cli.store import database_in_use, open_store
from bot.config import Config, secret_from_env
from bot.metrics.listener import Health, counting, serving

log = logging.getLogger("pinbot")


async def _web(config: Config) -> int:
    from bot.serving import serve_app
    from bot.web.app import WebPage

    token = secret_from_env(config.web.token_env, "The web page's sign-in token")
    stop = stop_on_signals()
    with counting(config):
        async with await open_store(config) as store, serving(config, Health(store)):
            page = WebPage(store, config, token)
            runner, port = await serve_app(
                page.app(), host=config.web.host, port=config.web.port, port_setting="web.port"
            )
            host = f"[{config.web.host}]" if ":" in config.web.host else config.web.host
            log.info("web page started (http://%s:%d/)", host, port)
            # And said at any log level, on stdout: an operator started it to open this address.
            print(
                f"pinbot web: http://{host}:{port}/ (sign in with ${config.web.token_env}); "
                f"database {database_in_use(config)}",
                flush=True,
            )
            try:
                await stop.wait()
            finally:
                await runner.cleanup()
    return 0


def _run(args: argparse.Namespace) -> int:
    return asyncio.run(_web(load(args.config, serves_metrics=True)))


COMMAND = Subcommand(
    "web",
    "serve the operator's web page (web.host:web.port): browse, and change shared blocks",
    "  PINBOT_WEB_TOKEN     the sign-in token (web.token_env)\n" + URL_ENV,
    "PINBOT_WEB_TOKEN=$(openssl rand -hex 24) pinbot web --config config.yaml",
    no_arguments,
    _run,
)

"""The running bot for the subcommands that serve: the store, the model and the core, opened
together and closed in order; and a frontend run until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Sequence

from bot.adapters.kit import Frontend
from bot.cli.store import open_store
from bot.config import Config
from bot.core.entry import Pinbot
from bot.llm.router import Models
from bot.metrics.model import metered

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def running_core(config: Config) -> AsyncIterator[Pinbot]:
    """The core over the configured store and models (llm's and each llm.models entry's,
    counted when metrics are on), closed (store, then models) on exit."""
    models = Models.from_config(config.llm, wrap=metered)
    try:
        store = await open_store(config)
        try:
            yield Pinbot(config, store, models)
        finally:
            await store.close()
    finally:
        await models.close()


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM, for a graceful shutdown."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop


async def serve(
    frontend: Frontend, stop: asyncio.Event, *, database: str = "", told: Sequence[str] = ()
) -> None:
    """Start frontend and run it until stop is set, then stop it gracefully. A start that keeps
    retrying (the platform cannot be reached yet) still ends when stop is set. Once started,
    the database in use is logged, and told (where metrics listen): a start refused says only
    why."""
    starting = asyncio.ensure_future(frontend.start())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        return
    starting.result()  # a start that failed for good raises here
    if database:
        log.info("serving; database: %s", database)
    for line in told:
        log.info("%s", line)
    try:
        await stopping
    finally:
        await frontend.stop()

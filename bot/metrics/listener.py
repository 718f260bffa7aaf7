"""The metrics and health listener of a long-running command (`metrics.listen`): GET /metrics
(Prometheus text format), /healthz (200 while the process runs its loop) and /readyz (200 only
when the store answers with the current schema and the platform connection works)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from bot import metrics, package_version
from bot.config import Config
from bot.core.clock import Clock, utc_now
from bot.metrics import Meters
from storage import Store
from storage.schema import LATEST

log = logging.getLogger(__name__)

# A check never waits longer than this on the store: a database that stopped answering makes
# /readyz answer 503 at once, not hang the load balancer's probe.
STORE_CHECK_S = 2.0
# Why the platform connection is not working now (None: it is).
PlatformCheck = Callable[[], str | None]


@contextlib.contextmanager
def counting(config: Config) -> Iterator[Meters | None]:
    """Count (bot.metrics) meanwhile when metrics.listen is set; the meters, or None."""
    if config.metrics.address is None:
        yield None
        return
    meters = metrics.enable(
        version=package_version(), model=config.llm.model, currency=config.pricing.currency
    )
    try:
        yield meters
    finally:
        metrics.disable()


class Health:
    """Readiness: the store answers, its schema is current, and the platform connection (if
    any) works; and the figures read at each scrape (readiness, the inbox of a webhook
    worker)."""

    def __init__(
        self,
        store: Store,
        platform: PlatformCheck | None = None,
        *,
        inbox: bool = False,
        clock: Clock = utc_now,
    ) -> None:
        self._store = store
        self._platform = platform
        self._inbox = inbox
        self._clock = clock

    async def not_ready(self) -> str | None:
        """Why this process is not ready to serve, in one line; None when it is."""
        try:
            version = await asyncio.wait_for(self._store.schema_version(), STORE_CHECK_S)
        except TimeoutError:
            return f"the database did not answer within {STORE_CHECK_S:g} s"
        except Exception as error:  # whatever the driver says, the store does not answer
            return f"the database cannot be reached ({type(error).__name__})"
        if version != LATEST:
            return (
                f"the database schema is at step {version} and this pinbot needs step {LATEST}: "
                "run pinbot migrate"
            )
        return self._platform() if self._platform is not None else None

    async def refresh(self, meters: Meters) -> None:
        """Bring the figures read at scrape time up to date: readiness, and the updates waiting
        in this worker's chats (left as they were when the store does not answer)."""
        meters.ready.set(0 if await self.not_ready() else 1)
        if not self._inbox:
            return
        try:
            waiting, oldest = await asyncio.wait_for(self._store.waiting_here(), STORE_CHECK_S)
        except Exception:  # readiness says so; the last figures stand meanwhile
            return
        meters.waiting.set(waiting)
        now = self._clock().timestamp()
        meters.oldest_wait.set(max(0.0, now - oldest) if oldest is not None else 0.0)


def application(meters: Meters, health: Health) -> web.Application:
    """The listener's routes."""

    async def scrape(request: web.Request) -> web.Response:
        await health.refresh(meters)
        return web.Response(
            body=generate_latest(meters.registry),
            headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4},
        )

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        reason = await health.not_ready()
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {reason}\n")

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


@contextlib.asynccontextmanager
async def serving(config: Config, health: Health) -> AsyncIterator[int | None]:
    """Listen on metrics.listen meanwhile (when counting: see counting()); the port really
    listened on (metrics.listen may end in :0), logged, or None when off."""
    address, meters = config.metrics.address, metrics.active()
    if address is None or meters is None:
        yield None
        return
    from bot.serving import serve_app

    host, wanted = address
    runner, port = await serve_app(
        application(meters, health), host=host, port=wanted, port_setting="metrics.listen"
    )
    shown = f"[{host}]" if ":" in host else host
    log.info("metrics listening on http://%s:%d (/metrics, /healthz, /readyz)", shown, port)
    try:
        yield port
    finally:
        await runner.cleanup()
